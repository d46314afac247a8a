"""The simulator loop's speed: ratios against references timed in the same run, and paper-budget wall times.

* ``mnist dg step / lean eager step``: one MNIST run with the DG recipe and default diagnostics
  (``log_every`` 100: evaluation and diagnostics included), time per step of the whole loop over
  `LEAN_STEPS` steps, against a lean eager PyTorch step of the same MLP (784-100-10), batch (100)
  and Adam (``fused=True``) written here: the actor's forward (no grad) and multinomial sample, the
  DG loss on the learner's forward, backward, the optimizer step. (A single-forward variant, in
  which the learner reuses the actor's forward, as only an on-policy loop can, is reported beside it.)
* ``8 runs: learner FLOP/s / matmul peak``: eight MNIST runs in one loop; the learner phase
  (`Runner.learn`) timed alone, its matmul FLOPs counted by ``FlopCounterMode``, divided by the
  machine's float32 matmul rate (benchmarks/matmul_peak.py) timed in alternation.
* ``8 runs / 1 run (whole runs)``: wall time of eight MNIST runs in one loop over that of one.
* ``token reversal sampling / one full forward``: H = 10, M = 2, 10 actors x 10 episodes; the actor
  phase of one step (`Runner.act`: sampling H tokens with the key/value cache, frictions, rewards)
  over one teacher-forced forward pass of the same batch (no grad).
* ``token reversal step: before / now``: the whole step (100 steps, no intermediate logging) of the
  loop as it was before the key/value cache and the one loop, measured on this machine with the same
  definition and recorded in `BEFORE_TOKEN_STEP_MS`, over today's.
* ``8 runs: step records at once / one run at a time``: the per-optimizer-step records
  (`testbed.health.step_stats`) of eight MNIST runs' step (batch 100, the MLP's 79,510 gradient
  entries) computed for the loop at once, over the same function called run by run.
* ``8 runs, opob's learner step: one forward for the norms and the update / two``: OPOB's per-sample score
  norms (`testbed.diagnostics`, one backward to the layers' outputs) and a loss gradient through the same
  logits, for eight MNIST runs' batches of 100, from one forward (`score_sq_norms_and_logits`, as the learner
  does when a batch makes one update), over the norms' own forward followed by a second one for the loss.
* ``token reversal evaluation: greedy once per context / every repeat``: `TokenReversal.evaluate` of
  four runs at H = 10 (the 2,048 evaluation contexts repeat the enumerated test split nine times), over
  the same evaluation with the greedy decoding run on every repeat (two rollouts of 2,048 contexts).
* ``8 runs, 100 images x 16 samples: grouped / 1,600 distinct images``: eight MNIST runs in one loop (pg with
  the batch-mean baseline, DG-1's k = 16 cell), each batch 100 images sampled 16 times (``group_size`` 16:
  `testbed.tasks.base.grouped_logits` computes each image's logits once), over the same loop with 1,600
  distinct images per batch (``group_size`` 1): what sampling an image k times costs against k times the images.
* ``exact-gradient runs (dg_exact), 5 seeds together / one by one``: DG-1's infinite-sample MNIST runs
  (figures/oracle_runs.py) of five seeds trained in one stacked model, over the same five trained one after
  another (each seed's rows are the same bit for bit).
* Paper budgets: wall time of one MNIST run of 10,000 steps at a fixed lag of 1,000, and of one token
  reversal run (H = 10) of 1,000 steps.

    python -m benchmarks loop [--quick]     or     python -m benchmarks.loop
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.common import DEFAULT_THREADS, Ratio, clock, interleaved, median_ratio, set_threads, spread
from benchmarks.matmul_peak import MatmulPeak
from testbed import diagnostics as diag
from testbed import health
from testbed.config import RunConfig
from testbed.runner import Runner, run, run_many
from testbed.tasks import make_task
from testbed.tasks.base import token_logp
from testbed.util.arguments import CommandLine

LEAN_STEPS = 500
# The token reversal step before this loop (2026-11-23, this machine, quiet, 1 thread, torch 2.13.0):
# 100 steps of H = 10, M = 2, 10 actors x 10 episodes, dg, log_every 1000: 120.5 ms per step
# (sampling 98.6 ms of it: H full forwards per actor chunk; one full forward of the batch 6.6 ms).
BEFORE_TOKEN_STEP_MS = 120.5
# The MNIST DG step before this loop, same definition as `mnist_step`: 2.28 x the lean step (2.30 ms).
BEFORE_MNIST_RATIO = 2.28
TOKEN = {"task": "token_reversal", "recipe": "dg", "n_actors": 10, "batch_size": 100, "task_args": {"H": 10, "M": 2}}


class LeanStep:
    """A lean eager actor-learner DG step on MNIST (see the module docstring)."""

    def __init__(self, single_forward: bool = False) -> None:
        self.task = make_task("mnist")
        self.gen = torch.Generator().manual_seed(0)
        torch.manual_seed(0)
        self.model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10))
        self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3, fused=True)
        self.single = single_forward

    def __call__(self) -> None:
        idx = torch.randint(self.task.n_train, (100,), generator=self.gen)
        x = self.task.pixels(idx)
        if self.single:
            logp_all = F.log_softmax(self.model(x), -1)
            a = torch.multinomial(logp_all.detach().exp(), 1, generator=self.gen)
            logp = logp_all.gather(1, a).squeeze(1)
            a = a.squeeze(1)
        else:
            with torch.no_grad():
                a = torch.multinomial(F.softmax(self.model(x), -1), 1, generator=self.gen).squeeze(1)
            logp = F.log_softmax(self.model(x), -1).gather(1, a[:, None]).squeeze(1)
        r = (a == self.task.labels[idx]).float()
        adv = r - r.mean()
        gate = torch.sigmoid(adv * -logp.detach())
        loss = -(gate * adv * logp).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def mnist_step(rounds: int, steps: int = LEAN_STEPS) -> list[Ratio]:
    lean, lean1 = LeanStep(), LeanStep(single_forward=True)
    times = interleaved({
        "ours": lambda: run(RunConfig(task="mnist", recipe="dg", steps=steps)),
        "lean": lambda: [lean() for _ in range(steps)],
        "lean1": lambda: [lean1() for _ in range(steps)],
    }, rounds=rounds, warmup=1)
    ratio = median_ratio(times["ours"], times["lean"])
    lo, hi = spread([a / b for a, b in zip(times["ours"], times["lean"], strict=True)])
    ms = {k: 1e3 * statistics.median(v) / steps for k, v in times.items()}
    return [
        Ratio("loop:mnist", "dg step (1 run, default diagnostics) / lean eager step", ratio, "<= 1.5",
              f"IQR {lo:.2f}-{hi:.2f}; ours {ms['ours']:.2f} ms, lean {ms['lean']:.2f} ms per step; {rounds} rounds x "
              f"{steps} steps (before: {BEFORE_MNIST_RATIO})"),
        Ratio("loop:mnist", "dg step / lean single-forward step", median_ratio(times["ours"], times["lean1"]), "",
              f"lean single-forward {ms['lean1']:.2f} ms per step (an on-policy shortcut an async actor cannot take)"),
    ]


def _drive(runner: Runner, t: int, phases: dict[str, float]) -> None:
    """One step of the loop through its public phases, timing each on `clock`."""
    now = clock()
    t0 = now()
    runner.act(t)
    t1 = now()
    runner.learn(t)
    t2 = now()
    runner.publish(t)
    t3 = now()
    phases["act"] += t1 - t0
    phases["learn"] += t2 - t1
    phases["publish"] += t3 - t2


def learner_flops(seeds: int, rounds: int, steps: int) -> list[Ratio]:
    """Eight MNIST runs in one loop: the learner phase's FLOP/s over the matmul peak."""
    cfgs = [RunConfig(task="mnist", recipe="dg", seed=s, steps=10**6, log_every=10**6) for s in range(seeds)]
    runner = Runner(cfgs)
    runner.publish(-1)
    runner.act(0)
    with FlopCounterMode(display=False) as counter:
        runner.learn(0)
    flops = float(counter.get_total_flops())
    runner.publish(0)
    peak = MatmulPeak()
    state = {"t": 1}
    phases = {"act": 0.0, "learn": 0.0, "publish": 0.0}

    def block() -> None:
        for _ in range(steps):
            _drive(runner, state["t"], phases)
            state["t"] += 1

    fracs, peaks = [], []
    for _ in range(rounds):
        t_peak = statistics.median(_timed(peak) for _ in range(3))
        phases.update(act=0.0, learn=0.0, publish=0.0)
        block()
        learn = phases["learn"] / steps
        fracs.append(flops / learn / (peak.flops / t_peak))
        peaks.append(peak.flops / t_peak)
    frac = statistics.median(fracs)
    lo, hi = spread(fracs)
    return [Ratio("loop:mnist", f"{seeds} runs: learner FLOP/s / matmul peak", frac, ">= 0.5",
                  f"IQR {lo:.2f}-{hi:.2f}; learner step {flops / 1e6:.0f} MFLOP ({flops / seeds / 1e6:.0f} per run), "
                  f"{1e3 * phases['learn'] / steps:.2f} ms; peak {statistics.median(peaks) / 1e9:.0f} GFLOP/s (before: 0.18)")]


