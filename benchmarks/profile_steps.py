"""Profiles that explain the benchmark numbers (where a learner step spends its CPU time).

1. The MNIST learner step of 8 seeds batched, phase by phase (each phase timed alone on the thread
   CPU clock: the batched forward, forward + backward, one slot's advantages + loss, the stacked
   Adam step, the whole step), next to one seed's whole step; then torch.profiler's top operators.
2. Per-phase CPU time of the learner step for pg and each recipe (benchmarks/stabilizer_overhead.py's
   step, which times its phases), on the MNIST MLP and the tiny transformer.

    python -m benchmarks.profile_steps [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from benchmarks.common import DEFAULT_THREADS, set_threads
from benchmarks.stabilizer_overhead import PHASES, RECIPES, Learner, Setup
from benchmarks.throughput import BatchedStep, SingleStep
from testbed.runner import RunConfig
from testbed.stabilizers import PolicyTerms


def cpu_ms(fn: Callable[[], Any], n: int) -> float:
    for _ in range(2):
        fn()
    out = []
    for _ in range(n):
        t0 = time.thread_time()
        fn()
        out.append(time.thread_time() - t0)
    return 1e3 * statistics.median(out)


def batched_mnist(seeds: int = 8, n: int = 20) -> str:
    cfgs = [RunConfig(task="mnist", seed=s, steps=10**6) for s in range(seeds)]
    step, single = BatchedStep(cfgs), SingleStep(cfgs[0])
    br = step.runner
    batches = step.pool[0]
    contexts = torch.stack([b["contexts"] for b in batches])
    actions = torch.stack([b["actions"] for b in batches])
    slot, batch = br.runners[0], batches[0]
    logp = br.token_logp(contexts, actions)

    def forward_backward() -> None:
        for p in br.params.values():
            p.grad = None
        br.token_logp(contexts, actions).sum().backward()

    def one_slot_loss() -> None:
        lp, blogp = logp[0], batch["behavior_logp"]
        mask = torch.ones_like(lp, dtype=torch.bool)
        adv = slot.recipe.advantages(batch["rewards"], logp=lp.detach(), behavior_logp=blogp, mask=mask)
        terms = PolicyTerms(lp, blogp, adv, mask, proximal_logp=lp.detach(), versions=batch["versions"],
                            rewards=batch["rewards"])
        slot.recipe.loss(terms, slot.cfg.agg)

    rows = {
        f"whole step, {seeds} seeds batched": cpu_ms(step, n),
        "  forward (vmap, exact rules, pixel gather)": cpu_ms(lambda: br.token_logp(contexts, actions), n),
        "  forward + backward": cpu_ms(forward_backward, n),
        f"  advantages + loss, one slot (x{seeds})": cpu_ms(one_slot_loss, n),
        "  Adam step on the stacked parameters": cpu_ms(lambda: br.optimizer.step([1.0] * seeds), n),
        "whole step, 1 seed (Runner._update)": cpu_ms(single, n),
    }
    lines = ["| phase | CPU ms |", "| --- | ---: |"] + [f"| {k} | {v:.2f} |" for k, v in rows.items()]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(n):
                step()
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=40)
    return "\n".join(lines) + "\n\ntorch.profiler, " + f"{n} batched steps, top operators by self CPU time:\n\n```\n{table}\n```"


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
        "### MNIST learner step, 8 seeds batched\n\n" + batched_mnist(n=n),
        "### Learner step by phase and recipe\n\n" + recipe_phases("mnist", n),
        recipe_phases("transformer", max(2, n // 4)),
    ]
    return "\n\n".join(parts)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    set_threads(args.threads)
    print(run(args.steps, args.quick))


if __name__ == "__main__":
    main()
