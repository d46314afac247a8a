"""A study's runs on disk and their scheduler: a finished run's result (`run_result`), its trajectory by policy
version (`run_updates`), and the runs trained as jobs of the command's executor (`execute`)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from testbed.stabilizers import fingerprint as fp
from testbed.util.endpoints import last_mean, second_half, second_half_mean
from testbed.util.files import atomic_write_text
from testbed.util.planning import plan_runs

from ..config import checkpoint_pointer, cpu_budget
from ..processes import train_job
from .sweep import Run


# -- runs on disk -----------------------------------------------------------------------------------
def run_result(directory: Path, last_evals: int = 1, recipe: str | None = None) -> dict[str, Any] | None:
    """The finished run's record (accuracy, device, wall time), or None when it is not finished, or, given its
    ``recipe``, when it was started by code that has changed since (`llm_scale.trainer.code_changed`)."""
    if recipe is not None:
        from ..trainer import code_changed

        if code_changed(directory, recipe):
            return None
    try:
        summary = json.loads((directory / "summary.json").read_text())
        if summary.get("status") == "diverged":  # a result, not a failure: its accuracy is undefined (NaN)
            return {"accuracy": math.nan, "diverged": True, "device": summary.get("device", ""),
                    "device_name": summary.get("device_name", ""), "wall_seconds": math.nan}  # fmt: skip
        if summary.get("status") != "finished":
            return None
        import csv

        with (directory / "eval.csv").open(newline="") as handle:
            evals = [(int(r["version"]), float(r["eval_reward"])) for r in csv.DictReader(handle) if r.get("eval_reward")]
    except (OSError, ValueError, KeyError):
        return None
    if not evals or evals[-1][0] != int(summary.get("of_steps", -1)):
        return None  # the file does not reach the last version: not complete
    metrics = _metrics_means(directory / "metrics.csv")
    metrics["late_grad_cos_split_half"] = late_split_half_cosine(directory / "grad_steps.csv")
    return {
        "accuracy": last_mean([v for _, v in evals], last_evals), "diverged": False, "accuracy_v0": evals[0][1] if evals[0][0] == 0 else math.nan,
        "device": summary.get("device", ""), "device_name": summary.get("device_name", ""),
        "wall_seconds": float(summary.get("wall_seconds", math.nan)), "resumed_from_step": summary.get("resumed_from_step"),
        **metrics,
    }  # fmt: skip


UPDATE_COLUMNS = ("staleness_ess", "grad_norm_raw", "reward_mean", "zero_adv_frac", "loss")


def run_updates(directory: Path) -> list[dict[str, Any]]:
    """A run's trajectory by policy version: one row per version v = 0, 1, ... (the run's updates made so
    far), with ``eval_reward`` (its greedy evaluation of v; NaN where v was not evaluated) and the
    `UPDATE_COLUMNS` of the update that made v (metrics.csv's row ``step = v - 1``; NaN at v = 0). With
    one optimizer step per update, ``staleness_ess`` is that step's ESS of the policy taking it against the
    behaviour policy and ``grad_norm_raw`` its raw gradient norm. Empty when metrics.csv cannot be read."""
    import pandas as pd

    try:
        metrics = pd.read_csv(directory / "metrics.csv", dtype=float)  # the trainer writes numbers only
    except (OSError, ValueError):
        return []
    if "step" not in metrics or not len(metrics):
        return []
    try:
        evals = pd.read_csv(directory / "eval.csv", dtype={"version": int, "eval_reward": float})
        score = dict(zip(evals["version"], evals["eval_reward"], strict=True))
    except (OSError, ValueError, KeyError):
        score = {}
    made = {int(row["step"]) + 1: row for _, row in metrics.iterrows()}
    out = []
    for v in range(max(made) + 1):
        row = made.get(v)
        out.append({"version": v, "eval_reward": score.get(v, math.nan),
                    **{c: float(row[c]) if row is not None and c in row else math.nan for c in UPDATE_COLUMNS}})
    return out


def _metrics_means(path: Path) -> dict[str, float]:
    """Per-run means of the health and staleness columns (NaN-aware), the mean seconds per update, and
    ``late_grad_cos_within``: the NaN-aware mean of ``grad_cos_within`` over the second half of the updates
    (the last ``n // 2`` of ``n``; NaN when none is defined), the window the testbed's GAC-1 reads."""
    import pandas as pd

    try:
        table = pd.read_csv(path, dtype=float)  # the trainer writes numbers only
    except (OSError, ValueError):
        return {}
    cols = ("step_seconds", "staleness_ess", "drift_ess", "grad_cos_within", "grad_cos_across", "zero_adv_frac",
            "mismatch_abs_max", "lag_mean")  # fmt: skip
    out = {f"mean_{c}": float(table[c].mean()) for c in cols if c in table}
    if "grad_cos_within" in table:
        out["late_grad_cos_within"] = second_half_mean(table["grad_cos_within"])
    return out


def late_split_half_cosine(path: Path) -> float:
    """The cosine between consecutive optimizer steps' *mean* gradients over the steps of the second half of the
    updates (the last ``n // 2`` of ``n``, `_metrics_means`' window), from a run's grad_steps.csv written with
    ``--grad-split-half``: `fingerprint.consecutive_cosine_split_half` of its ``grad_dot_prev`` (the window's
    pairs) and ``grad_half_dot`` (its steps). NaN when the file lacks them or the window has fewer than 2 steps."""
    import pandas as pd

    try:
        table = pd.read_csv(path)
    except (OSError, ValueError):
        return math.nan
    if not {"update", "grad_dot_prev", "grad_half_dot"} <= set(table.columns) or table.empty:
        return math.nan
    window = table[table["update"] >= second_half(int(table["update"].max()) + 1)]
    return fp.consecutive_cosine_split_half(window["grad_dot_prev"].to_numpy()[1:], window["grad_half_dot"].to_numpy())


def execute(
    runs: list[Run], root: Path, *, budget_s: float, parallel: int, device: str | None, log: Any = sys.stderr,
    what: str = "study",
) -> int:  # fmt: skip
    """Run (or resume) the unfinished ``runs`` under ``root``, ``parallel`` at a time, for at most ``budget_s`` seconds.

    Each run is a job (`llm_scale.processes.train_job`) of the command's executor (testbed/util/executor.py: the
    local process pool, or Ray with ``--executor ray``), so the study's runs go where a sweep's loops go. Returns
    how many runs finished in this invocation. Runs still going at the deadline are interrupted (SIGINT: each
    keeps its last checkpoint) and resumed by the next invocation; so are they on Ctrl-C, after which
    KeyboardInterrupt is raised. A run finished or begun by code that has changed since (its code.json,
    `llm_scale.trainer.code_changed`) is trained afresh: its result and its checkpoint are another code's.
    ``what`` names the command in the lines it prints ("study", "sweep").
    """
    import shutil

    from testbed.util.executor import default

    from ..trainer import code_changed

    planned = plan_runs(runs, key=lambda r: r.key, done=lambda r: run_result(root / r.key) is not None,
                        changed=lambda r: code_changed(root / r.key, r.recipe))  # fmt: skip
    todo = planned.todo
    for run in todo:
        changed = planned.changed.get(run.key)
        if changed:  # finished or begun by other code: neither its result nor its checkpoint is this code's
            print(f"{what}: {run.label} ran other code ({', '.join(changed)}): "
                  "trained afresh", file=log, flush=True)  # fmt: skip
            shutil.rmtree(root / run.key)
    if not todo:
        return 0
    deadline = time.time() + budget_s
    threads = max(1, cpu_budget() // max(1, parallel))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    root.mkdir(parents=True, exist_ok=True)
    jobs = []
    for run in todo:
        out = root / run.key
        argv = run.argv(out) + (["--device", device] if device else [])
        if checkpoint_pointer(out).is_file():
            argv += ["--resume", "auto"]
        elif (out / "metrics.csv").exists():  # begun, but nothing to resume from: start over
            shutil.rmtree(out)
        atomic_write_text(root / f"{run.key}.json", json.dumps({"stage": run.stage, "arm": run.arm, "eta": run.eta,
                                                          "lr": run.lr, "seed": run.seed,
                                                          "options": dict(run.options)}, default=str, indent=1))  # fmt: skip
        jobs.append((argv, str(root / f"{run.key}.log"), env, deadline))
    print(f"{what}: {len(todo)} run(s) to train under {root}, {parallel} at a time", file=log, flush=True)

    def ended(total: float) -> None:
        print(f"{what}: {total:g} of {len(todo)} run(s) ended ({time.strftime('%H:%M:%S')})", file=log, flush=True)

    ends = default().run(train_job, jobs, workers=parallel, on_done=ended)
    finished = 0
    for run, end in zip(todo, ends, strict=True):
        ok = run_result(root / run.key) is not None
        finished += ok
        if end == "not started":
            continue
        if end == "interrupted":
            then = "resumes from its last checkpoint" if checkpoint_pointer(root / run.key).is_file() else "no checkpoint: starts over"
            state = f"interrupted ({then} next time)"
        else:
            state = "done" if ok else f"FAILED (see {root / run.key}.log)"
        print(f"{what}: {state} {run.label}", file=log, flush=True)
    return finished


# -- verdicts ---------------------------------------------------------------------------------------


# -- the scheduler's command-line options (study, sweep) ----------------------------------------------
def add_scheduler_arguments(parser: Any, *, runs: str | None, out: str | None, budget_s: float) -> None:
    """The options of a command that trains runs with `execute`: --budget-s, --parallel, --device, --runs, --out,
    --plan, --executor, --address (``runs``/``out`` None: the command's file names the default)."""
    parser.add_argument("--budget-s", type=float, default=budget_s, help="stop starting and interrupt runs after this long")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (they share the GPU, or split the CPU threads)")
    parser.add_argument("--device", default=None, help="--device for every run (default: the runs' own, auto)")
    parser.add_argument("--runs", default=runs, help="where the cached runs live (one directory per config hash)"
                        + ("" if runs else "; default: the file's runs"))
    parser.add_argument("--out", default=out, help="tables" + ("" if out else "; default: the file's out"))
    parser.add_argument("--plan", action="store_true", help="list the runs and their state; run nothing")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the runs' jobs go: local worker processes (default), or Ray tasks (the optional "
                             "extra ray; each job starts its trainer where it runs, so --runs must be on storage "
                             "every node sees)")  # fmt: skip
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="with --executor ray: a running Ray cluster's address (default: Ray started here)")


def scheduler_executor(args: Any, what: str) -> Any:
    """The executor the options `add_scheduler_arguments` parsed name (not started); `UsageError` for bad values."""
    from testbed.util.executor import make

    from ..config import UsageError

    if args.parallel < 1 or not args.budget_s > 0:
        raise UsageError(f"{what}: --parallel must be >= 1 and --budget-s > 0, got {args.parallel} and {args.budget_s}")
    return make(args.executor, args.address, num_cpus=args.parallel)
