"""Learner throughput as a fraction of the matmul peak, and the cost of 8 batched seeds vs 1 seed.

Learner step = the runner's own update (`Runner._update` for one seed, `BatchedRunner._update` for
8 seeds as one batched computation): forward, advantages, loss, backward, gradient transforms,
``Adam.step``, finiteness checks; no diagnostics (a non-logging step). Batches come from the
runner's own actors (sync, pg), a small pool reused.

* FLOPs per step are counted once with ``torch.utils.flop_counter.FlopCounterMode`` (matmuls of
  forward and backward; elementwise work and the CPU attention kernel, < 3% of the transformer's
  matmul FLOPs, are not counted, so the fractions are slight underestimates).
* The matmul peak (benchmarks/matmul_peak.py, n = 1024) is timed in alternation with the steps,
  and a fraction is the median over rounds of (step FLOPs / step seconds) / (peak in that round).
* "8 batched / 1 seed" is the median per-round ratio of the two step times (the issue's <= 2x);
  "8 batched / 8 one by one" divides by 8 single-seed steps (the speed-up a batch buys).
* The full simulator (actors, sampling, learner, the final evaluation) is timed the same way on
  MNIST: ``run_batched`` of 8 seeds vs ``run`` of one seed, ``--sim-steps`` steps each.

    python -m benchmarks.throughput [--rounds 8] [--threads 1] [--seeds 8]
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import DEFAULT_THREADS, Ratio, interleaved, median_ratio, set_threads, spread
from benchmarks.matmul_peak import MatmulPeak
from testbed.batched import BatchedRunner, run_batched
from testbed.runner import Chunk, RunConfig, Runner, run

TASKS = {
    "mnist": {"task": "mnist"},
    "token_reversal": {"task": "token_reversal", "task_args": {"partial_credit": True}},
}


def _batches(runner: Runner, n: int) -> list[dict[str, Any]]:
    """``n`` learner batches sampled by the runner's own actors at version 0."""
    out = []
    for t in range(n):
        chunks = [Chunk(t, a, runner.sizes[a]) for a in range(runner.cfg.n_actors)]
        for chunk in chunks:
            assert runner._generate(chunk, 0) is None
        out.append(runner._batch(chunks))
    return out


class SingleStep:
    def __init__(self, cfg: RunConfig, pool: int = 3) -> None:
        self.runner = Runner(cfg)
        self.pool = _batches(self.runner, pool)
        self.t = 0

    def __call__(self) -> None:
        self.runner._update(self.t, self.pool[self.t % len(self.pool)], None, False)
        self.t += 1


class BatchedStep:
    def __init__(self, cfgs: list[RunConfig], pool: int = 3) -> None:
        self.runner = BatchedRunner(cfgs)
        per_slot = [_batches(r, pool) for r in self.runner.runners]
        self.pool = [[b[i] for b in per_slot] for i in range(pool)]
        self.t = 0

    def __call__(self) -> None:
        n = len(self.runner.slots)
        # a step that neither logs nor precedes a log: no flat gradient is kept (as in a run)
        self.runner._update(self.t, self.pool[self.t % len(self.pool)], [None] * n, False, keep_grad=False)
        self.t += 1


class MLPFloor:
    """What an 8-seed MNIST learner step cannot avoid: its matmuls (forward: two ``baddbmm``; backward:
    the weight gradients of both layers and the input gradient of the second, as autograd computes
    them) and the stacked Adam step, on the batched step's own tensors, with nothing else."""

    def __init__(self, step: BatchedStep) -> None:
        br = step.runner
        self.opt, self.n = br.optimizer, len(br.slots)
        p = {k.split(".", 1)[1]: v.detach() for k, v in br.params.items()}
        self.w1, self.b1, self.w2, self.b2 = p["fc1.weight"], p["fc1.bias"], p["fc2.weight"], p["fc2.bias"]
        contexts = torch.stack([b["contexts"] for b in step.pool[0]])
        self.x = br.task.pixels(contexts)
        for q in br.params.values():
            q.grad = torch.zeros_like(q)

    def __call__(self) -> None:
        h = torch.baddbmm(self.b1[:, None], self.x, self.w1.transpose(1, 2)).relu_()
        out = torch.baddbmm(self.b2[:, None], h, self.w2.transpose(1, 2))
        torch.bmm(out.transpose(1, 2), h)
        gh = torch.bmm(out, self.w2)
        torch.bmm(gh.transpose(1, 2), self.x)
        self.opt.step([1.0] * self.n)


def count_flops(fn: Callable[[], Any]) -> float:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        with FlopCounterMode(display=False) as counter:
            fn()
    return float(counter.get_total_flops())


