"""Promotion battery: ``python -m testbed validate RECIPE`` scores a recipe on a fixed set of testbed runs.

The battery (`BATTERY`) is a handful of cells, each a task at one staleness level: the K-armed
bandit at a large step size, MNIST as a contextual bandit and token reversal with a short horizon
(H = 4), each at two lags. In every cell three runs are compared on the
final held-out reward (the mean of the last two logged evaluations):

* ``recipe``: the recipe at that staleness;
* ``pg``: plain REINFORCE (``pg``) at the same staleness (the uncorrected baseline);
* ``sync``: ``pg`` without staleness (what asynchrony should not lose).

The cell's score is the part of the gap between stale PG and synchronous PG that the recipe closes,
``clip(1 - (sync - recipe) / max(sync - pg, tol), 0, 1)`` with ``tol = 0.02``: 1 when the recipe
matches or beats synchronous PG, 0 when it is no better than stale PG (or diverged). Where stale PG
loses nothing (gap below ``tol``), the score measures the harm the recipe does instead: 1 within
``tol`` of sync, falling to 0 at ``2 tol`` below it. The recipe's score is the mean over cells;
it passes at ``threshold`` (default 0.5). The baselines do not depend on the recipe: they, like every
run, are stored under ``<out>/battery/runs`` (keyed by config hash) and reused by later validations.

The scorecard, ``<out>/<slug>.json`` (default out: ``results/scorecards``), is what llm_scale shows
before an LLM run with that recipe (`llm_scale.promotion`).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.util import scorecard
from testbed.util.endpoints import last_mean
from testbed.util.scorecard import BATTERY_VERSION, DEFAULT_DIR, slug  # noqa: F401  (re-exported: the scorecard path convention)

TOL = 0.02
scorecard_path = scorecard.path_for  # the file format lives in testbed/util/scorecard.py


@dataclass(frozen=True)
class Cell:
    """One battery cell: a task (with options and run settings) at one staleness level."""

    task: str
    delay: str
    steps: int
    task_args: dict[str, Any] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)  # other RunConfig fields (batch_size, lr, ...)
    metric: str = "test_reward"

    @property
    def label(self) -> str:
        args = ",".join(f"{k}={v}" for k, v in self.task_args.items())
        return f"{self.task}({args})" if args else self.task


# How the cells were chosen (rule fixed before the selection runs, on the baselines only; the recipe under
# test is never run): from `CANDIDATES`, a cell qualifies when plain PG, over seeds 0-2 and in the
# one-step learner (one optimizer step per batch), (a) learns without staleness: mean sync value >= 0.5,
# and (b) loses to staleness: mean(sync - stale) >= 0.1 with sync > stale in every seed. For each task,
# lag and setting the shortest qualifying budget is kept; per task the lowest and the highest qualifying
# lag are kept (ties: the shorter budget, then the earlier candidate). A task with no qualifying cell is
# left out. `select_battery` applies the rule; `BATTERY` is its pick (battery v2), made with
#   python -c "from testbed.validate import select_battery; print(select_battery('results/scorecards/battery')[0])"
# On the candidates above only MNIST qualifies: on the bandit stale PG reaches synchronous PG's value (no
# gap to close), and on token reversal (H = 4, 6) synchronous PG is itself bimodal over seeds (0.56, 0.56,
# 0.96 at 100 steps), so stale PG does not lose in every seed. The battery therefore scores MNIST only.
SELECT_SEEDS = 3
MIN_SYNC = 0.5
MIN_GAP = 0.1
CANDIDATES: tuple[Cell, ...] = (
    *(Cell("bandit", f"fixed:{d}", s, settings={"lr": 1.0}) for d in (8, 32, 128) for s in (100, 200)),
    *(Cell("bandit", f"fixed:{d}", 200, settings={"lr": 3.0}) for d in (32, 128)),
    *(Cell("mnist", f"fixed:{d}", 300) for d in (4, 16, 64)),
    *(Cell("token_reversal", f"fixed:{d}", s, {"H": 4}) for d in (4, 16, 64) for s in (100, 300)),
    *(Cell("token_reversal", f"fixed:{d}", 300, {"H": 6}) for d in (16, 64)),
)
BATTERY: tuple[Cell, ...] = (
    Cell("mnist", "fixed:4", 300),
    Cell("mnist", "fixed:64", 300),
)


def qualifies(pg: list[float], sync: list[float]) -> bool:
    """The selection rule on one candidate's per-seed baseline values (stale PG, synchronous PG)."""
    if not pg or len(pg) != len(sync) or not all(math.isfinite(v) for v in (*pg, *sync)):
        return False
    gaps = [b - a for a, b in zip(pg, sync, strict=True)]
    return sum(sync) / len(sync) >= MIN_SYNC and sum(gaps) / len(gaps) >= MIN_GAP and min(gaps) > 0


