"""Profiles that explain the benchmark numbers (where a step of the loop spends its CPU time).

1. The loop's phases (`Runner.act`: sampling; `Runner.learn`: the update; `Runner.publish`: the
   divergence check, evaluation and logging) per step on the thread CPU clock, for one MNIST run,
   eight MNIST runs in one loop and one token-reversal run (H = 10, 10 actors x 10 episodes); then
   torch.profiler's top operators of the eight-run learner phase and of the token-reversal step.
2. Per-phase CPU time of the learner step for pg and each recipe (benchmarks/stabilizer_overhead.py's
   step, which times its phases), on the MNIST MLP and the tiny transformer.

    python -m benchmarks.profile_steps [--steps 20]
"""

from __future__ import annotations

import argparse
import time
import warnings

from torch.profiler import ProfilerActivity, profile, record_function

from benchmarks.common import DEFAULT_THREADS, set_threads
from benchmarks.loop import TOKEN
from benchmarks.stabilizer_overhead import PHASES, RECIPES, Learner, Setup
from testbed.config import RunConfig
from testbed.runner import Runner
from testbed.util.arguments import CommandLine


def _runner(cfgs: list[RunConfig], warm: int = 5) -> Runner:
    runner = Runner(cfgs)
    runner.publish(-1)
    for t in range(warm):
        runner.act(t)
        runner.learn(t)
        runner.publish(t)
    return runner


def loop_phases(n: int) -> str:
    cases = {
        "MNIST dg, 1 run": [RunConfig(task="mnist", recipe="dg", steps=10**6)],
        "MNIST dg, 8 runs in one loop": [RunConfig(task="mnist", recipe="dg", seed=s, steps=10**6) for s in range(8)],
        "token reversal H=10 dg, 1 run": [RunConfig(**TOKEN, steps=10**6)],
    }
    lines = ["| case | act ms | learn ms | publish ms | step ms |", "| --- | ---: | ---: | ---: | ---: |"]
    tables = []
    for label, cfgs in cases.items():
        runner = _runner(cfgs)
        steps = n if "token" not in label else max(2, n // 4)
        acc = {"act": 0.0, "learn": 0.0, "publish": 0.0}
        for t in range(5, 5 + steps):
            for phase in acc:
                t0 = time.thread_time()
                getattr(runner, phase)(t)
                acc[phase] += time.thread_time() - t0
        ms = {k: 1e3 * v / steps for k, v in acc.items()}
        lines.append(f"| {label} | {ms['act']:.2f} | {ms['learn']:.2f} | {ms['publish']:.2f} | {sum(ms.values()):.2f} |")
        if "1 run" in label and "MNIST" in label:
            continue
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for t in range(5 + steps, 5 + 2 * steps):
                runner.act(t)
                with record_function("learn"):
                    runner.learn(t)
                runner.publish(t)
        table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40)
        tables.append(f"torch.profiler, {label}, {steps} steps, top operators by self CPU time (``learn`` is the "
                      f"learner phase's own Python time):\n\n```\n{table}\n```")
    return "\n".join(lines) + "\n\n" + "\n\n".join(tables)


def recipe_phases(kind: str, n: int, specs: list[str] | None = None) -> str:
    setup = Setup(kind)
    specs = ["pg", *(specs or RECIPES)]
    learners = {s: Learner(setup, s) for s in specs}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        for learner in learners.values():  # warm up, then reset the phase clocks
            learner.step()
            learner.phase_s = dict.fromkeys(PHASES, 0.0)
        for _ in range(n):
            for learner in learners.values():
                learner.step()
    lines = ["| recipe | " + " | ".join(PHASES) + " |", "| --- |" + " ---: |" * len(PHASES)]
    for spec, learner in learners.items():
        lines.append(f"| {spec} | " + " | ".join(f"{1e3 * learner.phase_s[p] / n:.2f}" for p in PHASES) + " |")
    return f"{kind}: mean CPU ms per phase over {n} steps\n\n" + "\n".join(lines)


def run(steps: int = 20, quick: bool = False) -> str:
    n = 4 if quick else steps
    parts = [
        "### The loop's phases\n\n" + loop_phases(n),
        "### Learner step by phase and recipe\n\n" + recipe_phases("mnist", n),
        recipe_phases("transformer", max(2, n // 4)),
    ]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    set_threads(args.threads)
    print(run(args.steps, args.quick))


if __name__ == "__main__":
    main()