def learner(task: str, seeds: int, rounds: int, repeat: int) -> list[Ratio]:
    base = TASKS[task]
    cfgs = [RunConfig(**base, seed=s, steps=10**6) for s in range(seeds)]
    single, batched, peak = SingleStep(cfgs[0]), BatchedStep(cfgs), MatmulPeak()
    flops_single, flops_batched = count_flops(single), count_flops(batched)
    fns = {"peak": peak, "single": single, "batched": batched}
    if task == "mnist":
        fns["floor"] = MLPFloor(batched)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        times = interleaved(fns, rounds=rounds, repeat=repeat)
    peak_rate = [peak.flops / t for t in times["peak"]]
    frac_b = [flops_batched / t / p for t, p in zip(times["batched"], peak_rate, strict=True)]
    frac_s = [flops_single / t / p for t, p in zip(times["single"], peak_rate, strict=True)]
    med = sorted(peak_rate)[len(peak_rate) // 2]
    ms_s, ms_b = (1e3 * sorted(times[k])[len(times[k]) // 2] for k in ("single", "batched"))
    note = f"peak {med / 1e9:.1f} GFLOP/s; step {flops_single / 1e6:.0f} MFLOP/seed; 1 seed {ms_s:.1f} ms, {seeds} seeds {ms_b:.1f} ms"
    target_frac = ">= 0.3" if task == "mnist" else ""
    ratio_b = median_ratio(times["batched"], times["single"])
    lo, hi = spread([a / b for a, b in zip(times["batched"], times["single"], strict=True)])
    out = [
        Ratio(f"throughput:{task}", f"{seeds} seeds batched: learner FLOP/s / peak", sorted(frac_b)[len(frac_b) // 2],
              target_frac, note),
        Ratio(f"throughput:{task}", "1 seed: learner FLOP/s / peak", sorted(frac_s)[len(frac_s) // 2], "", note),
        Ratio(f"throughput:{task}", f"{seeds} seeds batched / 1 seed (learner step)", ratio_b, "<= 2.0",
              f"IQR {lo:.2f}-{hi:.2f}; {rounds}x{repeat} steps"),
        Ratio(f"throughput:{task}", f"{seeds} seeds batched / {seeds} one by one (learner)", ratio_b / seeds, "",
              "below 1: the batch is faster than the seeds one after another"),
    ]
    if "floor" in times:
        out.insert(3, Ratio(f"throughput:{task}", f"floor: {seeds} seeds' matmuls + Adam alone / 1 seed step",
                            median_ratio(times["floor"], times["single"]), "",
                            "a lower bound on the ratio above (MLPFloor: nothing but the unavoidable work)"))
        out.insert(1, Ratio(f"throughput:{task}", f"floor: {seeds} seeds' matmuls + Adam alone: FLOP/s / peak",
                            median_ratio([flops_batched / p for p in peak_rate], times["floor"]), "",
                            "an upper bound on the fraction above"))
    return out


def simulator(seeds: int, steps: int, rounds: int) -> list[Ratio]:
    cfgs = [RunConfig(task="mnist", seed=s, steps=steps, log_every=steps) for s in range(seeds)]
    times = interleaved({"single": lambda: run(cfgs[0]), "batched": lambda: run_batched(cfgs)}, rounds=rounds, warmup=0)
    ratio = median_ratio(times["batched"], times["single"])
    ms = 1e3 * sorted(times["single"])[len(times["single"]) // 2] / steps
    return [
        Ratio("simulator:mnist", f"{seeds} seeds batched / 1 seed (whole run)", ratio, "<= 2.0",
              f"{steps} steps; 1 seed {ms:.1f} ms/step; {rounds} rounds"),
        Ratio("simulator:mnist", f"{seeds} seeds batched / {seeds} one by one (whole run)", ratio / seeds, "",
              "below 1: the batch is faster than the seeds one after another"),
    ]


def run_all(quick: bool = False, seeds: int = 8, rounds: int | None = None, sim_steps: int | None = None) -> list[Ratio]:
    r = rounds or (3 if quick else 8)
    out = learner("mnist", seeds, r, 2 if quick else 5)
    out += learner("token_reversal", seeds, max(2, r // 2) if quick else r, 1)
    out += simulator(seeds, sim_steps or (20 if quick else 60), 2 if quick else 3)
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--sim-steps", type=int, default=None)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    print(f"threads: {set_threads(args.threads)}")
    for ratio in run_all(args.quick, args.seeds, args.rounds, args.sim_steps):
        print(ratio.line())


if __name__ == "__main__":
    main()
