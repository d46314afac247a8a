"""The mnist_samples experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from figures import oracle_runs
from figures.common import Context, seed_curves, values
from figures.evidence import Cell, cell_key
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.mnist_delay.settings import resolution_floor
from figures.experiments.mnist_samples.settings import CHANCE, METHODS, cell, configs, describe
from figures.staging import cell_health
from testbed.util.endpoints import tail_mean

CE: Cell = ("ce",)  # the supervised cross-entropy runs' cell


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell ``(method, k)`` (k samples per image; ``inf``: the exact expected update) and `CE` (supervised
    cross-entropy), one value per seed: final test error (``error``); health flags of the sampled
    cells (``health``)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "health", "curves")
    KEYED: ClassVar[tuple[str, ...]] = ("error", "health", "curves")

    k: list[int] = field(default_factory=list)
    floor: float = float("nan")
    error: dict[Cell, list[float | None]] = field(default_factory=dict)
    health: dict[Cell, dict[str, list[Any]]] = field(default_factory=dict)
    # the learning curves (per cell, per seed: test error at each of ``versions``) and whether the budget is the
    # pre-registered one (DG-1 then reads the learning phase, its window from PG at k = 1)
    versions: list[float] = field(default_factory=list)
    curves: dict[Cell, list[list[float | None]]] = field(default_factory=dict)
    confirmatory: bool = False


def _oracle(ctx: Context, kind: str, seeds: tuple[int, ...], versions: list[float] | None = None
            ) -> tuple[np.ndarray, list[list[float]]]:
    """Per seed, the final error of an exact-gradient or cross-entropy run (the last 5% of its evaluations) and its
    test error at each of ``versions`` (NaN where not logged; [] without ``versions``)."""
    b = ctx.budget
    out, curve = [], []
    args = dict(b.mnist_task_args) or None
    for s in seeds:
        ctx.touch([oracle_runs.rows_path(ctx.cache, kind, s, b.mnist_steps, b.mnist_log, args)])
        df = oracle_runs.cached(ctx.cache, kind, s, b.mnist_steps, b.mnist_log, cached_only=True, task_args=args)
        out.append(tail_mean(df["test_error"], 0.05))
        if versions:
            at = dict(zip(df["step"].astype(float), df["test_error"].astype(float), strict=True))
            curve.append([at.get(x, float("nan")) for x in versions])
    return np.asarray(out), curve


def build(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    ev = Evidence(grid=describe(b), seeds=list(seeds), k=list(b.samples_k), floor=resolution_floor(dict(b.mnist_task_args)),
                  confirmatory=b.name == "confirmatory")
    for m in METHODS:
        for k in b.samples_k:
            ev.error[cell_key(m, k)] = values(table, cell(b, m, k, seeds), "test_error", CHANCE)
            ev.health[cell_key(m, k)] = cell_health(ctx, cell(b, m, k, seeds))
            if ev.confirmatory:
                ev.versions, ev.curves[cell_key(m, k)] = seed_curves(table, cell(b, m, k, seeds), ev.versions, CHANCE)
    for key, kind in ((("pg", "inf"), "pg_exact"), (("dg", "inf"), "dg_exact"), (CE, "ce")):
        ev.error[key], curve = _oracle(ctx, kind, seeds, ev.versions if ev.confirmatory else None)
        if ev.confirmatory:
            ev.curves[key] = curve
    return ev
