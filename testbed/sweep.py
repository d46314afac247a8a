"""Sweeps: a grid of run configs (file format: testbed/sweep_file.py), planned (testbed/plan.py), run by
parallel workers, resumable.

While running: a run that raises an exception is recorded as ``failed`` (traceback in
``runs/<id>.log``; a loop of several runs that fails is retried run by run, so only the culprit
fails) and the others go on; a run's status (``ok``, ``collapsed``, ``diverged``) is decided by
testbed/outcomes.py. One sweep at a time writes to an output directory (a lock file, ``OUT/.lock``).

Grouping is the sweep's decision, not the runner's: `group_runs` packs the configs that share a
model shape (`testbed.runner.SHAPE_FIELDS`) into loops of at most ``loop_size`` runs, and each loop
runs in this process or as a job of an executor (testbed/util/executor.py: local worker processes, which end with
their parent, or Ray tasks). A run's results are the same whatever loop it ran in, under either executor.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import limits, outcomes
from testbed.checkpoint import CheckpointError
from testbed.codeprint import run_code
from testbed.config import Loop, RunConfig, RunSpec
from testbed.plan import (  # noqa: F401  (re-exported: the sweep's public names)
    FORMATS,
    MAX_LAG,
    MAX_LOOP,
    MAX_PARAM,
    Plan,
    build_task,
    default_loop_size,
    group_runs,
    plan_sweep,
    task_key,
)
from testbed.results import ResultStore
from testbed.runner import Interrupted, Runner
from testbed.sweep_file import TOP_KEYS, expand, file_settings, load_file, parse_loop_size  # noqa: F401
from testbed.util.codeprint import stale_parts
from testbed.util.errors import RunFailed, UsageError
from testbed.util.executor import Executor, LocalPool, WorkerLost, add_done, stop_requested
from testbed.util.executor import default as default_executor
from testbed.util.files import atomic_write_text
from testbed.util.progress import Progress, interactive
from testbed.util.stopping import StopRequest, stop_on_signals

# -- running ----------------------------------------------------------------------------------------------


def _train(configs: list[RunConfig], store: ResultStore, chance: dict[str, float | None],
           progress: bool = False, specs: list[RunSpec] | None = None,
           on_version: Callable[[int, int, Any], None] | None = None,
           stop: Callable[[], bool] | None = None, extra: dict[str, Any] | None = None) -> list[str]:
    """Train ``configs`` in one loop and save each result with its status (and ``extra`` in its record,
    `ResultStore.save`); an exception marks the run
    ``failed`` (a loop of several is retried run by run first, parsed afresh). Returns the statuses.
    ``specs``: the configs as the plan parsed them; the task is the one the plan built. ``on_version``:
    the runner's hook (every new version of every run). ``stop``: asked after every step; when it says so,
    the loop is saved whole in ``OUT/checkpoints/`` (testbed/util/stopping.py) and KeyboardInterrupt raised; a loop
    saved so is resumed at its step."""
    if stop is not None and stop():
        raise KeyboardInterrupt
    runner = None
    try:
        specs = specs if specs is not None else [c.parse() for c in configs]
        ids = [s.config.run_id for s in specs]
        checkpoint = store.checkpoint(ids)
        task = build_task(specs[0])
        code = [run_code(spec, task) for spec in specs]
        runner = _resume(checkpoint, task, ids, code)
        if runner is not None:
            print(f"resuming {len(ids)} run(s) at step {runner.next_step} of {runner.cfg0.steps} from "
                  f"{str(checkpoint)!r}", file=sys.stderr, flush=True)
        else:
            runner = Runner(Loop(configs, specs, task))
        if on_version is not None:
            runner.on_version = on_version
        results = runner.run(progress=progress, stop=stop)
    except Interrupted as stopped:
        assert runner is not None
        try:
            runner.save(checkpoint)
            atomic_write_text(_code_file(checkpoint), json.dumps(code))
        except (OSError, RuntimeError) as exc:  # torch reports a full disk as a RuntimeError of its zip writer
            free = limits.fmt_bytes(shutil.disk_usage(checkpoint.parent).free) if checkpoint.parent.is_dir() else "?"
            reason = "no space left on the disk" if isinstance(exc, RuntimeError) or exc.errno == errno.ENOSPC else \
                (exc.strerror or str(exc))
            raise RunFailed(f"cannot save the loop of {len(ids)} run(s) at step {stopped.step + 1} in "
                            f"{str(checkpoint)!r}: {reason} ({free} free); finished runs are saved, this loop starts "
                            "over when the command is rerun") from None
        print(f"saved {len(ids)} run(s) at step {stopped.step + 1} of {runner.cfg0.steps} in {str(checkpoint)!r}",
              file=sys.stderr, flush=True)
        raise
    except Exception as exc:
        if len(configs) > 1:
            return [s for cfg in configs for s in _train([cfg], store, chance, progress, stop=stop)]
        store.save_failure(configs[0], f"{type(exc).__name__}: {exc}", traceback.format_exc())
        return ["failed"]
    try:
        entropies = outcomes.final_entropies(runner, [r.status for r in results])
    except Exception:  # a measurement problem must not lose finished runs: their status stays as trained
        entropies = {}
    statuses = []
    for i, result in enumerate(results):
        result = outcomes.classify(result, chance.get(result.config.run_id), entropies.get(i))
        store.save(result, code[i], extra)
        statuses.append(result.status)
    checkpoint.unlink(missing_ok=True)
    _code_file(checkpoint).unlink(missing_ok=True)
    return statuses


def _code_file(checkpoint: Path) -> Path:
    """Beside a saved loop: the fingerprint of the code that trained it (testbed/codeprint.py), one per run."""
    return checkpoint.with_suffix(".code.json")


def _resume(checkpoint: Path, task: Any, ids: list[str], code: list[dict[str, str]]) -> Runner | None:
    """The loop saved at ``checkpoint``, or None (train afresh): none saved, or one that cannot be used, said so
    in one line (damaged or of another format, or trained by code that has changed since)."""
    if not checkpoint.is_file():
        return None
    try:
        saved = json.loads(_code_file(checkpoint).read_text()) if _code_file(checkpoint).is_file() else None
    except (OSError, ValueError):
        saved = None
    changed = list(dict.fromkeys(p for old, new in zip(saved or [], code, strict=False) for p in stale_parts(old, new)))
    runner, why = None, f"the code of {', '.join(changed)} changed since it was saved"
    if not changed:
        try:
            runner = Runner.load(checkpoint, task, ids)
        except CheckpointError as exc:
            why = exc.reason
    if runner is None:
        print(f"not resuming the saved loop {str(checkpoint)!r}: {why}; its {len(ids)} run(s) start over",
              file=sys.stderr, flush=True)
    return runner


def _execute(configs: list[dict[str, Any]], out: str, chance: dict[str, float | None],
             extra: dict[str, Any] | None = None) -> list[str]:
    """A worker's loop (a job of the executor, testbed/util/executor.py). Every new version of a run adds 1 / steps to
    the command's count of runs done, so the parent's bar moves while a loop trains; at the end the loop's share
    is made exactly its number of runs (a run that diverged early, or a loop retried run by run)."""
    cfgs = [RunConfig(**c) for c in configs]
    added = [0.0]

    def advance(run: int, version: int, params: Any) -> None:
        if version > 0:
            share = 1.0 / cfgs[run].steps
            add_done(share)
            added[0] += share

    statuses = _train(cfgs, ResultStore(out), chance, on_version=advance, stop=stop_requested, extra=extra)
    add_done(len(cfgs) - added[0])
    return statuses


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.lock`` while writing (one sweep per directory); the lock dies with the process."""
    from testbed.util.files import DirectoryBusy, one_writer

    try:
        with one_writer(out, "choose another --out"):
            for tmp in [*out.glob(".*.tmp"), *(out / "runs").glob(".*.tmp"), *(out / "checkpoints").glob(".*.tmp")]:
                tmp.unlink(missing_ok=True)
            yield
    except DirectoryBusy as exc:
        raise UsageError(str(exc)) from None


