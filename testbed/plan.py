"""The plan of a sweep (testbed/sweep.py): everything checked before anything is written.

Before anything is written (`plan_sweep`): every config is validated (`RunConfig.parse`, the one spec
grammar), every task is built (a missing or corrupt data directory is an error here), the memory and
disk the work needs are estimated and refused when they cannot fit (testbed/limits.py), and the
output directory is checked (a directory, writable, room on its disk). Runs already finished in the
output directory (same config hash) are skipped, so rerunning an interrupted sweep completes it.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from testbed import limits
from testbed.config import RunConfig, RunSpec
from testbed.results import ResultStore
from testbed.stabilizers.registry import DEFAULT_ADVANTAGE
from testbed.stabilizers.spec import SpecError
from testbed.tasks import make_task
from testbed.util.errors import UsageError
from testbed.util.planning import plan_runs

T = TypeVar("T")
MAX_LOOP = 8  # runs per loop by default: past this the per-run work dominates and memory grows
FORMATS = ("csv", "parquet")
MAX_LAG = 2**62  # lags are int64 in the schedule
MAX_PARAM = 1e38  # recipe parameters are used in float32 (largest finite: 3.4e38; 1 + x must not overflow)




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
    configs: list[RunConfig]  # as given
    runs: list[RunSpec]  # each config parsed once (in the order of ``configs``), carrying its run id
    todo: list[RunSpec]  # the runs not finished in ``out``, in order
    groups: list[list[RunSpec]]  # ``todo`` packed into loops (`group_runs`)
    workers: int
    fmt: str
    specs: dict[str, RunSpec]  # by run id
    memory: int
    memory_available: int | None
    disk: int
    disk_free: int | None
    warnings: list[str] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)
    code: dict[str, dict[str, str]] = field(default_factory=dict)  # by run id: the code it runs (testbed/codeprint.py)
    stale: dict[str, list[str]] = field(default_factory=dict)  # finished runs whose code changed: the parts that did
    unchecked: int = 0  # finished runs reused whose records carry no code fingerprint
    checkpoint_disk: int = 0  # of `disk`: the loops a stop would save at once
    saved_loops: tuple[int, list[Path]] = (0, [])  # (saved loops this plan resumes, saved loops it cannot)

    def reuse_lines(self) -> list[str]:
        """What this plan reuses and what it retrains because its code changed, one line each ([] if neither)."""
        lines = []
        reused = len(self.configs) - len(self.todo)
        if reused:
            note = (f" ({self.unchecked} recorded without a code fingerprint, by older code, so not checked against "
                    f"the current code; delete {str(self.out)!r} to retrain them)" if self.unchecked else "")
            lines.append(f"{reused} of {len(self.configs)} run(s) reused from {str(self.out)!r}{note}")
        if self.stale:
            parts = list(dict.fromkeys(p for ps in self.stale.values() for p in ps))
            lines.append(f"retraining {len(self.stale)} finished run(s) in {str(self.out)!r}: the code of "
                         f"{', '.join(parts)} changed since they ran")
        resumed, dropped = self.saved_loops
        if resumed:
            lines.append(f"{resumed} saved loop(s) in {str(self.out / 'checkpoints')!r} resume at their step")
        if dropped:
            lines.append(f"{len(dropped)} saved loop(s) in {str(self.out / 'checkpoints')!r} hold runs that this command "
                         "groups otherwise (--workers or --loop-size changed since they were saved) or that are "
                         "finished: their runs start over (rerun with the earlier --workers and --loop-size to resume "
                         "them)")
        return lines

    def describe(self) -> str:
        done = len(self.configs) - len(self.todo)
        mem = f"at least {limits.fmt_bytes(self.memory)} of memory"
        if self.memory_available is not None:
            mem += f" ({limits.fmt_bytes(self.memory_available)} available)"
        disk = f"about {limits.fmt_bytes(self.disk)} on disk"
        if self.disk_free is not None:
            disk += f" ({limits.fmt_bytes(self.disk_free)} free)"
        where = "exists" if self.out.is_dir() else "would be created"
        if self.checkpoint_disk:
            disk += f", {limits.fmt_bytes(self.checkpoint_disk)} of it for the loops a stop saves"
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
        elif st.kind != "fixed" and st.max_lag >= cfg.steps and cfg.steps > 1:
            out[f"delay {cfg.delay!r} with {cfg.steps} steps: its lags reach {st.max_lag:g}, past the run's length; "
                f"lags are clamped to the step, so the model acts as a smaller bound would"] = None
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
    from testbed.stabilizers.registry import ADVANTAGES, NAMED_RECIPES, resolve_classes
    from testbed.stabilizers.spec import parse_spec

    def names_group(name: str) -> bool:  # grpo names group advantages as its core; vcpo's opob is its design
        return (name in ADVANTAGES and name != DEFAULT_ADVANTAGE) or any(
            p.kind == "advantage" and p.core and p.name in ("group", "dr_grpo") for p in NAMED_RECIPES.get(name, ()))

    return any(names_group(name) for name, _ in parse_spec(resolve_classes(text)))


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
               specs: dict[str, RunSpec] | None = None, shared: bool = False) -> Plan:
    """Check everything about a sweep before anything is written (module docstring); with ``create``, make
    the output directory last. UsageError (or SpecError) with one line naming the problem otherwise.
    ``specs``: configs already parsed by `expand`, by run id. ``shared``: the directory is a run store that
    several commands add to (the figures cache, a scorecard battery): runs it holds that this command does not
    run are kept as files and left out of its tables, instead of refusing the directory."""
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
    specs, runs = {}, []
    for cfg in configs:
        run_id = cfg.run_id
        spec = specs.get(run_id) or parsed.get(run_id) or cfg.parse()
        if spec.staleness.max_lag >= MAX_LAG:
            raise UsageError(f"delay {cfg.delay!r}: the lag must be below 2^62, got {spec.staleness.max_lag}")
        _check_float32(cfg.recipe, spec.recipe)
        if spec.config.lr > MAX_PARAM:
            raise UsageError(f"lr {spec.config.lr:g} is too large for float32 parameters (every update would "
                             f"overflow them); lr must be at most {MAX_PARAM:g}")
        specs[run_id] = spec
        runs.append(spec)
    tasks = {task_key(s): build_task(s) for s in specs.values()}
    shapes = {k: limits.task_shape(t) for k, t in tasks.items()}
    store = ResultStore(out)
    if not shared:
        _check_other_runs(Path(out), set(specs), what)
    from testbed.codeprint import run_code

    code = {rid: run_code(spec, tasks[task_key(spec)]) for rid, spec in specs.items()}
    records = _records(store, runs)
    planned = plan_runs(runs, key=lambda s: s.run_id, done=lambda s: store.done(s.run_id, code[s.run_id]),
                        changed=lambda s: _changed(records.get(s.run_id), code[s.run_id]))
    todo, stale = planned.todo, planned.changed
    waiting = {s.run_id for s in todo}
    unchecked = sum("code" not in record for rid, record in records.items() if rid not in waiting)  # reused unchecked
    if loop_size is None:
        loop_size = default_loop_size(len(todo), workers)
    groups = group_runs(todo, loop_size, workers)
    loops = []
    for group in groups:
        est = limits.Estimate()
        for spec in group:
            est.add(limits.estimate_run(spec, shapes[task_key(spec)]))
        est.why["runs"] = f"{len(group)} run(s) in one loop"
        loops.append(est)
    disk = sum(e.disk for e in loops) * 2 + 65536  # per-run files, then results.csv and summary.csv
    # a stop saves every loop in progress whole (testbed/util/stopping.py): at most one loop per worker at once, each
    # about its state in memory (parameters and optimizer moments, batches in flight, lag table, rows)
    saved = sorted((sum(v for k, v in e.parts.items() if k != "runs") for e in loops), reverse=True)
    checkpoints = sum(saved[:max(1, min(workers, len(loops)))])
    disk += checkpoints
    n_workers = max(1, min(workers, len(groups)))
    need, avail, free = limits.check_fits(loops, n_workers, len(todo), disk, Path(out))
    plan = Plan(Path(out), configs, runs, todo, groups, n_workers, fmt, specs, need, avail, disk, free,
                _warnings(list(specs.values()), tasks), code=code, stale=stale, unchecked=unchecked,
                checkpoint_disk=checkpoints, saved_loops=_saved_loops(store, groups, shared))
    plan.created = limits.check_output_dir(out, create, what)
    return plan


def _saved_loops(store: ResultStore, groups: list[list[RunSpec]], shared: bool = False) -> tuple[int, list[Path]]:
    """(how many of the planned loops have a saved checkpoint, the saved checkpoints no planned loop matches; in a
    shared store those may be other commands', so none is listed)."""
    folder = store.out / "checkpoints"
    saved = set(folder.glob("loop-*.pt")) if folder.is_dir() else set()
    if not saved:
        return 0, []
    mine = {store.checkpoint([s.run_id for s in g]) for g in groups}
    return len(saved & mine), [] if shared else sorted(saved - mine)


def _records(store: ResultStore, runs: list[RunSpec]) -> dict[str, dict[str, Any]]:
    """The readable records of ``runs`` in ``store``, by run id (a run with none, or an unreadable one, is absent)."""
    records = {}
    for spec in runs:
        if store.has_record(spec.run_id):
            try:
                records[spec.run_id] = store.record(spec.run_id)
            except (OSError, ValueError):
                continue
    return records


def _changed(record: dict[str, Any] | None, code: dict[str, str]) -> list[str]:
    """The parts of ``code`` that changed since a finished run's ``record`` was made ([] for no record, a failed run
    (retried anyway) or a record without a code fingerprint)."""
    from testbed.util.codeprint import stale_parts

    if record is None or record.get("status") == "failed":
        return []
    return stale_parts(record.get("code"), code)


def _check_other_runs(out: Path, run_ids: set[str], what: str) -> None:
    """Refuse an output directory whose tables hold runs this command does not (another sweep's or run's): its
    results.csv and summary.csv would be rewritten without them. The same command, or one that adds runs,
    resumes there."""
    path = out / "config.json"
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text()).get("runs", {})
    except (OSError, ValueError, AttributeError):
        return  # not ours to judge: the directory check reports what is wrong with it
    # only runs with results on disk count: a planned run that never finished loses nothing
    others = [rid for rid in recorded if rid not in run_ids and (out / "runs" / f"{rid}.json").is_file()]
    if others:
        raise UsageError(f"{str(out)!r} holds the results of {len(others)} run(s) that this command does not run (written "
                         f"by another sweep or run); its tables would lose them: give another {what}, or rerun the "
                         "command that wrote it")