def _timed(fn: object) -> float:
    now = clock()
    t0 = now()
    fn()  # type: ignore[operator]
    return now() - t0


def many_runs(seeds: int, rounds: int, steps: int) -> list[Ratio]:
    cfgs = [RunConfig(task="mnist", recipe="dg", seed=s, steps=steps) for s in range(seeds)]
    times = interleaved({"one": lambda: run(cfgs[0]), "many": lambda: run_many(cfgs)}, rounds=rounds, warmup=1)
    ratio = median_ratio(times["many"], times["one"])
    lo, hi = spread([a / b for a, b in zip(times["many"], times["one"], strict=True)])
    return [Ratio("loop:mnist", f"{seeds} runs / 1 run (whole runs, wall)", ratio, "<= 4",
                  f"IQR {lo:.2f}-{hi:.2f}; {steps} steps, dg, default diagnostics; {rounds} rounds (before: 5.8)")]


def token_sampling(rounds: int) -> list[Ratio]:
    runner = Runner([RunConfig(**TOKEN, steps=10**6, log_every=10**6)])
    runner.publish(-1)
    task, policy = runner.task, runner.policy
    phases = {"act": 0.0, "learn": 0.0, "publish": 0.0}
    state = {"t": 0}
    contexts = torch.stack([task.sample_contexts(100, torch.Generator().manual_seed(0))])
    actions = torch.randint(2, contexts.shape, generator=torch.Generator().manual_seed(1))

    def sample() -> None:
        before = phases["act"]
        _drive(runner, state["t"], phases)
        state["t"] += 1
        sample.last = phases["act"] - before  # type: ignore[attr-defined]

    def forward() -> None:
        with torch.no_grad():
            task.logits(policy, contexts, actions)

    acts, fwds = [], []
    for _ in range(3):
        sample()
        forward()
    for _ in range(rounds):
        sample()
        acts.append(sample.last)  # type: ignore[attr-defined]
        fwds.append(_timed(forward))
    ratio = median_ratio(acts, fwds)
    lo, hi = spread([a / b for a, b in zip(acts, fwds, strict=True)])
    return [Ratio("loop:token_reversal", "sampling H=10 (10 actors x 10) / one full forward", ratio, "<= 2",
                  f"IQR {lo:.2f}-{hi:.2f}; sampling {1e3 * statistics.median(acts):.1f} ms, forward "
                  f"{1e3 * statistics.median(fwds):.1f} ms (before: 15)")]


