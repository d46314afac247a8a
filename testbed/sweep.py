"""Sweeps: a grid of run configs from a TOML or YAML file, run by parallel workers, resumable.

File format (TOML shown; YAML with the same keys works too)::

    out = "runs/mnist_delay"      # optional (the CLI's --out wins)
    workers = 1                   # optional (the CLI's --workers wins)
    format = "csv"                # or "parquet" (results.parquet beside results.csv)
    loop_size = 8                 # optional: at most this many runs that share a model shape train in one
                                  # loop (testbed/runner.py; default: up to 8, fewer when that keeps every
                                  # worker busy; 1 = one run at a time). Results do not depend on it.

    [base]                        # settings shared by every run
    task = "mnist"
    steps = 3000
    log_every = 100

    [grid]                        # lists: the sweep is their cartesian product, in file order
    recipe = ["pg", "dg"]
    delay = ["sync", "fixed:100"]
    frictions = ["none", "bug(frac=0.2, kind=random)"]
    seed = [0, 1, 2]              # or, in [base]: seeds = 3  (seeds 0, 1, 2)

Keys are the fields of `RunConfig` (task, recipe, delay, frictions, seed, steps, batch_size, lr,
n_actors, group_size, epochs, minibatches, log_every, agg, optimizer, proximal); any other key is an
option of the task (e.g. ``H``, ``M`` for token reversal, ``data_dir`` for MNIST), in [base] or
[grid] (not both). A file must name at least one setting ([base] or [grid]): an empty file is an error,
not one run with every default.

Before anything is written (`plan_sweep`): every config is validated (`RunConfig.parse`, the one spec
grammar), every task is built (a missing or corrupt data directory is an error here), the memory and
disk the work needs are estimated and refused when they cannot fit (testbed/limits.py), and the
output directory is checked (a directory, writable, room on its disk). Runs already finished in the
output directory (same config hash) are skipped, so rerunning an interrupted sweep completes it.

While running: a run that raises an exception is recorded as ``failed`` (traceback in
``runs/<id>.log``; a loop of several runs that fails is retried run by run, so only the culprit
fails) and the others go on; a run's status (``ok``, ``collapsed``, ``diverged``) is decided by
testbed/outcomes.py. Worker processes end with their parent (testbed/workers.py). One sweep at a time
writes to an output directory (a lock file, ``OUT/.lock``).

Grouping is the sweep's decision, not the runner's: `group_runs` packs the configs that share a
model shape (`testbed.runner.SHAPE_FIELDS`) into loops of at most ``loop_size`` runs, and each loop
runs in this process or in a worker process. A run's results are the same whatever loop it ran in.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.util
import itertools
import math
import multiprocessing
import os
import struct
import sys
import traceback
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from testbed import limits, outcomes
from testbed.progress import Progress, interactive
from testbed.results import ResultStore
from testbed.runner import RunConfig, Runner, RunSpec
from testbed.stabilizers.registry import DEFAULT_ADVANTAGE
from testbed.stabilizers.spec import SpecError
from testbed.tasks import make_task, task_options
from testbed.usage import RunFailed, UsageError

TOP_KEYS = ("out", "workers", "format", "base", "grid", "name", "description", "loop_size")
MAX_LOOP = 8  # runs per loop by default: past this the per-run work dominates and memory grows
FORMATS = ("csv", "parquet")
MAX_LAG = 2**62  # lags are int64 in the schedule
MAX_PARAM = 1e38  # recipe parameters are used in float32 (largest finite: 3.4e38; 1 + x must not overflow)


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a sweep file (``.toml``, ``.yaml`` or ``.yml``) into a dict, with clear errors."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"sweep file {str(path)!r} is a directory; give a .toml or .yaml file")
    if not path.is_file():
        raise UsageError(f"sweep file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise UsageError(f"sweep file {str(path)!r}: unknown extension {suffix!r}; use .toml, .yaml or .yml")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read sweep file {str(path)!r}: {exc}") from None
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as exc:  # parser errors of either format
        raise UsageError(f"sweep file {str(path)!r} is malformed: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"sweep file {str(path)!r} must hold a table/mapping at top level, got {type(data).__name__}")
    return data


def _split_keys(task: str, settings: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate run keys from task options; unknown keys -> UsageError."""
    run_keys, task_args = {}, {}
    options = task_options(task)
    for key, value in settings.items():
        if key in RunConfig.field_names() and key != "task_args":
            run_keys[key] = value
        elif key in options:
            task_args[key] = value
        else:
            allowed = [k for k in RunConfig.field_names() if k != "task_args"] + [f"{k} (task option)" for k in options]
            raise UsageError(f"unknown key {key!r} in {where} for task {task!r}; allowed: {', '.join(allowed)}")
    return run_keys, task_args