def _lag(cell: Cell) -> int:
    return int(cell.delay.split(":")[1])


def select_battery(out: str | Path, candidates: tuple[Cell, ...] = CANDIDATES, seeds: int = SELECT_SEEDS,
                   workers: int = 1) -> tuple[tuple[Cell, ...], list[dict[str, Any]]]:  # fmt: skip
    """Run the baselines of ``candidates`` (stored under ``out``) and apply the selection rule above.

    Returns (the chosen cells, one row per candidate: per-seed pg and sync values and whether it qualifies).
    """
    from testbed.sweep import run_sweep

    plan, configs = [], {}
    for cell in candidates:
        roles = cell_roles(cell, None, seeds)
        for cfgs in roles.values():
            for c in cfgs:
                configs.setdefault(c.run_id, c)
        plan.append((cell, roles))
    table = run_sweep(list(configs.values()), Path(out), workers=workers, progress=False, meta={"select_battery": BATTERY_VERSION},
                      shared=True)
    rows, chosen = [], {}
    for cell, roles in plan:
        values = {role: [_final(table, c.run_id, cell.metric)[0] for c in cfgs] for role, cfgs in roles.items()}
        ok = qualifies(values["pg"], values["sync"])
        rows.append({"cell": cell, "pg": values["pg"], "sync": values["sync"], "qualifies": ok})
        key = (cell.label, cell.delay, tuple(cell.settings.items()))
        if ok and (key not in chosen or cell.steps < chosen[key].steps):
            chosen[key] = cell
    battery = []
    for task in dict.fromkeys(c.task for c in candidates):
        cells = sorted((c for c in chosen.values() if c.task == task), key=lambda c: (_lag(c), c.steps))
        battery += cells[:1] + cells[-1:] if len(cells) > 1 else cells
    return tuple(battery), rows


def cell_roles(cell: Cell, spec: str | None, seeds: int) -> dict[str, list[Any]]:
    """The runs a battery cell compares, per role and seed 0..``seeds`` - 1: ``recipe`` (``spec`` at the cell's
    lag; left out when ``spec`` is None, as in the selection), ``pg`` (PG at the cell's lag) and ``sync`` (PG
    without staleness)."""
    roles = {} if spec is None else {"recipe": [_config(cell, spec, cell.delay, s) for s in range(seeds)]}
    return {**roles, "pg": [_config(cell, "pg", cell.delay, s) for s in range(seeds)],
            "sync": [_config(cell, "pg", "sync", s) for s in range(seeds)]}


