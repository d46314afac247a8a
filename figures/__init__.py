"""Every figure and the claims report, regenerated from scratch: ``python -m figures [all|NAME|list|claims]``.

Experiments (figures/experiments/: configs + scoring + the claim records) are separate from plotting.
One module per figure, ``figures/plot_<figure>.py`` (listed in FIGURES, in report order; the prefix keeps
plot modules apart from the experiment modules of the same name). A figure module defines

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


def module(name: str) -> ModuleType:
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; allowed: {', '.join(FIGURES)}")
    return importlib.import_module(f"figures.plot_{name}")
