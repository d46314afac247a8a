"""The contamination experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from figures.common import Context, values
from figures.evidence import Cell
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.contamination.settings import (
    ETA,
    MEASURED,
    METHODS,
    RHOS,
    K,
    cell,
    conditions,
    configs,
    describe,
)
from figures.experiments.mnist_delay import settings as mnist_delay
from theory.checks import cosine
from theory.delight import contamination_alignment, contamination_gradients


def true_share(g: dict[str, np.ndarray], method: str) -> float:
    """A method's true-gradient share |(1-rho) g| / |rho h|: the norm of its clean samples' part of the expected
    update over its contaminated samples' part (`contamination_gradients`; inf when the latter is 0)."""
    nc = float(np.linalg.norm(g[method + "_cont"]))
    return float(np.linalg.norm(g[method + "_clean"]) / nc) if nc > 0 else float("inf")


def theory_curves(n: int) -> dict[str, Any]:
    """cos / share / align_1 / align_100 per rho and method over delta (ascending): ``cases`` keyed by
    ``(quantity, "rho=<rho>", method)``."""
    deltas = np.logspace(-4, np.log10(0.5), n)
    cases: dict[Cell, list[float]] = {}
    for rho in RHOS:
        for d in deltas:
            g = contamination_gradients(float(d), rho, ETA, K)
            al1 = contamination_alignment(float(d), rho, ETA, K, 1.0)
            al100 = contamination_alignment(float(d), rho, ETA, K, 100.0)
            for m in METHODS:
                cases.setdefault(("cos", f"rho={rho}", m), []).append(cosine(g[m], g["true"]))
                cases.setdefault(("align_1", f"rho={rho}", m), []).append(al1[m])
                cases.setdefault(("align_100", f"rho={rho}", m), []).append(al100[m])
                if m + "_cont" in g:
                    cases.setdefault(("share", f"rho={rho}", m), []).append(true_share(g, m))
    return {"deltas": deltas.tolist(), "cases": cases}


@dataclass
class Evidence(ExperimentEvidence):
    """The theory's curves (``theory``: `theory_curves`) and, per ``(condition, recipe, "late")`` (the mean
    cosine to the true gradient over the second half) and ``(condition, recipe, "error")``, one value per seed
    (``measured``); the measured conditions' names (``conditions``)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("measured",)
    KEYED: ClassVar[tuple[str, ...]] = ("measured", "theory.cases")

    theory: dict[str, Any] = field(default_factory=dict)
    measured: dict[Cell, list[float | None]] = field(default_factory=dict)
    conditions: list[str] = field(default_factory=list)


def measure(ctx: Context) -> Evidence:
    b = ctx.budget
    ev = Evidence(grid=describe(b), seeds=list(b.mnist_seeds), theory=theory_curves(b.contamination_deltas),
                  conditions=list(conditions(b)))
    table = ctx.table(configs(b))
    for name, (d, f) in conditions(b).items():
        for r in MEASURED:
            c = cell(b, r, d, f)
            ev.measured[name, r, "late"] = values(table, c, "cos_true_pg", start=0.5)
            ev.measured[name, r, "error"] = values(table, c, "test_error", mnist_delay.CHANCE)
    return ev