def _config(cell: Cell, recipe: str, delay: str, seed: int) -> Any:
    from testbed.config import RunConfig

    settings = {"regime": "one_step", **cell.settings}  # the one-step learner: one optimizer step per batch
    return RunConfig(task=cell.task, recipe=recipe, delay=delay, seed=seed, steps=cell.steps,
                     log_every=max(1, cell.steps // 5), task_args=dict(cell.task_args), **settings)  # fmt: skip


def cell_score(recipe: float, pg: float, sync: float, tol: float = TOL) -> float:
    """clip(1 - (sync - recipe) / max(sync - pg, tol), 0, 1); 0 for a non-finite recipe value."""
    if not math.isfinite(recipe):
        return 0.0
    return float(min(1.0, max(0.0, 1.0 - (sync - recipe) / max(sync - pg, tol))))


def _final(table: Any, run_id: str, metric: str) -> tuple[float, str]:
    rows = table[table["run_id"] == run_id]
    if "diverged_at" in rows and rows["diverged_at"].notna().any():
        return float("nan"), "diverged"
    value = last_mean(rows[metric], 2) if metric in rows else float("nan")
    return (float("nan"), "missing") if math.isnan(value) else (value, "ok")


def validate(
    spec: str,
    *,
    out: str | Path = DEFAULT_DIR,
    seeds: int = 1,
    threshold: float = 0.5,
    workers: int = 1,
    progress: bool = True,
    battery: tuple[Cell, ...] = BATTERY,
) -> dict[str, Any]:
    """Run the battery for ``spec`` (reusing stored runs) and write its scorecard; return the scorecard."""
    from testbed.stabilizers import build
    from testbed.sweep import run_sweep

    build(spec)  # a clear error for an unknown recipe, before anything runs
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {threshold}")
    plan: list[tuple[Cell, dict[str, list[Any]]]] = []
    configs: dict[str, Any] = {}
    for cell in battery:
        roles = cell_roles(cell, spec, seeds)
        for cfgs in roles.values():
            for c in cfgs:
                c.validate()
                configs.setdefault(c.run_id, c)
        plan.append((cell, roles))
    t0 = time.perf_counter()
    table = run_sweep(list(configs.values()), Path(out) / "battery", workers=workers, progress=progress,
                      meta={"validate": spec, "battery": BATTERY_VERSION}, shared=True)  # fmt: skip
    cells = []
    for cell, roles in plan:
        values: dict[str, float] = {}
        status = "ok"
        for role, cfgs in roles.items():
            finals = [_final(table, c.run_id, cell.metric) for c in cfgs]
            if role == "recipe" and any(s != "ok" for _, s in finals):
                status = next(s for _, s in finals if s != "ok")
            good = [v for v, _ in finals if math.isfinite(v)]
            values[role] = sum(good) / len(good) if good and (role != "recipe" or status == "ok") else float("nan")
        score = cell_score(values["recipe"], values["pg"], values["sync"])
        cells.append({
            "task": cell.label, "staleness": cell.delay, "steps": cell.steps, "metric": cell.metric,
            "recipe_value": values["recipe"], "pg_value": values["pg"], "sync_value": values["sync"],
            "score": score, "status": status,
        })  # fmt: skip
    score = sum(c["score"] for c in cells) / len(cells)
    card = {
        "recipe": spec,
        **scorecard.provenance(),
        "seeds": seeds,
        "threshold": threshold,
        "tol": TOL,
        "score": score,
        "passed": scorecard.passes(score, threshold),
        "cells": cells,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "wall_s": time.perf_counter() - t0,
        "battery_cells": [asdict(c) for c in battery],
    }
    card["path"] = str(scorecard.write(card, out))
    return card


def format_card(card: dict[str, Any]) -> str:
    metrics = ", ".join(dict.fromkeys(c.get("metric", "test_reward") for c in card["cells"]))
    lines = [f"recipe, pg, sync: final held-out {metrics} (mean of the last two evaluations); score: the share of "
             "the stale-PG-to-sync gap the recipe closes",
             f"{'cell':<26} {'staleness':<10} {'recipe':>7} {'pg':>7} {'sync':>7} {'score':>6}"]
    for c in card["cells"]:
        note = "" if c["status"] == "ok" else f"  ({c['status']})"
        lines.append(f"{c['task']:<26} {c['staleness']:<10} {c['recipe_value']:7.3f} {c['pg_value']:7.3f} "
                     f"{c['sync_value']:7.3f} {c['score']:6.2f}{note}")  # fmt: skip
    verdict = "PASSED" if card["passed"] else "FAILED"
    lines.append(f"{card['recipe']!r}: score {card['score']:.2f} (pass >= {card['threshold']}): {verdict}")
    return "\n".join(lines)


def cli(argv: list[str] | None = None) -> int:
    """``python -m testbed validate RECIPE [--out DIR] [--seeds N] [--workers N] [--threshold X]``."""
    from testbed.usage import directory, integer, number
    from testbed.util.arguments import ArgumentParser
    from testbed.util.errors import one_line

    p = ArgumentParser(prog="python -m testbed validate", description=__doc__.splitlines()[0])
    p.add_argument("recipe", help="recipe spec, e.g. dg, 'tis(c=2)+ess_lr', vcpo")
    p.add_argument("--out", type=directory, default=DEFAULT_DIR,
                   help="scorecard directory (runs are cached in OUT/battery)")
    p.add_argument("--seeds", type=integer(1), default=1)
    p.add_argument("--threshold", type=number(0, 1), default=0.5)
    p.add_argument("--workers", type=integer(1), default=1, help="parallel worker processes")
    p.add_argument("--no-progress", action="store_true")
    try:
        args = p.parse_args(argv)
        from testbed.limits import check_output_dir

        check_output_dir(args.out, create=False)
        card = validate(args.recipe, out=args.out, seeds=args.seeds, threshold=args.threshold, workers=args.workers,
                        progress=not args.no_progress)  # fmt: skip
    except ValueError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return 2
    print(format_card(card))
    print(f"scorecard: {card['path']}")
    return 0 if card["passed"] else 1