def chance_levels(plan: Plan) -> dict[str, float | None]:
    """The chance reward (testbed/outcomes.py) of every run still to train, by run id (one per task)."""
    by_task: dict[str, float | None] = {}
    out = {}
    for spec in plan.todo:
        run_id = spec.run_id
        key = task_key(spec)
        if key not in by_task:
            try:
                by_task[key] = outcomes.chance_reward(build_task(spec))
            except Exception:  # no chance level: this task's runs are not judged for collapse
                by_task[key] = None
        out[run_id] = by_task[key]
    return out


def run_sweep(
    configs: list[RunConfig],
    out: str | Path,
    *,
    workers: int = 1,
    fmt: str = "csv",
    meta: dict[str, Any] | None = None,
    progress: bool = True,
    threads_per_worker: int = 1,
    loop_size: int | None = None,
    warn: bool = False,
    plan: Plan | None = None,
    shared: bool = False,
    executor: Executor | None = None,
    record_extra: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """Run every config not already finished under ``out``; write the tables; return results.
    ``shared``: ``out`` is a run store several commands add to (`plan_sweep`). ``executor``: where the loops
    run (testbed/util/executor.py; default: this process's, the local pool unless a command chose another); the
    local pool with one worker runs them in this process. ``record_extra``: fields added to the record of every
    run this call trains (`ResultStore.save`; the figures' protocol stamp), written by the one writer of the record.

    Runs sharing a model shape train together, at most ``loop_size`` per loop (None: up to `MAX_LOOP`,
    fewer when that keeps every worker busy). Everything is checked first (`plan_sweep`); ``warn`` prints
    its warnings (pointless settings) to stderr."""
    if plan is None:
        plan = plan_sweep(configs, out, workers=workers, fmt=fmt, loop_size=loop_size, create=True, shared=shared)
    if warn:
        for line in plan.warnings:
            print(f"warning: {line}", file=sys.stderr)
    for line in plan.reuse_lines():
        print(line, file=sys.stderr, flush=True)
    out = Path(out)
    store = ResultStore(out)
    executor = executor if executor is not None else default_executor()
    with _lock(out):
        store.write_config(meta or {}, plan.configs, shared=shared)
        chance = chance_levels(plan)
        bar = Progress(len(plan.configs), initial=len(plan.configs) - len(plan.todo), desc="runs",
                       enabled=progress)
        inner = progress and interactive()
        try:
            if plan.workers == 1 and isinstance(executor, LocalPool):
                import torch

                torch.set_num_threads(threads_per_worker)
                with stop_on_signals(StopRequest()) as stop:
                    for group in plan.groups:
                        _train([s.config for s in group], store, chance, progress=inner, specs=group, stop=stop,
                               extra=record_extra)
                        bar.update(len(group))
            else:
                _run_jobs(plan, store, chance, threads_per_worker, bar, executor, record_extra)
        finally:
            bar.close()
        if not shared and all(store.done(s.run_id) for s in plan.runs):  # nothing left to resume
            shutil.rmtree(store.out / "checkpoints", ignore_errors=True)  # (a shared store keeps other commands')
        return store.finish(plan.configs, plan.fmt, shared=shared)


def _run_jobs(plan: Plan, store: ResultStore, chance: dict[str, float | None], threads: int, bar: Progress,
              executor: Executor, extra: dict[str, Any] | None = None) -> None:
    """Run the plan's loops as jobs of ``executor`` (testbed/util/executor.py). A stop request cancels the loops not
    yet started and waits for the running ones to save themselves, then raises KeyboardInterrupt."""
    jobs = [([s.config.to_dict() for s in g], str(store.out), {s.run_id: chance.get(s.run_id) for s in g}, extra)
            for g in plan.groups]
    shown = [0.0]

    def show(done: float) -> None:
        value = min(done, float(len(plan.todo)))
        if value > shown[0]:
            bar.update(value - shown[0])
            shown[0] = value

    try:
        executor.run(_execute, jobs, plan.workers, threads, on_done=show)
    except WorkerLost as exc:
        raise RunFailed(f"{exc}; finished runs are saved in {str(store.out)!r}; rerun the same command to resume") \
            from None


def failures(out: str | Path, configs: list[RunConfig]) -> list[dict[str, Any]]:
    """The records of the runs among ``configs`` that failed in ``out``."""
    store = ResultStore(out)
    recs = [store.record(c.run_id) for c in configs if store.has_record(c.run_id)]
    return [r for r in recs if r.get("status") == "failed"]


def failure_message(out: str | Path, failed: list[dict[str, Any]], total: int) -> str:
    first = failed[0]
    log = Path(out) / first.get("log", f"runs/{first['run_id']}.log")
    return (f"{len(failed)} of {total} run(s) failed with an internal error, not a problem with the input "
            f"(first: run {first['run_id']}: {first.get('error', '?')}; traceback in {log}); the other runs are "
            "saved; rerunning the same command retries the failed ones")


def sweep_file(path: str | Path, out: str | Path | None = None, workers: int | None = None,
               fmt: str | None = None, progress: bool = True, loop_size: int | None = None,
               warn: bool = False, dry_run: bool = False, executor: Executor | None = None) -> pd.DataFrame | Plan:
    """Load, validate and run a sweep file (``out``/``workers``/``fmt``/``loop_size`` override the file's);
    with ``dry_run``, only check it and return the `Plan` (nothing written). ``executor``: as `run_sweep`'s."""
    spec = load_file(path)
    settings = file_settings(spec)
    parsed: dict[str, RunSpec] = {}
    configs = expand(spec, parsed)
    out = out or settings["out"]
    if not out:
        raise UsageError(f"no output directory: give --out or set out = ... in {str(path)!r}")
    workers = workers if workers is not None else (settings["workers"] or 1)
    fmt = fmt or settings["format"] or "csv"
    size = settings["loop_size"] if loop_size is None else loop_size
    plan = plan_sweep(configs, out, workers=workers, fmt=fmt, loop_size=size, create=not dry_run, specs=parsed)
    if dry_run:
        return plan
    meta = {"command": "sweep", "file": str(path), "spec": spec}
    return run_sweep(configs, out, workers=workers, fmt=fmt, meta=meta, progress=progress, loop_size=size, warn=warn,
                     plan=plan, executor=executor)
