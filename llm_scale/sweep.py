"""An LLM sweep: ``python -m llm_scale sweep FILE``, a grid of ``train`` runs written as a testbed sweep is.

The file (TOML or YAML) has the project's one grid format (testbed/util/grid.py): ``[base]`` settings shared by
every run and ``[grid]`` lists whose cartesian product, in file order, is the sweep (``seeds = N`` for seeds 0 to
N - 1). Settings are the fields of `llm_scale.config.TrainConfig` (``python -m llm_scale train --help``), less
those the sweep sets per run (``out``, ``resume``, ``progress``, ``tiny``); ``eval_every`` >= 1 is required, since
a run's score is its greedy accuracy on held-out problems. Top-level keys::

    name = "lr scan"                 # optional
    description = "..."              # optional
    runs = "runs/llm_sweep"          # the run cache (the command's --runs wins)
    out = "results/llm/sweep"        # the tables (the command's --out wins)
    last_evals = 1                   # a run's accuracy: the mean of its last N evaluations
    imports = ["mystab"]             # modules holding your own stabilizers (as --import MODULE)

    [base]
    model = "pocket-arithmetic"
    task = "arithmetic(max_operand=20)"
    steps = 50
    eval_every = 10

    [grid]
    recipe = ["grpo", "gac", "dg"]
    max_staleness = [0, 8]
    seeds = 3

Each run is the study's: a ``python -m llm_scale train`` in a directory of ``--runs`` named by the hash of its
settings (`llm_scale.study.config_run`), so a run the sweep shares with a study or a pilot is trained once; the
project's planning rule (testbed/util/planning.py) reuses finished runs, trains a repeated one once and retrains one
whose code changed; runs go to the executor the command names (local worker processes, or Ray) at most
``--parallel`` at a time, for at most ``--budget-s`` seconds, and an interrupted run resumes from its last checkpoint
(``checkpoint_every``) on the next invocation. Outputs under ``--out``: runs.csv (one row per run: its grid
settings, key, whether it finished, its accuracy, whether it diverged, device and wall time), updates.csv (one row
per finished run and policy version, `llm_scale.study.run_updates`) and cells.csv (per setting of the grid less the
seed: the mean accuracy over its finished seeds, its standard error, the seeds finished and the runs diverged; a
diverged run's accuracy is undefined, so its cell's mean and SE are NaN, `testbed.util.stats.mean_se`), printed as a
table.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.util.arguments import ArgumentParser
from testbed.util.errors import UsageError
from testbed.util.files import atomic_write_frame, atomic_write_text
from testbed.util.grid import grid_keys, grid_settings
from testbed.util.settings_file import imported_modules, read_settings
from testbed.util.stats import mean_se

from .config import TrainConfig
from .study import Run, add_scheduler_arguments, config_run, execute, run_result, run_updates, scheduler_executor

TOP_KEYS = ("name", "description", "runs", "out", "last_evals", "imports", "base", "grid")
SWEEP_SET = ("out", "resume", "progress", "tiny")  # TrainConfig fields the sweep sets itself
MAX_RUNS = 10_000  # a larger grid is a typo more often than a plan


@dataclass(frozen=True)
class LLMSweep:
    """A checked LLM sweep file: its runs, in the grid's order, with the grid settings that name each."""

    source: str
    runs: tuple[Run, ...]
    settings: tuple[dict[str, Any], ...]  # per run: the [grid] values that make it (the columns of runs.csv)
    grid_keys: tuple[str, ...]  # the [grid] settings, in file order (``seed`` last when given as seeds = N)
    last_evals: int = 1
    runs_dir: str | None = None
    out: str | None = None
    name: str = ""

    @property
    def cell_keys(self) -> tuple[str, ...]:
        """The grid settings that name a cell: all but the seed."""
        return tuple(k for k in self.grid_keys if k != "seed")


def _check_count(n: int, what: str) -> None:
    if n > MAX_RUNS:
        raise UsageError(f"{what} gives {n:,} runs; an LLM sweep holds at most {MAX_RUNS:,}")


def load(path: str | Path) -> LLMSweep:
    """Read and check an LLM sweep file (module docstring); one-line `UsageError` for anything wrong in it."""
    spec = read_settings(path, "sweep file")
    unknown = [k for k in spec if k not in TOP_KEYS]
    if unknown:
        raise UsageError(f"{path}: unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(TOP_KEYS)}")
    for key in ("name", "description", "runs", "out"):
        if key in spec and not (isinstance(spec[key], str) and spec[key].strip()):
            raise UsageError(f"{path}: {key} must be a non-empty string, got {spec[key]!r}")
    last = spec.get("last_evals", 1)
    if isinstance(last, bool) or not isinstance(last, int) or last < 1:
        raise UsageError(f"{path}: last_evals must be an integer >= 1, got {last!r}")
    from testbed.stabilizers.registry import import_modules

    try:
        import_modules(imported_modules(spec))
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None
    combos, varied = grid_settings(spec, _check_count), grid_keys(spec)
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    runs, settings, seen = [], [], set()
    for values in combos:
        fixed = sorted(set(values) & set(SWEEP_SET))
        if fixed:
            raise UsageError(f"{path}: {fixed} may not be set (the sweep sets them per run)")
        bad = sorted(set(values) - fields)
        if bad:
            raise UsageError(f"{path}: unknown setting(s) {bad}; see python -m llm_scale train --help")
        try:
            cfg = TrainConfig(**values, out="-", progress=False)
            cfg.validate()
        except (TypeError, ValueError) as exc:
            raise UsageError(f"{path}: {str(exc).splitlines()[0]}") from None
        if cfg.eval_every < 1:
            raise UsageError(f"{path}: eval_every must be >= 1 (a run's score is its greedy accuracy)")
        run = config_run(cfg, "sweep", cfg.recipe, cfg.max_staleness)
        if run.key in seen:
            continue
        seen.add(run.key)
        runs.append(run)
        settings.append({k: values[k] for k in varied})
    return LLMSweep(str(path), tuple(runs), tuple(settings), tuple(varied), last, spec.get("runs"), spec.get("out"),
                    str(spec.get("name", "")))  # fmt: skip


