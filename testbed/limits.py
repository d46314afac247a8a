"""Does the work fit the machine? Memory and disk estimates, checked before anything runs.

A run holds, besides the fixed cost of the process (not counted):

* the lag table and the version queue's index of it (delay.py): about ``LAG_BYTES_PER_STEP +
  LAG_BYTES_PER_ENTRY x n_actors`` bytes per step (measured: peak while the schedule is built); the
  i.i.d. staleness models also draw a uniform per entry and hold their lag distribution (8 bytes per
  possible lag, a few copies);
* the queue of samples waiting for the learner: at lag L (capped at steps - 1, since lags are
  clamped to the step) about L x batch_size samples, each its contexts, actions, log-probs, versions
  and rewards (per-token fields x the horizon), plus ``CHUNK_OVERHEAD`` bytes per actor chunk;
* the model: its parameters (counted on torch's meta device, so nothing is allocated) x
  `MODEL_COPIES` (weights, gradients, the optimizer's moments, the previous gradient);
* the logged rows: ``ROW_BYTES`` per logged step (steps / log_every of them).

Activations are not counted, so the estimate is a lower bound: work refused by it cannot fit. Runs
trained in one loop add up; ``workers`` loops run at once. On disk, each logged row costs about
``DISK_ROW_BYTES`` twice (the run's own file and results.csv).

The output directory is checked last: it must be a directory (or creatable as one), writable, and
its file system must have room for the results. A check that fails removes the directories it
created, so bad input leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.util.errors import UsageError

LAG_BYTES_PER_STEP = 330
LAG_BYTES_PER_ENTRY = 48
IID_BYTES_PER_ENTRY = 16
PMF_BYTES_PER_LAG = 40
CHUNK_OVERHEAD = 2000
ROW_BYTES = 3000
DISK_ROW_BYTES = 800
MODEL_COPIES = {"adam": 6, "sgd": 4}
RUN_OVERHEAD = 20_000  # config, record, summary row of one run


def fmt_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} EiB"


def available_memory() -> int | None:
    """Bytes of memory this process may still use: MemAvailable, capped by a cgroup limit; None if unknown."""
    avail = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    for limit, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                         ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            cap = Path(limit).read_text().strip()
            if cap.isdigit() and int(cap) < 1 << 60:
                avail = min(avail, int(cap) - int(Path(usage).read_text().strip()))
        except (OSError, ValueError):
            continue
    return max(0, avail)


def existing_ancestor(path: Path) -> Path:
    """The nearest ancestor of ``path`` (or ``path`` itself) that exists."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_disk(path: Path) -> int | None:
    try:
        return shutil.disk_usage(existing_ancestor(path)).free
    except OSError:
        return None


# -- estimates ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskShape:
    """What the estimates need to know about a task: bytes of one sample's context, horizon, actions,
    and the model's parameter count (None when it cannot be counted without allocating)."""

    context_bytes: int
    horizon: int
    n_actions: int
    n_params: int | None


def task_shape(task: Any) -> TaskShape:
    import torch

    from testbed.util.seeding import generator

    x = task.sample_contexts(1, generator(0, "estimate"), "train")
    n_params = None

    def no_forward(module: Any, args: Any) -> None:
        raise _Computes

    # Only construction may happen on the meta device: a policy whose construction runs the model (a warm
    # start) is stopped at its first forward, before anything it computes (or caches) exists, and not counted.
    hook = torch.nn.modules.module.register_module_forward_pre_hook(no_forward)
    try:
        with torch.device("meta"):
            policy = task.make_policy([generator(0, "estimate")])
        n_params = int(sum(p.numel() for p in policy.parameters()))
    except Exception:  # cannot be built on the meta device: not counted
        n_params = None
    finally:
        hook.remove()
    return TaskShape(int(x.element_size() * x.numel()), int(task.horizon), int(task.n_actions), n_params)


