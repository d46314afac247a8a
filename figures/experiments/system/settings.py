"""The system experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures.budgets import Budget
from testbed.config import RunConfig

NAME = "system"


def configs(b: Budget) -> list[RunConfig]:
    return []


def describe(b: Budget) -> str:
    return "none: no throughput is measured"
