"""Every figure and the claims report, regenerated from scratch: ``python -m figures [all|NAME|list|claims]``.

One folder per experiment, figures/experiments/<experiment>/ (figures/experiments/__init__.py): its settings,
its evidence, its judges and the figures drawn from it, one module each, ``plot_<figure>.py`` (listed in
FIGURES, in report order; `HOME` names each figure's experiment). A figure module defines

    NAME, CLAIMS                  its file name and the claim ids it shows
    configs(quick) -> [RunConfig] the simulator runs it reads (trained and cached by the testbed's
                                  results store; empty for theory-only figures)
    make(ctx) -> {experiment: evidence}
                                  draws NAME.png / NAME.pdf (+ caption) under ctx.out and returns the
                                  evidence of the experiment(s) it draws, which figures/claims.py judges

See figures/__main__.py for the command line, figures/claims.py for the report, testbed/util/stats.py for
the statistics, docs/ALGORITHMS.md for the methods and the claims' paper values.
"""

from __future__ import annotations

import importlib
from types import ModuleType

FIGURES = (
    "stability_map",
    "quadratic_gac",
    "grad_cosine",
    "async_grpo",
    "contamination",
    "mnist_alignment",
    "mnist_delay",
    "vcpo_traces",
    "vcpo_ablation",
    "mnist_samples",
    "token_frictions",
    "token_horizon",
)
HOME = {"stability_map": "delayed_sgd", "quadratic_gac": "delayed_sgd", "grad_cosine": "async_grpo",
        "async_grpo": "async_grpo", "contamination": "contamination", "mnist_alignment": "contamination",
        "mnist_delay": "mnist_delay", "vcpo_traces": "mnist_delay", "vcpo_ablation": "mnist_delay",
        "mnist_samples": "mnist_samples", "token_frictions": "token_frictions", "token_horizon": "token_horizon"}


def module(name: str) -> ModuleType:
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; allowed: {', '.join(FIGURES)}")
    return importlib.import_module(f"figures.experiments.{HOME[name]}.plot_{name}")
