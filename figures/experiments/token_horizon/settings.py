"""The token_horizon experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures.budgets import Budget
from figures.experiments.token_frictions import settings as tf
from figures.experiments.token_frictions.judges import SOLVED
from testbed.config import RunConfig

NAME = "token_horizon"
METHODS = tf.METHODS


def cell(b: Budget, recipe: str, H: int, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    return tf.cell(b, recipe, "all four", H, seeds=seeds)


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The first look's runs (``seeds``: those seeds instead)."""
    return [c for r in METHODS for h in b.tr_horizons for c in cell(b, r, h, seeds)]


def describe(b: Budget) -> str:
    return (f"token reversal M = {b.tr_M}, all four frictions, H in {min(b.tr_horizons)}..{max(b.tr_horizons)} "
            f"({len(b.tr_horizons)} lengths), {b.tr_steps:,} learner steps, {b.horizon_design.seeds_shown()}; solved = final "
            f"sampled error <= {SOLVED:.0%}; methods {', '.join(METHODS)}")


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The runs a later look trains for DDG-3: every method at every length (the longest solved H needs them all)."""
    return configs(b, seeds) if claim_ids else []