def file_settings(spec: dict[str, Any]) -> dict[str, Any]:
    """The checked top-level settings of a sweep spec: out, workers, format, loop_size (None when absent)."""
    unknown = [k for k in spec if k not in TOP_KEYS]
    if unknown:
        raise UsageError(f"unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(TOP_KEYS)}")
    out = spec.get("out")
    if out is not None and (not isinstance(out, str) or not out.strip() or "\0" in out):
        raise UsageError(f"out must be a directory path (a string), got {out!r}")
    workers = spec.get("workers")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise UsageError(f"workers must be an integer >= 1, got {workers!r}")
    fmt = spec.get("format")
    if fmt is not None and fmt not in FORMATS:
        raise UsageError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    for key in ("name", "description"):
        if key in spec and not isinstance(spec[key], str):
            raise UsageError(f"{key} must be a string, got {spec[key]!r}")
    return {"out": out, "workers": workers, "format": fmt, "loop_size": parse_loop_size(spec.get("loop_size"))}


def expand(spec: dict[str, Any], specs: dict[str, RunSpec] | None = None) -> list[RunConfig]:
    """The run configs of a sweep spec (dict as read from a file), validated, duplicates dropped. ``specs``, if
    given, receives each config's parsed `RunSpec` by run id (for `plan_sweep`, which then parses nothing again)."""
    file_settings(spec)
    base, grid = spec.get("base"), spec.get("grid")
    for name, table in (("base", base), ("grid", grid)):
        if table is not None and not isinstance(table, dict):
            raise UsageError(f"[{name}] must be a table (mapping of settings), got {table!r}")
    base, grid = dict(base or {}), dict(grid or {})
    if not base and not grid:
        raise UsageError("the sweep has no runs: give at least one setting in [base] or [grid]")
    both = sorted(set(base) & set(grid))
    if both:
        raise UsageError(f"key(s) {', '.join(map(repr, both))} in both [base] and [grid]; give each once")
    if "seeds" in base or "seeds" in grid:
        if "seed" in grid or "seed" in base:
            raise UsageError("give either seeds = N or seed, not both")
        n = base.pop("seeds", None) if "seeds" in base else grid.pop("seeds")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UsageError(f"seeds must be an integer >= 1, got {n!r}")
        limits.check_count(n, f"seeds = {n}")
        grid["seed"] = list(range(n))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"grid key {key!r} must be a non-empty list, got {values!r}")
    keys = list(grid)
    limits.check_count(math.prod(len(grid[k]) for k in keys), "the grid")
    configs, seen = [], set()
    for combo in itertools.product(*(grid[k] for k in keys)):
        settings = {**base, **dict(zip(keys, combo, strict=True))}
        task = settings.get("task", "mnist")
        if not isinstance(task, str):
            raise UsageError(f"task must be a task name, got {task!r}")
        task_options(task)  # unknown task -> error listing the tasks
        run_keys, task_args = _split_keys(task, settings, "the sweep")
        cfg = RunConfig(**run_keys, task_args=task_args)
        parsed = cfg.parse()
        run_id = cfg.run_id
        if run_id in seen:
            continue
        seen.add(run_id)
        configs.append(cfg)
        if specs is not None:
            specs[run_id] = parsed
        build_task(parsed)  # catches e.g. a missing data directory before anything runs
    return configs


