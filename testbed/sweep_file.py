"""A sweep file: a grid of run configs in TOML or YAML (run by testbed/sweep.py).

File format (TOML shown; YAML with the same keys works too)::

    out = "runs/mnist_delay"      # optional (the CLI's --out wins)
    workers = 1                   # optional (the CLI's --workers wins)
    format = "csv"                # or "parquet" (results.parquet beside results.csv)
    imports = ["mystab"]          # optional: modules holding your own stabilizers (as --import MODULE)
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
not one run with every default. The grid format is the project's one (testbed/util/grid.py): an LLM sweep
(``python -m llm_scale sweep FILE``) is written the same way over the LLM trainer's settings.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from testbed import limits
from testbed.config import RunConfig, RunSpec
from testbed.plan import FORMATS, build_task, parse_loop_size
from testbed.tasks import task_options
from testbed.util.errors import UsageError
from testbed.util.grid import grid_settings
from testbed.util.settings_file import imported_modules, read_settings

TOP_KEYS = ("out", "workers", "format", "base", "grid", "name", "description", "loop_size", "imports")


def load_file(path: str | Path) -> dict[str, Any]:
    """Read a sweep file (``.toml``, ``.yaml`` or ``.yml``) into a dict (`testbed.util.settings_file.read_settings`:
    one-line errors)."""
    return read_settings(path, "sweep file")


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
    imports = imported_modules(spec)
    return {"out": out, "workers": workers, "format": fmt, "loop_size": parse_loop_size(spec.get("loop_size")),
            "imports": imports}


def expand(spec: dict[str, Any], specs: dict[str, RunSpec] | None = None, build: bool = True) -> list[RunConfig]:
    """The run configs of a sweep spec (dict as read from a file), validated, duplicates dropped (the file's
    ``imports`` imported first). ``specs``, if given, receives each config's parsed `RunSpec` by run id (for
    `plan_sweep`, which then parses nothing again). ``build``: build each task too, which catches what only its
    data can tell (a missing data directory); without it, a file's run ids on a machine that lacks its data."""
    from testbed.stabilizers.registry import import_modules

    import_modules(file_settings(spec)["imports"])
    configs, seen = [], set()
    for settings in grid_settings(spec, limits.check_count):
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
        if build:
            build_task(parsed)  # catches e.g. a missing data directory before anything runs
    return configs

