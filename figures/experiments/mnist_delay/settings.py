"""The mnist_delay experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from typing import Any

from figures.budgets import Budget, lag_of
from figures.evidence import Cell
from testbed.config import RunConfig

NAME = "mnist_delay"
RECIPES = ("pg", "is", "tis", "ppo", "decoupled_ppo", "vcpo", "dg")
ABLATIONS = {"vcpo": "vcpo", "no ess_lr": "opob+tis(level=sequence, c=8)", "no opob": "tis(level=sequence, c=8)+ess_lr"}
CHANCE = 0.9


def run(b: Budget, recipe: str, delay: str, seed: int, frictions: str = "none") -> RunConfig:
    return RunConfig(task="mnist", recipe=recipe, delay=delay, frictions=frictions, seed=seed, steps=b.mnist_steps,
                     log_every=b.mnist_log)


def cell(b: Budget, recipe: str, delay: str, frictions: str = "none", seeds: tuple[int, ...] | None = None
         ) -> list[RunConfig]:
    """One setting, one config per seed (aligned by seed across cells; default: the first look's seeds)."""
    return [run(b, recipe, delay, s, frictions) for s in (b.mnist_seeds if seeds is None else seeds)]


def sweep(b: Budget, recipes: tuple[str, ...] = RECIPES, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    return [c for r in recipes for d in b.mnist_delays for c in cell(b, r, d, seeds=seeds)]


def ablation(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    return [c for spec in ABLATIONS.values() for d in b.ablation_delays for c in cell(b, spec, d, seeds=seeds)]


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The runs of the first look (``seeds``: those seeds instead; ``b.all_seeds("mnist")``: the cap)."""
    return sweep(b, seeds=seeds) + ablation(b, seeds=seeds)


def _cells(b: Budget, keys: list[Cell], seeds: tuple[int, ...]) -> list[RunConfig]:
    specs = {**{r: r for r in RECIPES}, **ABLATIONS}
    out = []
    for name, d in keys:
        out += cell(b, specs[name], d, seeds=seeds)
    return out


def claim_cells(claim_id: str, delays: list[str], ablation_delays: list[str]) -> list[Cell]:
    """The evidence cells ``(name, delay)`` a claim compares: the ones staged for it."""
    last = delays[-1]
    lags = [d for d in delays if d != "sync" and lag_of(d) <= 128]
    d3 = largest_at_most(list(ablation_delays), 128) or ablation_delays[0]
    return {"DDG-1": [("dg", last), ("is", last), ("pg", last)],
            "VCPO-2": [("vcpo", "sync")] + [(r, d) for d in lags for r in ("vcpo", "pg")],
            "VCPO-3": [(n, d3) for n in ABLATIONS],
            "VCPO-1": []}[claim_id]


def describe(b: Budget) -> str:
    return (f"MNIST bandit, one step per batch, fixed actor delay D in {', '.join(str(lag_of(d)) for d in b.mnist_delays)}; "
            f"{b.mnist_steps:,} learner steps of 100 images; {b.mnist_design.seeds_shown()}; recipes {', '.join(RECIPES)}; "
            f"VCPO ablations at D = {', '.join(str(lag_of(d)) for d in b.ablation_delays)}")


def resolution_floor(task_args: dict[str, Any] | None = None) -> float:
    """Half a test image: the floor of an error rate on the log scale (``task_args``: the MNIST task's options,
    default the embedded subset)."""
    from testbed.tasks import make_task

    return 0.5 / make_task("mnist", **(task_args or {})).n_test


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The runs a later look trains for the undecided claims ``claim_ids``: the cells they compare."""
    keys = {k for c in claim_ids for k in claim_cells(c, list(b.mnist_delays), list(b.ablation_delays))}
    return _cells(b, sorted(keys), seeds)


def largest_at_most(delays: list[str], cap: int) -> str | None:
    cands = [d for d in delays if d != "sync" and lag_of(d) <= cap]
    return cands[-1] if cands else None
