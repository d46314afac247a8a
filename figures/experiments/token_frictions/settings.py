"""The token_frictions experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

import math
from typing import Any

from figures.budgets import Budget
from testbed.config import RunConfig
from testbed.frictions import TOKEN_REVERSAL_PRESET, token_reversal_preset

NAME = "token_frictions"
METHODS = ("pg", "pmpo", "ppo", "dg")
FAILED = 1.0  # a diverged run: every sequence wrong
CALIBRATED_H = 10  # the sequence length the preset was calibrated at (sweeps/calibration/RULE.md)
# the panel's settings, by name, and the preset's panel entry for each (testbed.frictions.PANEL)
SETTINGS = {"none": "none", "staleness": "staleness", "actor bugs": "bugs", "reward corruption": "corruption",
            "rare discovery": "rare", "all four": "all"}


def rare_threshold(min_correct: int, H: int) -> int:
    """The preset's rare-discovery threshold (``min_correct`` of `CALIBRATED_H` tokens right) at length ``H``:
    the same fraction of the sequence, ceil(min_correct * H / CALIBRATED_H), at least 1."""
    return max(1, math.ceil(min_correct * H / CALIBRATED_H))


def settings(b: Budget) -> dict[str, dict[str, Any]]:
    """name -> the frozen preset's run settings (``delay``, ``frictions``, ``task_args``) of that panel entry."""
    return {name: token_reversal_preset(which) for name, which in SETTINGS.items()}


def run(b: Budget, recipe: str, setting: str, seed: int, H: int | None = None) -> RunConfig:
    entry = settings(b)[setting]
    H = H or b.tr_H
    args = {"H": H, "M": b.tr_M, "n_eval": b.tr_n_eval, **entry["task_args"]}
    if "min_correct" in args:
        args["min_correct"] = rare_threshold(int(args["min_correct"]), H)
    return RunConfig(task="token_reversal", recipe=recipe, delay=entry["delay"], frictions=entry["frictions"],
                     seed=seed, steps=b.tr_steps, log_every=b.tr_log, n_actors=b.tr_actors, batch_size=b.tr_episodes,
                     task_args=args)


def cell(b: Budget, recipe: str, setting: str, H: int | None = None, seeds: tuple[int, ...] | None = None
         ) -> list[RunConfig]:
    return [run(b, recipe, setting, s, H) for s in (b.tr_seeds if seeds is None else seeds)]


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The first look's runs (``seeds``: those seeds instead)."""
    return [c for r in METHODS for s in settings(b) for c in cell(b, r, s, seeds=seeds)]


def describe(b: Budget) -> str:
    return (f"token reversal M = {b.tr_M}, H = {b.tr_H}, {b.tr_actors} actors, {b.tr_episodes} episodes per step, "
            f"{b.tr_steps:,} learner steps, {b.tr_design.seeds_shown()}; settings {', '.join(settings(b))}; frictions: "
            f"the calibrated preset {TOKEN_REVERSAL_PRESET} (testbed/frictions.py); methods {', '.join(METHODS)}")


def resolution_floor(b: Budget, H: int | None = None) -> float:
    """Half a sampled sequence of one evaluation: the floor of an error rate on the log scale."""
    import torch

    from testbed.tasks import make_task

    task = make_task("token_reversal", H=H or b.tr_H, M=b.tr_M, n_eval=b.tr_n_eval)
    return 0.5 / int(task.eval_contexts(torch.Generator().manual_seed(0)).shape[0])


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The runs a later look trains for DDG-2: every method with all four frictions."""
    return [c for r in METHODS for c in cell(b, r, "all four", seeds=seeds)] if claim_ids else []
