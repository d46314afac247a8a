"""The token_frictions experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from figures.common import Context, values
from figures.evidence import Cell
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.token_frictions.settings import (
    FAILED,
    METHODS,
    cell,
    configs,
    describe,
    resolution_floor,
    settings,
)
from figures.staging import cell_health


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell ``(method, setting)`` (the panel's settings, `SETTINGS`), one value per seed: final sampled
    sequence error (``error``, every sequence wrong for a diverged run) and health flags (``health``); the
    sequence length ``H`` and the error floor of one evaluation (``floor``)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "health")
    KEYED: ClassVar[tuple[str, ...]] = ("error", "health")

    settings: list[str] = field(default_factory=list)
    H: int = 0
    floor: float = float("nan")
    error: dict[Cell, list[float | None]] = field(default_factory=dict)
    health: dict[Cell, dict[str, list[Any]]] = field(default_factory=dict)
    confirmatory: bool = False  # the pre-registered design: solved seeds with exact tests, baselines off the floor


def build(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    ev = Evidence(grid=describe(b), seeds=list(seeds), settings=list(settings(b)), H=b.tr_H,
                  floor=resolution_floor(b), confirmatory=b.name == "confirmatory")
    for r in METHODS:
        for s in settings(b):
            ev.error[r, s] = values(table, cell(b, r, s, seeds=seeds), "test_error", FAILED)
            ev.health[r, s] = cell_health(ctx, cell(b, r, s, seeds=seeds))
    return ev