def token_step(rounds: int, steps: int = 100) -> list[Ratio]:
    per_step = []
    for _ in range(rounds):
        runner = Runner([RunConfig(**TOKEN, steps=steps, log_every=1000)])
        per_step.append(_timed(runner.run) / steps)
    ms = 1e3 * statistics.median(per_step)
    return [Ratio("loop:token_reversal", "whole step: before / now (speed-up)", BEFORE_TOKEN_STEP_MS / ms, ">= 5",
                  f"now {ms:.1f} ms per step (median of {rounds} runs of {steps} steps), before {BEFORE_TOKEN_STEP_MS} ms")]


def step_records(rounds: int, seeds: int = 8) -> list[Ratio]:
    runner = Runner([RunConfig(task="mnist", recipe="dg", seed=s, steps=10**6) for s in range(seeds)])
    runner.publish(-1)
    calls = []
    original = health.step_stats

    def spy(*args: object) -> dict:
        calls.append(args)
        return original(*args)

    health.step_stats = spy
    try:
        for t in range(2):  # the second step's call has a previous gradient (cosines)
            _drive(runner, t, {"act": 0.0, "learn": 0.0, "publish": 0.0})
    finally:
        health.step_stats = original
    logits, logp, blogp, adv, grads, prev = calls[-1]

    def at_once() -> None:
        health.step_stats(logits, logp, blogp, adv, grads, prev)

    def one_by_one() -> None:
        for i in range(seeds):
            s = slice(i, i + 1)
            health.step_stats(logits[s], logp[s], blogp[s], adv[s], grads[s], prev[s])

    times = interleaved({"at_once": at_once, "one_by_one": one_by_one}, rounds=rounds, repeat=20, warmup=1)
    ratio = median_ratio(times["at_once"], times["one_by_one"])
    lo, hi = spread([a / b for a, b in zip(times["at_once"], times["one_by_one"], strict=True)])
    return [Ratio("loop:mnist", f"{seeds} runs: step records at once / one run at a time", ratio, "<= 0.5",
                  f"IQR {lo:.2f}-{hi:.2f}; at once {1e3 * statistics.median(times['at_once']):.2f} ms, run by run "
                  f"{1e3 * statistics.median(times['one_by_one']):.2f} ms per step of {seeds} runs; {rounds} rounds")]


