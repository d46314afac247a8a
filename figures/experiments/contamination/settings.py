"""The contamination experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures.budgets import Budget, lag_of
from figures.experiments.mnist_delay import settings as mnist_delay
from testbed.config import RunConfig

NAME = "contamination"
RHOS = (0.1, 0.3)
METHODS = ("pg", "is", "mix_is", "dg")
MEASURED = ("pg", "is", "dg")
CONTAMINATION = "bug(frac=0.2, kind=random)"
ETA = 1.0
K = 5


def conditions(b: Budget) -> dict[str, tuple[str, str]]:
    """name -> (delay, frictions) of the measured conditions."""
    d = b.mnist_delays[-1]
    return {f"delay D={lag_of(d)}": (d, "none"), "contamination (20% random actors)": ("sync", CONTAMINATION)}


def cell(b: Budget, recipe: str, delay: str, frictions: str) -> list[RunConfig]:
    return mnist_delay.cell(b, recipe, delay, frictions)


def configs(b: Budget) -> list[RunConfig]:
    return [c for r in MEASURED for d, f in conditions(b).values() for c in cell(b, r, d, f)]


def describe(b: Budget) -> str:
    return (f"exact tabular model (K = {K}, rho in {RHOS}, {b.contamination_deltas} values of delta from 1e-4 to "
            f"0.5, eta = {ETA}); MNIST pg / is / dg at D = {lag_of(b.mnist_delays[-1])} and under contamination, "
            f"{b.mnist_steps:,} steps, {len(b.mnist_seeds)} seeds")
