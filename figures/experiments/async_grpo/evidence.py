"""The async_grpo experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from figures import gac_probe
from figures.common import Context, diverged, seed_curves, values
from figures.confirm import registered_window
from figures.evidence import Cell
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.async_grpo.settings import (
    CHANCE,
    GAC_VARIANTS,
    RECIPES,
    cell,
    configs,
    describe,
    exact_recipe,
    levels,
    regime,
    sensitivity_configs,
)
from figures.experiments.mnist_delay.settings import resolution_floor
from figures.staging import cell_health


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell (recipe, level) (level: sync or a staleness level of the regime), one value per seed:
    final test error (``error``), mean consecutive-step gradient cosine over the second half (``cos``; across
    batches only: ``cos_across``), health flags (``health``); diverged runs per cell (``diverged``); gac's action
    rates per seed (``rates``); the threshold-sensitivity table (``sensitivity``: per variant and level, error
    and action rates per seed); the regime's settings and whether it is the registered one."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "cos", "cos_across", "health", "curves", "cos_exact", "r_minibatch",
                                           "cos_minibatch")
    KEYED: ClassVar[tuple[str, ...]] = ("error", "cos", "cos_across", "diverged", "health", "rates", "sensitivity",
                                        "curves", "cos_exact", "r_minibatch", "cos_minibatch")

    registered: bool = True
    regime: dict[str, Any] = field(default_factory=dict)
    levels: list[str] = field(default_factory=list)
    floor: float = float("nan")
    error: dict[Cell, list[float | None]] = field(default_factory=dict)
    cos: dict[Cell, list[float | None]] = field(default_factory=dict)
    cos_across: dict[Cell, list[float | None]] = field(default_factory=dict)
    diverged: dict[Cell, int] = field(default_factory=dict)
    health: dict[Cell, dict[str, list[Any]]] = field(default_factory=dict)
    rates: dict[Cell, dict[str, list[float | None]]] = field(default_factory=dict)
    sensitivity: dict[Cell, dict[str, list[float | None]]] = field(default_factory=dict)
    # the learning curves (per cell, per seed: test error at each of ``versions``; chance after a divergence) and
    # whether the budget is the pre-registered confirmatory one (its claims then read the learning phase)
    versions: list[float] = field(default_factory=list)
    curves: dict[Cell, list[list[float | None]]] = field(default_factory=dict)
    confirmatory: bool = False
    # GAC's signal without the noise cap (figures/gac_probe.py), per cell of the exact recipe, per seed, over the
    # learning window ``exact_window`` (the base's, the registered phase rule): ``cos_exact`` the mean exact
    # consecutive-update cosine, ``r_minibatch`` the learner's minibatch m / B_noise, ``cos_minibatch`` its own
    # consecutive minibatch cosine; ``exact_until`` the batches the probe measured
    exact_window: list[float] = field(default_factory=list)
    exact_until: int = 0
    cos_exact: dict[Cell, list[float | None]] = field(default_factory=dict)
    r_minibatch: dict[Cell, list[float | None]] = field(default_factory=dict)
    cos_minibatch: dict[Cell, list[float | None]] = field(default_factory=dict)

    @property
    def minibatch(self) -> float | None:
        """The regime's minibatch size in samples (batch / minibatches) as recorded; None when either setting is
        not recorded."""
        try:
            return float(self.regime["batch_size"]) / float(self.regime["minibatches"])
        except (KeyError, TypeError, ValueError, ZeroDivisionError):
            return None


def build(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    reg, registered = regime()
    ev = Evidence(grid=describe(b), seeds=list(seeds), registered=registered, regime=reg.for_task("mnist"),
                  levels=list(levels()), floor=resolution_floor(), confirmatory=b.name == "confirmatory")
    for r in RECIPES:
        for d in levels():
            c = cell(b, r, d, seeds)
            ev.error[(r, d)] = values(table, c, "test_error", CHANCE)
            ev.cos[(r, d)] = values(table, c, "grad_cos_prev", start=0.5)
            ev.cos_across[(r, d)] = values(table, c, "grad_cos_across", start=0.5)
            ev.diverged[(r, d)] = diverged(table, c)
            ev.health[(r, d)] = cell_health(ctx, c)
            ev.versions, ev.curves[(r, d)] = seed_curves(table, c, ev.versions, CHANCE)
            if r == "gac":  # how often the projection acts (per seed, second half of training)
                ev.rates[("gac", d)] = {k: values(table, c, f"gac_{k}_frac", start=0.5).tolist()
                                           for k in ("projected", "skipped")}
    exact_evidence(ctx, ev, seeds)
    sens = ctx.rows(sensitivity_configs(b))
    ev.sensitivity = {}
    for name, spec in GAC_VARIANTS.items():
        for d in ("sync", levels()[-1]):
            c = cell(b, spec, d)
            src = table if spec == "gac" else sens
            ev.sensitivity[(name, d)] = {
                "error": values(src, c, "test_error", CHANCE).tolist(),
                **{k: values(src, c, f"gac_{k}_frac", start=0.5).tolist() for k in ("projected", "skipped")}}
    return ev


def exact_evidence(ctx: Context, ev: Evidence, seeds: tuple[int, ...]) -> None:
    """The exact-gradient probe's per-seed summaries over the base's learning window (`gac_probe.summary`)."""
    b = ctx.budget
    base = ev.curves.get(("grpo", "sync"))
    if not base:
        return
    window = registered_window(ev.versions, np.array(base, dtype=float))
    ev.exact_window, ev.exact_until = list(window), b.async_exact_until
    recipe = exact_recipe()
    for d in ev.levels:
        c = cell(b, recipe, d, seeds)
        ctx.touch([gac_probe.rows_path(ctx.cache, x, b.async_exact_until) for x in c])
        rows = [gac_probe.summary(gac_probe.load(ctx.cache, x, b.async_exact_until), window) for x in c]
        ev.cos_exact[(recipe, d)] = [r["cos"] for r in rows]
        ev.r_minibatch[(recipe, d)] = [r["r"] for r in rows]
        ev.cos_minibatch[(recipe, d)] = [r["cos_minibatch"] for r in rows]
