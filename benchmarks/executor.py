"""Executor overhead: runs per second of one small sweep run as Ray tasks with 2 workers / with 1, and as Ray
tasks / in the local process pool at equal workers (testbed/util/executor.py).

The sweep: ``--runs`` MNIST pg runs of ``--steps`` steps, one run per loop (``loop_size`` 1: one job per run,
so the per-job cost shows), one thread per worker, run by `testbed.sweep.run_sweep` into a fresh directory
each time, in three ways that alternate round after round: Ray with 2 workers, Ray with 1, the local pool
with 2 worker processes. Ray is started once, on this machine with 2 CPUs, before the rounds (its start-up,
once per command, is counted in the last ratio only); its worker processes stay up between sweeps, while the
local pool spawns its workers for every sweep (importing torch and the testbed, loading MNIST), as it does
for every command. Workers use the cores in parallel, so this is timed on the wall clock; on a
machine shared with other jobs the 2-worker speed-up is bounded by the idle cores, so the load average is
printed at the start and at the end.

    python -m benchmarks.executor [--runs 8] [--steps 150] [--rounds 2]

Needs the optional extra ray (``pip install -e ".[ray]"``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from benchmarks.common import Ratio, set_threads
from testbed.runner import RunConfig
from testbed.sweep import run_sweep
from testbed.util.arguments import CommandLine
from testbed.util.executor import LocalPool, RayExecutor


def runs_per_second(configs: list[RunConfig], workers: int, executor) -> float:
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        run_sweep(configs, out, workers=workers, loop_size=1, progress=False, executor=executor)
        return len(configs) / (time.perf_counter() - t0)


def run(runs: int = 8, steps: int = 150, rounds: int = 2, quick: bool = False) -> list[Ratio]:
    if quick:
        runs, steps, rounds = 4, min(steps, 30), 1
    configs = [RunConfig(task="mnist", seed=s, steps=steps, log_every=max(1, steps // 3)) for s in range(runs)]
    ray = RayExecutor(num_cpus=2)
    t0 = time.perf_counter()
    ray.start(2)
    started = time.perf_counter() - t0
    runs_per_second(configs[:2], 2, ray)  # warm-up: Ray's two worker processes import torch and load MNIST
    modes = {"ray, 2 workers": (2, ray), "ray, 1 worker": (1, ray), "local pool, 2 workers": (2, LocalPool())}
    rates: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(rounds):
        names = list(modes)[r % 3:] + list(modes)[: r % 3]
        for name in names:
            rates[name].append(runs_per_second(configs, *modes[name]))
    two, one, local = (statistics.median(rates[m]) for m in modes)
    per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(rates["ray, 2 workers"], rates["ray, 1 worker"], strict=True))
    detail = (f"{runs} MNIST pg runs x {steps} steps, one run per loop, {rounds} round(s); runs/s: Ray 2 workers "
              f"{two:.3f}, Ray 1 worker {one:.3f}, local pool 2 workers {local:.3f}; Ray 2 / 1 by round: {per_round} "
              f"(their spread is the machine's noise); Ray start-up {started:.1f} s (once per command, not in the ratios)")
    return [
        Ratio("executor", "runs/s(Ray, 2 workers) / runs/s(Ray, 1)", two / one, ">= 1.8",
              detail + "; bounded by the idle cores on a shared machine"),
        Ratio("executor", "runs/s(Ray) / runs/s(local pool), 2 workers", two / local, ">= 0.95",
              "the local pool spawns its workers per sweep, Ray's stay up; above 0.95: Ray at most 5% slower"),
        Ratio("executor", "the same, Ray's start-up counted", runs / (runs / two + started) / local, "",
              "a one-sweep command under Ray: its start-up added to the sweep's wall time"),
    ]


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=8)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    set_threads(1)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    for ratio in run(args.runs, args.steps, args.rounds, quick=args.quick):
        print(ratio.line())
    print(f"load average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
