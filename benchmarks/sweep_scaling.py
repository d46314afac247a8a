"""Sweep scaling: wall time of one small sweep with 1 vs 2 worker processes, and with the runs in one loop.

The sweep: 4 seeds of MNIST pg (``--steps`` steps each, one thread per worker), run by
`testbed.sweep.run_sweep` into a fresh directory each time, in three ways that alternate round
after round: 1 worker; 2 worker processes (spawned, so each pays its own start-up: importing torch,
loading MNIST), one run per loop; 1 process with the 4 seeds in one loop (``loop_size``). Worker
processes use the cores in parallel, so this is timed on the wall clock whatever the thread count;
on a machine shared with other jobs the 2-worker speed-up is bounded by the idle cores, so the CPU
seconds used and the cores obtained are reported too.

    python -m benchmarks.sweep_scaling [--steps 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import tempfile
import time

from benchmarks.common import Ratio
from testbed.config import RunConfig
from testbed.sweep import run_sweep
from testbed.util.arguments import CommandLine


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the pool's workers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def sweep_seconds(configs: list[RunConfig], **kwargs: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one sweep."""
    with tempfile.TemporaryDirectory() as out:
        t0, c0 = time.perf_counter(), _cpu()
        run_sweep(configs, out, progress=False, **kwargs)
        return time.perf_counter() - t0, _cpu() - c0


def run(steps: int = 200, rounds: int = 2, seeds: int = 4, quick: bool = False) -> list[Ratio]:
    if quick:
        steps, rounds = min(steps, 40), 1
    configs = [RunConfig(task="mnist", seed=s, steps=steps, log_every=max(1, steps // 3)) for s in range(seeds)]
    modes = {"1 worker": {"workers": 1, "loop_size": 1}, "2 workers": {"workers": 2, "loop_size": 1},
             "one loop": {"workers": 1, "loop_size": seeds}}
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(rounds):
        names = list(modes)[r % 3:] + list(modes)[: r % 3]
        for name in names:
            wall, used = sweep_seconds(configs, **modes[name])
            times[name].append(wall)
            cpu[name].append(used)
    one, two, bat = (statistics.median(times[m]) for m in modes)
    c_one, c_two, c_bat = (statistics.median(cpu[m]) for m in modes)
    detail = (f"{seeds} MNIST runs x {steps} steps; wall: 1 worker {one:.1f} s, 2 workers {two:.1f} s, one loop {bat:.1f} s;"
              f" CPU: {c_one:.1f} s, {c_two:.1f} s, {c_bat:.1f} s")
    return [
        Ratio("sweep", "wall(1 worker) / wall(2 workers)", one / two, "", detail + "; above 1: 2 workers are faster"),
        Ratio("sweep", "CPU(2 workers) / CPU(1 worker)", c_two / c_one, "",
              "CPU seconds of parent + workers: what the second process costs (start-up: torch, testbed, MNIST)"),
        Ratio("sweep", "CPU share of 2 workers / of 1 worker", (c_two / two) / (c_one / one), "",
              "cores actually obtained; 2 on an idle 2-core machine, ~1 when the machine is saturated"),
        Ratio("sweep", f"wall({seeds} runs in one loop) / wall(1 worker)", bat / one, "", "below 1: one loop is faster"),
    ]


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    for ratio in run(args.steps, args.rounds, quick=args.quick):
        print(ratio.line())


if __name__ == "__main__":
    main()