class _Computes(Exception):
    """A policy ran a forward pass while being built for counting."""


@dataclass
class Estimate:
    """Bytes by part (memory) and on disk, with a phrase per part saying what drives it."""

    parts: dict[str, int] = field(default_factory=dict)
    why: dict[str, str] = field(default_factory=dict)
    disk: int = 0

    @property
    def memory(self) -> int:
        return sum(self.parts.values())

    def add(self, other: Estimate) -> None:
        for k, v in other.parts.items():
            self.parts[k] = self.parts.get(k, 0) + v
            self.why.setdefault(k, other.why.get(k, ""))
        self.disk += other.disk

    def largest(self) -> str:
        return max(self.parts, key=lambda k: self.parts[k]) if self.parts else ""


HINTS = {
    "lag table": "fewer --steps or --n-actors",
    "queue": "a smaller delay or --batch-size",
    "model": "smaller task options (e.g. --hidden, --d-model)",
    "logged rows": "a larger --log-every or fewer --steps",
    "runs": "fewer runs (seeds, grid values)",
}


def estimate_run(spec: Any, shape: TaskShape) -> Estimate:
    """Memory and disk of one run (a `testbed.runner.RunSpec`) on a task of ``shape``."""
    cfg, st = spec.config, spec.staleness
    steps, actors, batch = cfg.steps, cfg.n_actors, cfg.batch_size
    est = Estimate()
    iid = st.kind in ("uniform", "geometric", "pareto")
    per_entry = LAG_BYTES_PER_ENTRY + (IID_BYTES_PER_ENTRY if iid else 0)
    est.parts["lag table"] = steps * (LAG_BYTES_PER_STEP + per_entry * actors)
    est.why["lag table"] = f"{steps:,} steps x {actors:,} actor(s)"
    lag = min(st.max_lag, steps - 1)
    if iid:
        est.parts["lag table"] += (st.max_lag + 1) * PMF_BYTES_PER_LAG
        est.why["lag table"] += f" and a distribution over {st.max_lag + 1:,} lags"
    t = shape.horizon
    sample = shape.context_bytes + t * (8 + 4 + 8) + 8 + (8 if cfg.group_size > 1 else 0)
    est.parts["queue"] = (lag + 1) * (batch * sample + actors * CHUNK_OVERHEAD)
    est.why["queue"] = f"{lag + 1:,} batches of {batch:,} samples in flight at lag {lag:,}"
    if shape.n_params is not None:
        copies = MODEL_COPIES.get(cfg.optimizer, 6)
        est.parts["model"] = shape.n_params * 4 * copies + batch * t * shape.n_actions * 4 * 4
        est.why["model"] = f"{shape.n_params:,} parameters x {copies} copies"
    rows = math.ceil(steps / cfg.log_every) + 1
    est.parts["logged rows"] = rows * ROW_BYTES
    est.why["logged rows"] = f"{rows:,} logged steps (--steps / --log-every)"
    est.parts["runs"] = RUN_OVERHEAD
    est.why["runs"] = "1 run"
    est.disk = rows * DISK_ROW_BYTES * 2 + 4096
    return est


DISK_REMEDY = "free some space, choose another --out or log less often (--log-every)"


class DiskTooSmall(UsageError):
    """The results of a sweep cannot fit on its output's file system. The line ends with the testbed's remedy
    (`DISK_REMEDY`); a command with other options says its own with `message`."""

    def __init__(self, n_runs: int, need: int, free: int, out: Path) -> None:
        self.n_runs, self.need, self.free, self.out = n_runs, need, free, out
        super().__init__(self.message(DISK_REMEDY))

    def message(self, remedy: str) -> str:
        return (f"the results of {self.n_runs:,} run(s) need about {fmt_bytes(self.need)} on disk under "
                f"{str(self.out)!r} but {fmt_bytes(self.free)} is free; {remedy}")