def tables(sweep: LLMSweep, root: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """(runs, updates, cells) of ``sweep`` from what has finished under ``root`` (module docstring)."""
    runs, updates = [], []
    for run, values in zip(sweep.runs, sweep.settings, strict=True):
        result = run_result(root / run.key, sweep.last_evals, recipe=run.recipe)
        row = {**values, "key": run.key, "finished": result is not None,
               "accuracy": math.nan if result is None else result["accuracy"],
               "diverged": bool(result and result["diverged"]), "device": (result or {}).get("device", ""),
               "wall_seconds": (result or {}).get("wall_seconds", math.nan)}  # fmt: skip
        runs.append(row)
        if result is not None:
            updates += [{"key": run.key, **values, **u} for u in run_updates(root / run.key)]
    cell_keys = sweep.cell_keys
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in runs:
        cells.setdefault(tuple(json.dumps(row[k], default=str) for k in cell_keys), []).append(row)
    summary = []
    for members in cells.values():
        done = [r["accuracy"] for r in members if r["finished"]]
        m, se, n = mean_se(done)
        summary.append({**{k: members[0][k] for k in cell_keys}, "accuracy": m, "se": se, "finished": n,
                        "of": len(members), "diverged": sum(r["diverged"] for r in members)})  # fmt: skip
    return runs, updates, summary


def format_cells(sweep: LLMSweep, cells: list[dict[str, Any]]) -> str:
    """The cells' table as text: one line per setting of the grid less the seed."""
    keys = sweep.cell_keys
    lines = []
    for c in cells:
        name = "  ".join(f"{k}={c[k]}" for k in keys) or "(all runs)"
        acc = "not finished" if c["finished"] == 0 else f"accuracy {c['accuracy']:.3f} +- {c['se']:.3f}"
        diverged = f", {c['diverged']} diverged" if c["diverged"] else ""
        lines.append(f"  {name}  {acc} (n={c['finished']}/{c['of']}{diverged})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``sweep FILE [--runs DIR] [--out DIR] [--parallel N] [--budget-s S] [--device D] [--plan] [--executor
    {local,ray} [--address ADDR]]``."""
    parser = ArgumentParser(prog="python -m llm_scale sweep", description=__doc__.splitlines()[0])
    parser.add_argument("file", help="sweep file (TOML or YAML: [base] and [grid] of train settings)")
    add_scheduler_arguments(parser, runs=None, out=None, budget_s=math.inf)
    argv = list(sys.argv[1:] if argv is None else argv)
    from testbed.util.executor import using

    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:  # the file, the options and the executor, checked before anything is written
        sweep = load(args.file)
        executor = scheduler_executor(args, "sweep")
        if not args.plan:
            executor.start(args.parallel)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    root = Path(args.runs or sweep.runs_dir or "runs/llm_sweep")
    out = Path(args.out or sweep.out or "results/llm/sweep")
    if not args.plan:
        t0 = time.monotonic()
        with using(executor):
            execute(list(sweep.runs), root, budget_s=args.budget_s, parallel=args.parallel, device=args.device,
                    log=sys.stdout, what="sweep")  # fmt: skip
        print(f"sweep: {time.monotonic() - t0:.0f} s", flush=True)
    runs, updates, cells = tables(sweep, root)
    import pandas as pd

    atomic_write_frame(pd.DataFrame(runs), out / "runs.csv")
    atomic_write_frame(pd.DataFrame(updates), out / "updates.csv")
    atomic_write_frame(pd.DataFrame(cells), out / "cells.csv")
    atomic_write_text(out / "sweep.json", json.dumps({"file": sweep.source, "name": sweep.name, "runs": str(root),
                                                      "last_evals": sweep.last_evals, "grid": list(sweep.grid_keys),
                                                      "command": "python -m llm_scale sweep " + " ".join(argv)},
                                                     indent=1) + "\n")  # fmt: skip
    done = sum(r["finished"] for r in runs)
    print(f"{sweep.name or sweep.source}: {done} of {len(runs)} run(s) finished under {root}; tables in {out}")
    print(format_cells(sweep, cells))
    return 0
