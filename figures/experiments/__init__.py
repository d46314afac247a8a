"""The experiments behind the claims report, one module each (bsuite style: configs + scoring).

An experiment module defines

    NAME                      its name (the key of its evidence in ``<out>/data/*.json``)
    configs(budget)           the simulator runs it needs (figures/budgets.py; empty for theory)
    describe(budget)          its grid in words (printed in the report beside each claim)
    Evidence                  its typed record (a dataclass derived from figures/evidence.py's `Evidence`)
    evidence(ctx)             that record: the numbers its claims are judged on (per-seed values; no plotting)
    CLAIMS                    the records of the claims it tests (figures/records.py)

Plotting lives in the figure modules (figures/plot_<figure>.py), which draw an experiment's runs and
evidence; judging lives in the records' ``judge`` functions. The report (figures/claims.py) lists
the claims in the order of `ORDER`.
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
