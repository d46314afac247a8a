"""The token_horizon experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from figures.common import Context, values
from figures.confirm import longest_solved
from figures.evidence import Cell, cell_key
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.token_frictions import settings as tf
from figures.experiments.token_frictions.judges import SOLVED
from figures.experiments.token_horizon.settings import METHODS, cell, configs, describe


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell ``(method, H)``, one value per seed: final sampled sequence error (``error``); per method, the
    longest solved H per seed (``longest``); the grid of lengths ``H`` and the solved threshold."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "longest")
    KEYED: ClassVar[tuple[str, ...]] = ("error",)

    H: list[int] = field(default_factory=list)
    threshold: float = SOLVED
    error: dict[Cell, list[float | None]] = field(default_factory=dict)
    longest: dict[str, list[float | None]] = field(default_factory=dict)
    confirmatory: bool = False  # the pre-registered design: per-seed exact comparisons on a unit grid


def longest(errors: np.ndarray, hs: list[int]) -> list[float]:
    """Per seed (row of ``errors`` [seeds, H]): the largest H with error <= SOLVED (0 if none; NaN if a row has
    no value at all): `figures.confirm.longest_solved` at SOLVED."""
    return longest_solved(errors, hs, SOLVED)


def build(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    hs = list(b.tr_horizons)
    ev = Evidence(grid=describe(b), seeds=list(seeds), H=hs, threshold=SOLVED, confirmatory=b.name == "confirmatory")
    for r in METHODS:
        rows = np.stack([values(table, cell(b, r, h, seeds), "test_error", tf.FAILED) for h in hs], axis=1)
        for j, h in enumerate(hs):
            ev.error[cell_key(r, h)] = rows[:, j]
        ev.longest[r] = longest(rows, hs)
    return ev