def parse_loop_size(value: Any) -> int | None:
    """A sweep file's or the CLI's ``loop_size``: None (automatic) or an integer >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"loop_size must be an integer >= 1 (runs per loop), got {value!r}")
    return value


# -- tasks ----------------------------------------------------------------------------------------------

_TASKS: dict[str, Any] = {}  # a few built tasks, by task_key (validation, estimates, chance levels)


def task_key(spec: RunSpec) -> str:
    return repr((spec.config.task, sorted(spec.task_args.items())))


def build_task(spec: RunSpec) -> Any:
    """The task of ``spec``, built once per process (a few kept); data that cannot be read -> UsageError."""
    key = task_key(spec)
    if key not in _TASKS:
        name, args = spec.config.task, spec.task_args
        try:
            task = make_task(name, **args)
        except (OSError, EOFError, zlib.error, struct.error) as exc:  # e.g. a corrupt .gz IDX file
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            raise UsageError(f"task {name!r} ({shown or 'default options'}) cannot load its data: "
                             f"{type(exc).__name__}: {exc}") from None
        except MemoryError as exc:  # e.g. a reward table of 10^12 arms: numpy's message states the size
            shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
            raise UsageError(f"task {name!r} ({shown}) does not fit in memory: {exc or 'out of memory'}; try "
                             "smaller task options") from None
        while len(_TASKS) >= 4:
            _TASKS.pop(next(iter(_TASKS)))
        _TASKS[key] = task
    return _TASKS[key]


# -- the plan: everything checked before anything is written -------------------------------------------


@dataclass
class Plan:
    """A validated sweep: what runs, in which loops, what it needs, and what looks pointless."""

    out: Path
    configs: list[RunConfig]
    todo: list[RunConfig]
    groups: list[list[RunConfig]]
    workers: int
    fmt: str
    specs: dict[str, RunSpec]  # by run id
    run_ids: dict[int, str]  # by id() of each config (a config's id is a hash, costly to recompute)
    memory: int
    memory_available: int | None
    disk: int
    disk_free: int | None
    warnings: list[str] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)

    def describe(self) -> str:
        done = len(self.configs) - len(self.todo)
        mem = f"at least {limits.fmt_bytes(self.memory)} of memory"
        if self.memory_available is not None:
            mem += f" ({limits.fmt_bytes(self.memory_available)} available)"
        disk = f"about {limits.fmt_bytes(self.disk)} on disk"
        if self.disk_free is not None:
            disk += f" ({limits.fmt_bytes(self.disk_free)} free)"
        where = "exists" if self.out.is_dir() else "would be created"
        return (f"{len(self.configs)} run(s), {done} already finished in {str(self.out)!r} ({where}); "
                f"{len(self.todo)} to train in {len(self.groups)} loop(s) on {self.workers} worker(s); "
                f"needs {mem} and {disk}")


def _warnings(specs: list[RunSpec], tasks: dict[str, Any]) -> list[str]:
    """Legal but pointless settings, one line each (deduplicated)."""
    out: dict[str, None] = {}
    for spec in specs:
        cfg, st = spec.config, spec.staleness
        if st.kind == "fixed" and st.max_lag >= cfg.steps - 1 and cfg.steps > 1:
            out[f"delay {cfg.delay!r} with {cfg.steps} steps: lags are clamped to the step, so every batch is "
                f"sampled by the initial policy (version 0) and the actors never see an update"] = None
        task = tasks[task_key(spec)]
        if st.mix > 0 and int(task.horizon) == 1:
            out[f"delay {cfg.delay!r}: +mixed has no effect on task {cfg.task!r} (one token per sample)"] = None
        if cfg.group_size == 1 and _names_group_advantage(cfg.recipe) and _uses_groups(spec.recipe):
            out[f"recipe {cfg.recipe!r} normalises advantages within prompt groups, but group_size is 1: there are "
                "no groups, so the whole batch is one group (set --group-size G > 1 for GRPO groups)"] = None
    return list(out)


def _names_group_advantage(text: str) -> bool:
    """True when the recipe spec names an advantage estimator itself (``group``, ``dr_grpo+...``), rather than
    the default or a bundled recipe's choice (``vcpo``'s baseline is per group, else per batch, by design)."""
    from testbed.stabilizers.registry import ADVANTAGES
    from testbed.stabilizers.spec import parse_spec

    return any(name in ADVANTAGES and name != DEFAULT_ADVANTAGE for name, _ in parse_spec(text))


def _uses_groups(recipe: Any) -> bool:
    """True when the recipe's advantages change with the group ids (a group-normalised estimator)."""
    import torch

    rewards = torch.tensor([0.0, 1.0, 0.25, 1.0])
    groups = torch.tensor([0, 0, 1, 1])
    try:
        a = recipe.advantages(rewards, group_ids=None)
        b = recipe.advantages(rewards, group_ids=groups)
    except Exception:
        return False
    return not torch.equal(a, b)


def _check_float32(text: str, recipe: Any) -> None:
    """Recipe parameters enter float32 computations: a finite value beyond `MAX_PARAM` in magnitude would
    overflow there (inf is allowed where a component allows it)."""
    from testbed.stabilizers.base import component_params

    for comp in (recipe.advantage, recipe.surrogate, *recipe.transforms):
        for key, value in component_params(comp).items():
            if isinstance(value, float) and math.isfinite(value) and abs(value) > MAX_PARAM:
                raise UsageError(f"recipe {text!r}: {comp.name}.{key} = {value:g} is too large for float32 "
                                 f"computations; finite values must be at most {MAX_PARAM:g} in magnitude")