def score_norm_forward(rounds: int, seeds: int = 8) -> list[Ratio]:
    """OPOB's learner step on the MNIST MLP (one update per batch): the per-sample score norms and the update's
    loss gradient from one forward (`diag.score_sq_norms_and_logits`) / from the norms' forward and another."""
    task = make_task("mnist")
    policy = task.make_policy([torch.Generator().manual_seed(s) for s in range(seeds)])
    g = torch.Generator().manual_seed(0)
    x = torch.stack([task.sample_contexts(100, g) for _ in range(seeds)])
    a = torch.randint(task.n_actions, (seeds, 100, 1), generator=g)
    params = list(policy.parameters())

    def backward(logits: torch.Tensor, norms: torch.Tensor) -> None:
        loss = -(token_logp(logits, a).sum(-1) * norms).sum()
        torch.autograd.grad(loss, params)

    def one() -> None:
        norms, logits = diag.score_sq_norms_and_logits(task, policy, x, a)
        backward(logits, norms)

    def two() -> None:
        norms = diag.score_sq_norms(task, policy, x, a)
        backward(task.logits(policy, x, a), norms)

    times = interleaved({"one": one, "two": two}, rounds=rounds, repeat=20, warmup=1)
    ratio = median_ratio(times["one"], times["two"])
    lo, hi = spread([p / q for p, q in zip(times["one"], times["two"], strict=True)])
    return [Ratio("loop:mnist", f"{seeds} runs, opob's learner step: one forward for the norms and the update / two",
                  ratio, "<= 0.85", f"IQR {lo:.2f}-{hi:.2f}; {1e3 * statistics.median(times['one']):.2f} ms against "
                  f"{1e3 * statistics.median(times['two']):.2f} ms per step of {seeds} runs (forward, norms, "
                  f"backward); {rounds} rounds")]


def token_evaluation(rounds: int, runs: int = 4) -> list[Ratio]:
    task = make_task("token_reversal", H=10, M=2, n_eval=2048)
    policy = task.make_policy([torch.Generator().manual_seed(s) for s in range(runs)])
    gens = [torch.Generator().manual_seed(100 + s) for s in range(runs)]
    contexts = torch.stack([task.eval_contexts(g) for g in gens])
    u = torch.rand(contexts.shape)

    def once() -> None:
        task.evaluate(policy, gens)

    def every_repeat() -> None:
        task.rollout(policy, contexts, u)
        task.rollout(policy, contexts)

    times = interleaved({"once": once, "every": every_repeat}, rounds=rounds, warmup=1)
    ratio = median_ratio(times["once"], times["every"])
    lo, hi = spread([a / b for a, b in zip(times["once"], times["every"], strict=True)])
    reps = contexts.shape[1] // task.enumerated_split.shape[0]
    return [Ratio("loop:token_reversal", "evaluation H=10: greedy once per context / every repeat", ratio, "<= 0.6",
                  f"IQR {lo:.2f}-{hi:.2f}; {runs} runs, {contexts.shape[1]:,} contexts ({reps} repeats of the test "
                  f"split); {1e3 * statistics.median(times['once']):.0f} ms against "
                  f"{1e3 * statistics.median(times['every']):.0f} ms; {rounds} rounds")]


