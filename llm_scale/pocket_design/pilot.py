"""A pilot's file and runs: the study's sweep file with an optional ``[pilot]`` table (`load_pilot`), the runs it
plans seed by seed (`pilot_plan`), and the runs trained and tabulated in the study's columns (`run_pilot`)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

from testbed.util.endpoints import last_mean, second_half_mean
from testbed.util.files import atomic_write_frame, atomic_write_text


def _late_cos(directory: Path, column: str = "grad_cos_within") -> float:
    """The second-half mean (`testbed.util.endpoints.second_half_mean`, the study's window) of ``column``
    (``grad_cos_within``: the study's quantity; ``grad_cos_across``: consecutive updates') in a run's metrics.csv;
    NaN when the file or the column is missing."""
    import pandas as pd

    try:
        table = pd.read_csv(directory / "metrics.csv")
    except (OSError, ValueError):
        return math.nan
    return second_half_mean(table[column]) if column in table else math.nan


def load_pilot(sweep_file: str) -> tuple[Any, list[dict[str, Any]], str]:
    """(the study's sweep, the pilot's cells, its choice rule) of a pilot file: a study sweep file (`study.load_sweep`)
    with an optional ``[pilot]`` table: ``cells``, each a ``name``, its learning rates ``lr`` and the [train]
    settings it overrides, and ``choose`` (`choose_lr`). Without one: one cell named "" at the sweep's learning
    rates, chosen by "largest_lr". A bad file: `UsageError`, one line."""
    from ..config import TrainConfig, UsageError
    from ..study import load_sweep, read_tables

    raw = read_tables(sweep_file)
    pilot = raw.pop("pilot", None)
    sweep = load_sweep(sweep_file, raw)
    if pilot is None:
        return sweep, [{"name": "", "lr": list(sweep.lrs)}], "largest_lr"
    if not isinstance(pilot, dict):
        raise UsageError(f"pocket pilot: {sweep_file}: [pilot] must be a table, got {pilot!r}")
    cells, choose = list(pilot.get("cells", [])), str(pilot.get("choose", "largest_gain"))
    fields = set(TrainConfig.__dataclass_fields__)
    for cell in cells:
        bad = sorted(set(cell) - {"name", "lr"} - fields)
        if bad or not cell.get("name") or not cell.get("lr"):
            raise UsageError(f"pocket pilot: {sweep_file}: a [pilot] cell needs a name, lr and TrainConfig settings, got {cell}")
    if not cells or choose not in ("largest_lr", "largest_gain"):
        raise UsageError(f"pocket pilot: {sweep_file}: [pilot] needs cells and choose in largest_lr, largest_gain")
    return sweep, cells, choose


def pilot_plan(sweep: Any, cells: list[dict[str, Any]], arms: tuple[str, ...], only: tuple[str, float] | None = None
               ) -> list[tuple[Any, Any, dict[str, Any], float, bool]]:
    """The pilot's runs, seed-major (seed, cell, learning rate, arm: an interrupted pilot has its arms balanced by
    seed), each as (run, the cell's sweep, cell, lr, chosen): the study's run (`study.make_run`, at the sweep's first
    eta) of the sweep with the cell's [train] overrides; ``chosen`` False where ``only`` (cell, lr) names another
    setting."""
    import dataclasses

    from ..study import make_run

    planned = []
    for seed in sweep.search_seeds:
        for cell in cells:
            settings = {k: v for k, v in cell.items() if k not in ("name", "lr")}
            at = dataclasses.replace(sweep, train={**sweep.train, **settings})
            for lr in cell["lr"]:
                chosen = only is None or (cell["name"], float(lr)) == (only[0], float(only[1]))
                planned += [(make_run(at, "search", arm, sweep.etas[0], float(lr), seed), at, cell, float(lr), chosen)
                            for arm in arms]  # fmt: skip
    return planned


def run_pilot(sweep_file: str, runs: Path, out: Path, arms: tuple[str, ...], log: Any = print, start: bool = True,
              only: tuple[str, float] | None = None, parallel: int = 1) -> None:
    """Run the pilot's ``arms`` (the study's runs of ``sweep_file``'s cells, `load_pilot`; same keys and directories
    as the study's; finished ones are kept) seed by seed across the cells and learning rates, ``parallel`` at a
    time (the study's scheduler, `study.execute`: an interrupted run resumes from its last checkpoint, one begun or
    finished by code that has changed since is trained afresh), then write
    ``out``/runs.csv, updates.csv and study.json in the study's columns (and the cell's). An arm is sync, stale
    or a recipe of the file's ``[compare] recipes`` (trained stale, at the file's first eta). ``start`` False:
    tabulate what has finished, start nothing (a run not finished is a row with ``finished`` False). ``only``
    (cell, lr): start runs of that setting alone (every setting's finished runs are tabulated)."""
    import pandas as pd

    from ..config import UsageError
    from ..study import STALE, SYNC, execute, late_split_half_cosine, run_result, run_updates

    sweep, cells, choose = load_pilot(sweep_file)
    bad = [a for a in arms if a not in (SYNC, STALE, *sweep.recipes)]
    if bad:
        raise UsageError(f"pocket pilot: arm {bad[0]!r} is neither sync, stale nor one of {sweep_file}'s [compare] "
                         f"recipes {list(sweep.recipes)}")  # fmt: skip
    planned = pilot_plan(sweep, cells, arms, only)
    if start:
        execute([run for run, *_, chosen in planned if chosen], runs, budget_s=math.inf, parallel=parallel,
                device=None, log=sys.stdout)  # fmt: skip
    rows, ups = [], []
    for run, at, cell, lr, chosen in planned:
        d = runs / run.key
        summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
        done = run_result(d, recipe=run.recipe) is not None  # the study's test: finished by the code as it is now
        if not done and not chosen:
            continue  # a setting this invocation does not run: no row
        trajectory = run_updates(d) if done else []
        evals = [r["eval_reward"] for r in trajectory if math.isfinite(r["eval_reward"])]
        n = sweep.last_evals
        rows.append({"key": run.key, "stage": "search", "cell": cell["name"], "arm": run.arm, "eta": sweep.etas[0],
                     "lr": lr, "seed": run.seed, "sequences": at.train.get("prompts_per_step", 8) * at.train.get("group_size", 8),
                     "finished": done, "accuracy": last_mean(evals, n, min_count=n + 1),
                     "diverged": summary.get("status") == "diverged", "accuracy_v0": evals[0] if evals else math.nan,
                     "wall_seconds": summary.get("wall_seconds", math.nan), "late_grad_cos_within": _late_cos(d),
                     "late_grad_cos_across": _late_cos(d, "grad_cos_across"),
                     "late_grad_cos_split_half": late_split_half_cosine(d / "grad_steps.csv")})  # fmt: skip
        ups += [{"key": run.key, **r} for r in trajectory]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_frame(pd.DataFrame(rows), out / "runs.csv")
    atomic_write_frame(pd.DataFrame(ups), out / "updates.csv")
    atomic_write_text(out / "study.json", json.dumps({"sweep": sweep_file, "arms": list(arms), "eval_problems": sweep.eval_problems,
                                                "rule": {"last_evals": sweep.last_evals}, "choose": choose,
                                                "cells": cells}, indent=1) + "\n")  # fmt: skip
