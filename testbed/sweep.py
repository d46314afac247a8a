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
n_actors, group_size, epochs, minibatches, log_every, agg, optimizer, proximal); any other key is an option of the task
(e.g. ``H``, ``M`` for token reversal, ``data_dir`` for MNIST), in [base] or [grid]. Every config
is validated before anything is written; runs already finished in the output directory (same
config hash) are skipped, so rerunning an interrupted sweep completes it.

Grouping is the sweep's decision, not the runner's: `group_runs` packs the configs that share a
model shape (`testbed.runner.SHAPE_FIELDS`) into loops of at most ``loop_size`` runs, and each loop
runs in this process or in a worker process. A run's results are the same whatever loop it ran in.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import math
import multiprocessing
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.results import ResultStore
from testbed.runner import RunConfig, run_many
from testbed.stabilizers.spec import SpecError
from testbed.tasks import make_task, task_options

TOP_KEYS = ("out", "workers", "format", "base", "grid", "name", "description", "loop_size")
MAX_LOOP = 8  # runs per loop by default: past this the per-run work dominates and memory grows
FORMATS = ("csv", "parquet")


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a sweep file (``.toml``, ``.yaml`` or ``.yml``) into a dict, with clear errors."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"sweep file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".yaml", ".yml"):
        raise ValueError(f"sweep file {str(path)!r}: unknown extension {suffix!r}; use .toml, .yaml or .yml")
    try:
        if suffix == ".toml":
            try:
                import tomllib
            except ModuleNotFoundError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(path.read_text())
        else:
            import yaml

            data = yaml.safe_load(path.read_text())
    except Exception as exc:  # parser errors of either format
        raise ValueError(f"sweep file {str(path)!r} is malformed: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"sweep file {str(path)!r} must hold a table/mapping at top level")
    return data


def _split_keys(task: str, settings: dict[str, Any], where: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Separate run keys from task options; unknown keys -> ValueError."""
    run_keys, task_args = {}, {}
    options = task_options(task)
    for key, value in settings.items():
        if key in RunConfig.field_names() and key != "task_args":
            run_keys[key] = value
        elif key in options:
            task_args[key] = value
        else:
            allowed = [k for k in RunConfig.field_names() if k != "task_args"] + [f"{k} (task option)" for k in options]
            raise ValueError(f"unknown key {key!r} in {where} for task {task!r}; allowed: {', '.join(allowed)}")
    return run_keys, task_args


def expand(spec: dict[str, Any]) -> list[RunConfig]:
    """The run configs of a sweep spec (dict as read from a file), validated, duplicates dropped."""
    unknown = [k for k in spec if k not in TOP_KEYS]
    if unknown:
        raise ValueError(f"unknown top-level key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(TOP_KEYS)}")
    base = dict(spec.get("base") or {})
    grid = dict(spec.get("grid") or {})
    if not isinstance(base, dict) or not isinstance(grid, dict):
        raise ValueError("[base] and [grid] must be tables (mappings)")
    if "seeds" in base or "seeds" in grid:
        if "seed" in grid or "seed" in base:
            raise ValueError("give either seeds = N or seed, not both")
        n = base.pop("seeds", None) if "seeds" in base else grid.pop("seeds")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"seeds must be an integer >= 1, got {n!r}")
        grid["seed"] = list(range(n))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"grid key {key!r} must be a non-empty list, got {values!r}")
    keys = list(grid)
    configs, seen = [], set()
    tasks_built: set[str] = set()
    for combo in itertools.product(*(grid[k] for k in keys)):
        settings = {**base, **dict(zip(keys, combo, strict=True))}
        task = settings.get("task", "mnist")
        task_options(task)  # unknown task -> ValueError listing the tasks
        run_keys, task_args = _split_keys(task, settings, "the sweep")
        cfg = RunConfig(**run_keys, task_args=task_args)
        cfg.validate()
        if cfg.run_id in seen:
            continue
        seen.add(cfg.run_id)
        configs.append(cfg)
        key = repr((cfg.task, sorted(cfg.task_args.items())))
        if key not in tasks_built:  # catches e.g. a missing data directory before anything runs
            make_task(cfg.task, **cfg.task_args)
            tasks_built.add(key)
    if not configs:
        raise ValueError("the sweep has no runs")
    return configs


def parse_loop_size(value: Any) -> int | None:
    """A sweep file's or the CLI's ``loop_size``: None (automatic) or an integer >= 1."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SpecError(f"loop_size must be an integer >= 1 (runs per loop), got {value!r}")
    return value


def group_runs(configs: list[RunConfig], loop_size: int) -> list[list[RunConfig]]:
    """Configs packed into loops of at most ``loop_size`` runs that share a model shape (order kept within a
    loop; loops in order of their first config)."""
    buckets: dict[str, list[list[RunConfig]]] = {}
    order: list[list[RunConfig]] = []
    for cfg in configs:
        bucket = buckets.setdefault(repr(cfg.parse().shape), [])
        if not bucket or len(bucket[-1]) >= loop_size:
            bucket.append([])
            order.append(bucket[-1])
        bucket[-1].append(cfg)
    return order


def _worker_init(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _execute(configs: list[dict[str, Any]], out: str) -> int:
    results = run_many([RunConfig(**c) for c in configs])
    store = ResultStore(out)
    for result in results:
        store.save(result)
    return len(results)


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
) -> pd.DataFrame:
    """Run every config not already finished under ``out``; write the tables; return results.

    Runs sharing a model shape train together, at most ``loop_size`` per loop (None: up to `MAX_LOOP`,
    fewer when that keeps every worker busy)."""
    if fmt not in FORMATS:
        raise SpecError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SpecError(f"workers must be an integer >= 1, got {workers!r}")
    loop_size = parse_loop_size(loop_size)
    store = ResultStore(out)
    store.write_config(meta or {}, configs)
    todo = [c for c in configs if not store.done(c.run_id)]
    if loop_size is None:
        loop_size = max(1, min(MAX_LOOP, math.ceil(len(todo) / workers)))
    groups = group_runs(todo, loop_size)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(configs), initial=len(configs) - len(todo), desc="runs", unit="run")
    try:
        if workers == 1:
            import torch

            torch.set_num_threads(threads_per_worker)
            for group in groups:
                for result in run_many(group, progress=progress):
                    store.save(result)
                if bar is not None:
                    bar.update(len(group))
        else:
            ctx = multiprocessing.get_context("spawn")
            with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                                        initargs=(threads_per_worker,)) as pool:
                futures = [pool.submit(_execute, [c.to_dict() for c in g], str(out)) for g in groups]
                try:
                    for fut in cf.as_completed(futures):
                        done = fut.result()
                        if bar is not None:
                            bar.update(done)
                except BaseException:
                    for f in futures:
                        f.cancel()
                    raise
    finally:
        if bar is not None:
            bar.close()
    return store.finish(configs, fmt)


def sweep_file(path: str | Path, out: str | Path | None = None, workers: int | None = None,
               fmt: str | None = None, progress: bool = True, loop_size: int | None = None) -> pd.DataFrame:
    """Load, validate and run a sweep file (``out``/``workers``/``fmt``/``loop_size`` override the file's)."""
    spec = load_file(path)
    configs = expand(spec)
    out = out or spec.get("out")
    if not out:
        raise ValueError(f"no output directory: give --out or set out = ... in {str(path)!r}")
    workers = workers if workers is not None else int(spec.get("workers", 1))
    fmt = fmt or spec.get("format", "csv")
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    meta = {"command": "sweep", "file": str(path), "spec": spec}
    size = parse_loop_size(spec.get("loop_size")) if loop_size is None else loop_size
    return run_sweep(configs, out, workers=workers, fmt=fmt, meta=meta, progress=progress, loop_size=size)