def grouped_samples(rounds: int, steps: int, seeds: int = 8, k: int = 16) -> list[Ratio]:
    def loop(group: int) -> list[RunConfig]:
        return [RunConfig(task="mnist", recipe="pg+mean", seed=s, steps=steps, log_every=steps, batch_size=100 * k,
                          group_size=group) for s in range(seeds)]

    grouped, distinct = loop(k), loop(1)
    times = interleaved({"grouped": lambda: run_many(grouped), "distinct": lambda: run_many(distinct)},
                        rounds=rounds, warmup=1)
    ratio = median_ratio(times["grouped"], times["distinct"])
    lo, hi = spread([a / b for a, b in zip(times["grouped"], times["distinct"], strict=True)])
    return [Ratio("loop:mnist", f"{seeds} runs, 100 images x {k} samples: grouped / {100 * k:,} distinct images", ratio,
                  "<= 0.5", f"IQR {lo:.2f}-{hi:.2f}; {steps} steps; {1e3 * statistics.median(times['grouped']) / steps:.1f} "
                  f"ms against {1e3 * statistics.median(times['distinct']) / steps:.1f} ms per step; {rounds} rounds")]


def oracle_seeds(rounds: int, steps: int, seeds: int = 5) -> list[Ratio]:
    from figures import oracle_runs

    kind = "dg_exact"
    times = interleaved({"together": lambda: oracle_runs.train(kind, list(range(seeds)), steps, steps),
                         "alone": lambda: [oracle_runs.train(kind, [s], steps, steps) for s in range(seeds)]},
                        rounds=rounds, warmup=1)
    ratio = median_ratio(times["together"], times["alone"])
    lo, hi = spread([a / b for a, b in zip(times["together"], times["alone"], strict=True)])
    return [Ratio("loop:mnist", f"exact-gradient runs ({kind}), {seeds} seeds together / one by one", ratio, "<= 0.7",
                  f"IQR {lo:.2f}-{hi:.2f}; {steps} steps; {1e3 * statistics.median(times['together']) / steps:.2f} "
                  f"ms against {1e3 * statistics.median(times['alone']) / steps:.2f} ms per step of {seeds} seeds; "
                  f"{rounds} rounds")]


def paper_budgets() -> list[Ratio]:
    out = []
    for label, cfg in (("MNIST 10,000 steps at lag 1,000, 1 run (s)",
                        RunConfig(task="mnist", recipe="dg", delay="fixed:1000", steps=10_000)),
                       ("token reversal H=10, 1,000 steps, 1 run (s)", RunConfig(**TOKEN, steps=1000))):
        t0 = time.perf_counter()
        result = run(cfg)
        wall = time.perf_counter() - t0
        final = result.rows[-1].get("test_error", float("nan"))
        out.append(Ratio("budget", label, wall, "", f"wall clock; final test error {final:.3f}"))
    return out


def run_all(quick: bool = False) -> list[Ratio]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = mnist_step(2 if quick else 5, steps=100 if quick else LEAN_STEPS)
        out += learner_flops(8, 2 if quick else 5, 10 if quick else 50)
        out += many_runs(8, 1 if quick else 3, 50 if quick else 300)
        out += token_sampling(3 if quick else 10)
        out += step_records(2 if quick else 10)
        out += score_norm_forward(2 if quick else 10)
        out += token_step(1 if quick else 3, steps=10 if quick else 100)
        out += token_evaluation(2 if quick else 5)
        out += grouped_samples(1 if quick else 3, 10 if quick else 100)
        out += oracle_seeds(1 if quick else 5, 20 if quick else 300)
        if not quick:
            out += paper_budgets()
    return out


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    print(f"threads: {set_threads(args.threads)}")
    for ratio in run_all(args.quick):
        print(ratio.line())


if __name__ == "__main__":
    main()