def plan_sweep(configs: list[RunConfig], out: str | Path, *, workers: int = 1, fmt: str = "csv",
               loop_size: int | None = None, create: bool = False, what: str = "--out",
               specs: dict[str, RunSpec] | None = None) -> Plan:
    """Check everything about a sweep before anything is written (module docstring); with ``create``, make
    the output directory last. UsageError (or SpecError) with one line naming the problem otherwise.
    ``specs``: configs already parsed by `expand`, by run id."""
    if fmt not in FORMATS:
        raise UsageError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None and importlib.util.find_spec("fastparquet") is None:
        raise UsageError("format 'parquet' needs pyarrow (pip install pyarrow); or use format csv")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise UsageError(f"workers must be an integer >= 1, got {workers!r}")
    loop_size = parse_loop_size(loop_size)
    if not configs:
        raise UsageError("nothing to run: the sweep has no runs")
    parsed = dict(specs or {})
    specs, run_ids = {}, {}
    for cfg in configs:
        run_id = run_ids[id(cfg)] = cfg.run_id
        spec = parsed.get(run_id) or cfg.parse()
        if spec.staleness.max_lag >= MAX_LAG:
            raise UsageError(f"delay {cfg.delay!r}: the lag must be below 2^62, got {spec.staleness.max_lag}")
        _check_float32(cfg.recipe, spec.recipe)
        specs[run_id] = spec
    tasks = {task_key(s): build_task(s) for s in specs.values()}
    shapes = {k: limits.task_shape(t) for k, t in tasks.items()}
    store = ResultStore(out)
    todo = [c for c in configs if not store.done(run_ids[id(c)])]
    if loop_size is None:
        loop_size = default_loop_size(len(todo), workers)
    groups = group_runs(todo, loop_size, {id(c): specs[run_ids[id(c)]] for c in todo})
    loops = []
    for group in groups:
        est = limits.Estimate()
        for cfg in group:
            spec = specs[run_ids[id(cfg)]]
            est.add(limits.estimate_run(spec, shapes[task_key(spec)]))
        est.why["runs"] = f"{len(group)} run(s) in one loop"
        loops.append(est)
    disk = sum(e.disk for e in loops) * 2 + 65536  # per-run files, then results.csv and summary.csv
    n_workers = max(1, min(workers, len(groups)))
    need, avail, free = limits.check_fits(loops, n_workers, len(todo), disk, Path(out))
    plan = Plan(Path(out), configs, todo, groups, n_workers, fmt, specs, run_ids, need, avail, disk, free,
                _warnings(list(specs.values()), tasks))
    plan.created = limits.check_output_dir(out, create, what)
    return plan


def default_loop_size(n_runs: int, workers: int) -> int:
    """Runs per loop when the sweep does not say: enough loops to keep every worker busy, at most `MAX_LOOP`."""
    return max(1, min(MAX_LOOP, math.ceil(n_runs / workers)))


def group_runs(configs: list[RunConfig], loop_size: int, specs: dict[int, RunSpec] | None = None) -> list[list[RunConfig]]:
    """Configs packed into loops of at most ``loop_size`` runs that share a model shape (order kept within a
    loop; loops in order of their first config). ``specs``: the parsed configs by ``id()``, if at hand."""
    buckets: dict[str, list[list[RunConfig]]] = {}
    order: list[list[RunConfig]] = []
    for cfg in configs:
        spec = specs[id(cfg)] if specs is not None else cfg.parse()
        bucket = buckets.setdefault(repr(spec.shape), [])
        if not bucket or len(bucket[-1]) >= loop_size:
            bucket.append([])
            order.append(bucket[-1])
        bucket[-1].append(cfg)
    return order


# -- running ----------------------------------------------------------------------------------------------


def _train(configs: list[RunConfig], store: ResultStore, chance: dict[str, float | None],
           progress: bool = False, specs: list[RunSpec] | None = None) -> list[str]:
    """Train ``configs`` in one loop and save each result with its status; an exception marks the run
    ``failed`` (a loop of several is retried run by run first, parsed afresh). Returns the statuses.
    ``specs``: the configs as the plan parsed them; the task is the one the plan built."""
    try:
        specs = specs if specs is not None else [c.parse() for c in configs]
        runner = Runner(configs, task=build_task(specs[0]), specs=specs)
        results = runner.run(progress=progress)
    except Exception as exc:
        if len(configs) > 1:
            return [s for cfg in configs for s in _train([cfg], store, chance, progress)]
        store.save_failure(configs[0], f"{type(exc).__name__}: {exc}", traceback.format_exc())
        return ["failed"]
    try:
        entropies = outcomes.final_entropies(runner, [r.status for r in results])
    except Exception:  # a measurement problem must not lose finished runs: their status stays as trained
        entropies = {}
    statuses = []
    for i, result in enumerate(results):
        result = outcomes.classify(result, chance.get(result.config.run_id), entropies.get(i))
        store.save(result)
        statuses.append(result.status)
    return statuses


