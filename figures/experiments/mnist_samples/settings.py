"""The mnist_samples experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures import oracle_runs
from figures.budgets import Budget
from testbed.config import RunConfig

NAME = "mnist_samples"
METHODS = ("pg", "dg")
CHANCE = 0.9


def cell(b: Budget, method: str, k: int, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    return [RunConfig(task="mnist", recipe=f"{method}+mean", delay="sync", seed=s, steps=b.mnist_steps,
                      log_every=b.mnist_log, batch_size=100 * k, group_size=k, task_args=dict(b.mnist_task_args))
            for s in (b.mnist_seeds if seeds is None else seeds)]


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The first look's runs (``seeds``: those seeds instead)."""
    return [c for m in METHODS for k in b.samples_k for c in cell(b, m, k, seeds)]


def oracle_jobs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[tuple[str, int]]:
    return [(kind, s) for kind in oracle_runs.KINDS for s in (b.mnist_seeds if seeds is None else seeds)]


def describe(b: Budget) -> str:
    data = f" on {', '.join(f'{k} = {v}' for k, v in b.mnist_task_args)}" if b.mnist_task_args else ""
    return (f"MNIST bandit{data} on-policy, 100 images x k samples per batch, k in {', '.join(map(str, b.samples_k))} and "
            f"infinity (exact expected update), plus supervised cross-entropy; pg and dg with the batch-mean "
            f"baseline; {b.mnist_steps:,} steps; {b.mnist_design.seeds_shown()}")


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The testbed runs a later look trains for DG-1: pg and dg at k = 1 (plus the exact-gradient runs, not
    testbed runs: `oracle_jobs`)."""
    return [c for m in METHODS for c in cell(b, m, b.samples_k[0], seeds)] if claim_ids else []
