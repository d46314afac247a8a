"""Shared helpers of the benchmarks: threads, interleaved timing, machine description, result rows.

Every benchmark reports *ratios measured in one run on one machine*. The machine may be shared with
other jobs, so the two sides of a ratio are timed in alternation (A, B, A, B, ...: contention hits
both alike) and a ratio is the median over rounds of the per-round ratio.

Clock. With one intra-op thread (the default) every op, backward included, runs on the calling
thread, so the benchmarks time with that thread's CPU clock (``time.thread_time``): time spent
descheduled while other jobs hold the cores does not count, which keeps ratios stable on a busy
machine. With more threads they use the wall clock (``time.perf_counter``). `clock_name` says which.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from testbed.util.provenance import cpu_model

DEFAULT_THREADS = 1


def set_threads(threads: int) -> int:
    """Use ``threads`` intra-op threads (the benchmarks default to 1: the CI machine has 2 cores, and
    one thread per process is how sweeps run). Returns the value in effect."""
    torch.set_num_threads(threads)
    return torch.get_num_threads()


def clock() -> Callable[[], float]:
    """The clock the benchmarks use: this thread's CPU time with 1 thread, else wall time."""
    return time.thread_time if torch.get_num_threads() == 1 else time.perf_counter


def clock_name() -> str:
    return "thread CPU time" if torch.get_num_threads() == 1 else "wall time"


def timed(fn: Callable[[], Any], repeat: int = 1) -> float:
    """Seconds per call of ``fn`` over ``repeat`` calls (on `clock`)."""
    now = clock()
    t0 = now()
    for _ in range(repeat):
        fn()
    return (now() - t0) / repeat


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int, repeat: int = 1, warmup: int = 1) -> dict[str, list[float]]:
    """Per-round seconds per call of each function, the functions alternating within every round.

    The order inside a round rotates, so no function always runs right after another one.
    """
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            out[name].append(timed(fns[name], repeat))
    return out


def median_ratio(num: list[float], den: list[float]) -> float:
    """Median over rounds of num[r] / den[r]."""
    return statistics.median(a / b for a, b in zip(num, den, strict=True))


def spread(values: list[float]) -> tuple[float, float]:
    """(25th, 75th) percentile, to show how noisy a ratio was."""
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[2]


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "clock": clock_name(),
        "python": platform.python_version(),
        "load_1min": round(load[0], 2),
    }


@dataclass
class Ratio:
    """One reported number: a ratio (ours / baseline), the target it is held to, and how it was measured."""

    group: str
    name: str
    value: float
    target: str = ""  # e.g. "<= 1.05"; empty: reported only
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def met(self) -> bool | None:
        if not self.target:
            return None
        op, bound = self.target.split()
        return self.value <= float(bound) if op == "<=" else self.value >= float(bound)

    def line(self) -> str:
        verdict = {None: "", True: "  ok", False: "  MISSED"}[self.met]
        target = f"  (target {self.target})" if self.target else ""
        return f"{self.group:<22} {self.name:<42} {self.value:8.3f}{target}{verdict}  {self.detail}"


def write_report(path: str, report: dict[str, Any]) -> None:
    """Write a benchmark's report as JSON to ``path`` (its folder made if needed; atomically) and say so."""
    import json
    from pathlib import Path

    from testbed.util.files import atomic_write_text

    Path(path).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(path), json.dumps(report, indent=1) + "\n")
    print(f"wrote {path}")
