"""The experiments behind the claims report, one folder each (bsuite style).

figures/experiments/<experiment>/ holds the whole experiment:

    settings.py               its grid: ``configs(budget)``, the simulator runs it needs (figures/budgets.py; empty
                              for theory), ``describe(budget)``, its grid in words, and for a sequential design
                              ``staged_runs``, the runs a later look adds for the claims still undecided
    evidence.py               ``Evidence``, its typed record (a dataclass derived from figures/evidence.py's
                              `Evidence`: the per-seed numbers its claims are judged on), and how it is read from
                              the runs (no plotting)
    judges.py                 ``CLAIMS``, the records of the claims it tests (figures/records.py): margins,
                              preconditions and the judges, which read the evidence only
    plot_<figure>.py          each figure drawn from it (figures/__init__.py `FIGURES`)
    __init__.py               its face: ``NAME`` (the key of its evidence in ``<out>/data/*.json``), ``configs``,
                              ``describe``, ``Evidence``, ``CLAIMS`` and ``measure(ctx)``, the evidence under its
                              sequential design (figures/staging.py)

The report (figures/claims.py) lists the claims in the order of `ORDER`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXPERIMENTS = ("delayed_sgd", "async_grpo", "mnist_delay", "mnist_samples", "contamination", "token_frictions",
               "token_horizon", "system")
ORDER = ("GAC-1", "GAC-2", "VCPO-1", "VCPO-2", "VCPO-3", "DG-1", "DDG-1", "DDG-2", "DDG-3", "DDG-4", "AREAL-1",
         "AREAL-2")


def experiment(name: str) -> ModuleType:
    if name not in EXPERIMENTS:
        raise ValueError(f"unknown experiment {name!r}; allowed: {', '.join(EXPERIMENTS)}")
    return importlib.import_module(f"figures.experiments.{name}")


def all_claims() -> list:
    """Every claim record, in report order."""
    claims = {c.id: c for name in EXPERIMENTS for c in experiment(name).CLAIMS}
    missing = [cid for cid in ORDER if cid not in claims]
    if missing:
        raise RuntimeError(f"claims without a record: {missing}")
    return [claims[cid] for cid in ORDER] + [c for cid, c in claims.items() if cid not in ORDER]
