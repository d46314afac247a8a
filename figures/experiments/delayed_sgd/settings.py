"""The delayed_sgd experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures.budgets import Budget
from testbed.config import RunConfig

NAME = "delayed_sgd"
TAUS = (0, 1, 2, 4, 8)
FRACS = (0.1, 0.3, 0.5, 0.7, 0.9)
QUAD_TAUS = (0, 2, 8)  # the GAC-on-the-quadratic runs (figure quadratic_gac)
A_STEP = 0.1  # their a = eta * lambda, stable for tau <= 8 (a_crit(8) = 0.185)


def configs(b: Budget) -> list[RunConfig]:
    return []


def describe(b: Budget) -> str:
    return f"exact stationary autocorrelations (tau in {TAUS}) and simulations of {b.stability_steps:,} steps"
