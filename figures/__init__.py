"""Every figure and the claims report, regenerated from scratch: ``python -m figures [all|NAME|list|claims]``.

One module per figure (listed in FIGURES, in report order). A figure module defines

    NAME, CLAIMS                  its file name and the claim ids it tests
    configs(quick) -> [RunConfig] the simulator runs it reads (trained and cached by the testbed's
                                  results store; empty for theory-only figures)
    make(ctx) -> {claim: evidence} draws NAME.png / NAME.pdf (+ caption) under ctx.out and returns the
                                  numbers that figures/claims.py turns into verdicts

See figures/__main__.py for the command line and figures/claims.py for the verdict rules.
"""

from __future__ import annotations

import importlib
from types import ModuleType

FIGURES = (
    "stability_map",
    "quadratic_gac",
    "contamination",
    "mnist_delay",
    "mnist_samples",
    "mnist_alignment",
    "grad_cosine",
    "vcpo_traces",
    "vcpo_ablation",
    "areal_staleness",
    "token_frictions",
    "token_horizon",
)


def module(name: str) -> ModuleType:
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; allowed: {', '.join(FIGURES)}")
    return importlib.import_module(f"figures.{name}")