def _worker_init(threads: int, parent: int) -> None:
    import torch

    from testbed.workers import die_with_parent

    die_with_parent(parent)
    torch.set_num_threads(threads)


def _execute(configs: list[dict[str, Any]], out: str, chance: dict[str, float | None]) -> list[str]:
    return _train([RunConfig(**c) for c in configs], ResultStore(out), chance)


@contextlib.contextmanager
def _lock(out: Path) -> Iterator[None]:
    """Hold ``OUT/.lock`` while writing (one sweep per directory); the lock dies with the process."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    fh = open(out / ".lock", "a+")  # noqa: SIM115 (held for the duration)
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            pid = fh.read().strip() or "?"
            raise UsageError(f"another process (pid {pid}) is writing to {str(out)!r}; wait for it to finish or "
                             "choose another --out") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        for tmp in [*out.glob(".*.tmp"), *(out / "runs").glob(".*.tmp")]:  # left by a killed process
            tmp.unlink(missing_ok=True)
        yield
    finally:
        fh.close()


def chance_levels(plan: Plan) -> dict[str, float | None]:
    """The chance reward (testbed/outcomes.py) of every run still to train, by run id (one per task)."""
    by_task: dict[str, float | None] = {}
    out = {}
    for cfg in plan.todo:
        run_id = plan.run_ids[id(cfg)]
        spec = plan.specs[run_id]
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
) -> pd.DataFrame:
    """Run every config not already finished under ``out``; write the tables; return results.

    Runs sharing a model shape train together, at most ``loop_size`` per loop (None: up to `MAX_LOOP`,
    fewer when that keeps every worker busy). Everything is checked first (`plan_sweep`); ``warn`` prints
    its warnings (pointless settings) to stderr."""
    if plan is None:
        plan = plan_sweep(configs, out, workers=workers, fmt=fmt, loop_size=loop_size, create=True)
    if warn:
        for line in plan.warnings:
            print(f"warning: {line}", file=sys.stderr)
    out = Path(out)
    store = ResultStore(out)
    with _lock(out):
        store.write_config(meta or {}, plan.configs)
        chance = chance_levels(plan)
        bar = Progress(len(plan.configs), initial=len(plan.configs) - len(plan.todo), desc="runs",
                       enabled=progress)
        inner = progress and interactive()
        try:
            if plan.workers == 1:
                import torch

                torch.set_num_threads(threads_per_worker)
                for group in plan.groups:
                    _train(group, store, chance, progress=inner, specs=[plan.specs[plan.run_ids[id(c)]] for c in group])
                    bar.update(len(group))
            else:
                _run_pool(plan, store, chance, threads_per_worker, bar)
        finally:
            bar.close()
        return store.finish(plan.configs, plan.fmt)


def _run_pool(plan: Plan, store: ResultStore, chance: dict[str, float | None], threads: int, bar: Progress) -> None:
    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(plan.workers, mp_context=ctx, initializer=_worker_init,
                                initargs=(threads, os.getpid())) as pool:
        futures = [pool.submit(_execute, [c.to_dict() for c in g], str(store.out),
                               {plan.run_ids[id(c)]: chance.get(plan.run_ids[id(c)]) for c in g})
                   for g in plan.groups]
        try:
            for fut in cf.as_completed(futures):
                bar.update(len(fut.result()))
        except cf.process.BrokenProcessPool:
            raise RunFailed(f"a worker process died unexpectedly (killed, or out of memory?); finished runs are "
                            f"saved in {str(store.out)!r}; rerun the same command to resume") from None
        except BaseException:
            for f in futures:
                f.cancel()
            raise


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
               warn: bool = False, dry_run: bool = False) -> pd.DataFrame | Plan:
    """Load, validate and run a sweep file (``out``/``workers``/``fmt``/``loop_size`` override the file's);
    with ``dry_run``, only check it and return the `Plan` (nothing written)."""
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
                     plan=plan)