def check_fits(loops: list[Estimate], workers: int, n_runs: int, total_disk: int, out: Path,
               memory: int | None = None, disk: int | None = None) -> tuple[int, int | None, int | None]:
    """Raise UsageError when the ``workers`` largest loops cannot be held in memory at once, or `DiskTooSmall`
    when the results cannot fit on the output's file system; return (memory needed, memory available, disk free)."""
    memory = available_memory() if memory is None else memory
    disk = free_disk(out) if disk is None else disk
    biggest = sorted(loops, key=lambda e: e.memory, reverse=True)[: max(1, workers)]
    need = sum(e.memory for e in biggest)
    if memory is not None and need > memory and biggest:
        top = biggest[0]
        part = top.largest()
        running = f" ({len(biggest)} loops at once, --workers {workers})" if len(biggest) > 1 else ""
        raise UsageError(f"this work needs at least {fmt_bytes(need)} of memory{running} but {fmt_bytes(memory)} is "
                         f"available; the largest part is the {part} ({top.why.get(part, '')}: "
                         f"{fmt_bytes(top.parts[part])}); try {HINTS.get(part, 'less work')}")
    if disk is not None and total_disk > disk:
        raise DiskTooSmall(n_runs, total_disk, disk, out)
    return need, memory, disk


def check_count(n_runs: int, what: str, memory: int | None = None) -> None:
    """Refuse ``n_runs`` runs before building them when even their configs cannot be held in memory."""
    memory = available_memory() if memory is None else memory
    if memory is not None and n_runs * RUN_OVERHEAD > memory:
        raise UsageError(f"{what} gives {n_runs:,} runs, which need at least {fmt_bytes(n_runs * RUN_OVERHEAD)} of "
                         f"memory for their configs and records alone ({fmt_bytes(memory)} available); "
                         f"try {HINTS['runs']}")


# -- the output directory ---------------------------------------------------------------------------------


def check_output_dir(out: str | Path, create: bool, what: str = "--out") -> list[Path]:
    """Check that ``out`` is (or can become) a writable directory; with ``create``, make it and return the
    directories made (for `remove_created`). UsageError naming the path and the reason otherwise."""
    text = str(out)
    if not text.strip() or "\0" in text:
        raise UsageError(f"{what} must be a directory path, got {text!r}")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise UsageError(f"{what} {text!r} names an existing file, not a directory; choose a directory")
    anc = existing_ancestor(path)
    if not anc.is_dir():
        raise UsageError(f"{what} {text!r} cannot be created: {str(anc)!r} is a file, not a directory")
    if not create:  # a probe file made and removed at once: root passes os.access on a read-only directory
        try:
            _probe(anc)
        except OSError as exc:
            raise UsageError(f"{what} {text!r} is not writable: {_reason(exc)}") from None
        return []
    created: list[Path] = []
    todo = []
    p = Path(os.path.abspath(path))
    while not p.exists():
        todo.append(p)
        p = p.parent
    try:
        for d in reversed(todo):
            d.mkdir()
            created.append(d)
        _probe(path)
        _probe(path / "runs") if (path / "runs").is_dir() else None
    except OSError as exc:
        remove_created(created)
        raise UsageError(f"{what} {text!r} is not writable: {_reason(exc)}") from None
    return created


def _probe(directory: Path) -> None:
    fd, name = tempfile.mkstemp(dir=directory, prefix=".write-test.", suffix=".tmp")
    try:
        os.write(fd, b"x" * 4096)
        os.fsync(fd)
    finally:
        os.close(fd)
        os.unlink(name)


def _reason(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full (no space left on device)"
    if exc.errno == errno.EROFS:
        return "read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def remove_created(created: list[Path]) -> None:
    """Remove the (empty) directories `check_output_dir` made, deepest first."""
    for d in sorted(created, key=lambda p: len(p.parts), reverse=True):
        with contextlib.suppress(OSError):
            d.rmdir()