def default_loop_size(n_runs: int, workers: int) -> int:
    """Runs per loop when the sweep does not say: enough loops to keep every worker busy, at most `MAX_LOOP`."""
    return max(1, min(MAX_LOOP, math.ceil(n_runs / workers)))


def balanced_chunks(items: list[T], max_size: int, workers: int = 1) -> list[list[T]]:
    """``items`` (jobs of about equal cost, in order) cut into consecutive chunks: n = ceil(m / max_size) chunks
    of m items, n rounded up to a multiple of ``workers`` when it is above 1 (at most m), sizes within one
    item of each other, larger first. 72 jobs, at most 8 a chunk, 2 workers: 10 chunks of 8, 8, 7, .., 7 (36 jobs a
    worker), not 9 of 8 (40 on one)."""
    m = len(items)
    if m == 0:
        return []
    n = math.ceil(m / max_size)
    if n > 1:
        n = min(m, workers * math.ceil(n / workers))
    size, extra = divmod(m, n)
    bounds = [k * size + min(k, extra) for k in range(n + 1)]
    return [items[lo:hi] for lo, hi in itertools.pairwise(bounds)]


R = TypeVar("R", RunConfig, RunSpec)


def group_runs(runs: list[R], loop_size: int, workers: int = 1) -> list[list[R]]:
    """Runs (configs, or the specs a plan parsed them into) packed into loops of at most ``loop_size`` runs that
    share a model shape (order kept within a loop; loops in order of their first run). A config is parsed to
    find its shape; a spec carries it.

    The runs of one shape are cut into loops by `balanced_chunks`: loops of one shape cost about the same, so
    the workers finish them together instead of one worker training the last loop alone. A run's results are
    the same whatever loop it trains in."""
    buckets: dict[str, list[tuple[int, R]]] = {}
    for i, run in enumerate(runs):
        spec = run if isinstance(run, RunSpec) else run.parse()
        buckets.setdefault(repr(spec.shape), []).append((i, run))
    loops = [loop for chunk in buckets.values() for loop in balanced_chunks(chunk, loop_size, workers)]
    loops.sort(key=lambda loop: loop[0][0])
    return [[run for _, run in loop] for loop in loops]
