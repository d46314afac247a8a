"""Per-step cost of each stabilizer recipe relative to plain pg, on the same learner step.

The step is the runner's learner step without diagnostics: forward (token log-probs), advantages
(with exact per-sample score norms for opob/vcpo, by `testbed.diagnostics.score_sq_norms`), the
recipe's loss, backward, its gradient transforms and ``Adam.step`` (``fused``, as the runner builds
it), through the public recipe API only, on a one-slot policy (testbed/tasks/stacked.py). Each recipe
has its own copy of the same initial model and optimizer and consumes the same pool of batches
(behaviour log-probs = current ones + N(0, 0.05^2) noise, so ratios are not all 1). The recipes are
timed in alternation, round after round; a recipe's number is the median over rounds of
(its seconds per step) / (pg's seconds per step in the same round).

Models: the MNIST MLP (784-100-10, batch 100) and the token-reversal transformer (d_model 64,
2 layers, 2 heads, H = 10, M = 2, partial credit, batch 100).

    python -m benchmarks.stabilizer_overhead [--rounds 10] [--threads 1] [--model mnist|transformer|both]
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from typing import Any

import torch
from torch import Tensor, nn

from benchmarks.common import DEFAULT_THREADS, Ratio, interleaved, median_ratio, set_threads, spread
from testbed.diagnostics import score_sq_norms
from testbed.stabilizers import PolicyTerms, build
from testbed.tasks import make_task
from testbed.tasks.base import token_logp
from testbed.util.arguments import CommandLine

# recipe spec -> target on (mnist, transformer); None = reported only
RECIPES: dict[str, tuple[str | None, str | None]] = {
    "dg": ("<= 1.05", "<= 1.05"),
    "tis": ("<= 1.05", "<= 1.05"),
    "mis": ("<= 1.05", "<= 1.05"),
    "ppo": ("<= 1.05", "<= 1.05"),
    "decoupled_ppo": ("<= 1.05", "<= 1.05"),
    "cispo": ("<= 1.05", "<= 1.05"),
    "gspo": ("<= 1.05", "<= 1.05"),
    "gac": (None, "<= 1.10"),
    "gac(t_low=-1, t_high=1)": (None, None),  # worst case: projects on every step
    "ess_lr": (None, "<= 1.10"),
    "opob": (None, None),
    "vcpo": (None, None),
}
BATCH = 100


class Setup:
    """A task, its model, a pool of batches, and the per-sample log-likelihood for score norms."""

    def __init__(self, kind: str, n_batches: int = 4, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.kind = kind
        if kind == "mnist":
            self.task = make_task("mnist")
        elif kind == "transformer":
            self.task = make_task("token_reversal", partial_credit=True)
        else:
            raise ValueError(f"model must be 'mnist' or 'transformer', got {kind!r}")
        self.model = self.task.make_policy([gen])
        with torch.no_grad():  # a non-uniform policy (the transformer's head starts at zero)
            for p in self.model.parameters():
                p.add_(0.02 * torch.randn(p.shape, generator=gen))
        self.batches = [self._batch(gen) for _ in range(n_batches)]

    def token_logp(self, model: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        """[B, T] log-probs of one batch under the one-slot model."""
        return token_logp(self.task.logits(model, contexts[None], actions[None]), actions[None])[0]

    def _batch(self, gen: torch.Generator) -> dict[str, Tensor]:
        contexts = self.task.sample_contexts(BATCH, gen)
        with torch.no_grad():
            if self.kind == "mnist":
                zeros = torch.zeros(1, BATCH, 1, dtype=torch.long)
                probs = torch.softmax(self.task.logits(self.model, contexts[None], zeros)[0, :, 0], -1)
                actions = torch.multinomial(probs, 1, generator=gen)
            else:
                u = torch.rand((1, *contexts.shape), generator=gen)
                actions = self.task.rollout(self.model, contexts[None], u)[0][0]
            logp = self.token_logp(self.model, contexts, actions)
        return {
            "contexts": contexts,
            "actions": actions,
            "behavior_logp": logp + 0.05 * torch.randn(logp.shape, generator=gen),
            "rewards": self.task.reward(contexts, actions),
        }


PHASES = ("forward", "score norms", "advantages + loss", "backward", "transforms + Adam")


class Learner:
    """One recipe's model, optimizer and learner step; ``phase_s`` accumulates CPU seconds per phase."""

    def __init__(self, setup: Setup, spec: str, lr: float = 1e-3) -> None:
        self.setup, self.recipe = setup, build(spec)
        self.model = copy.deepcopy(setup.model)
        self.opt = torch.optim.Adam(self.model.parameters(), lr=lr, fused=True)
        self.i = 0
        self.phase_s = dict.fromkeys(PHASES, 0.0)

    def step(self) -> dict[str, Any]:
        s, recipe, phase = self.setup, self.recipe, self.phase_s
        batch = s.batches[self.i % len(s.batches)]
        self.i += 1
        t0 = time.thread_time()
        logp = s.token_logp(self.model, batch["contexts"], batch["actions"])
        mask = torch.ones_like(logp, dtype=torch.bool)
        t1 = time.thread_time()
        score = None
        if recipe.needs_score_norms:
            score = score_sq_norms(s.task, self.model, batch["contexts"][None], batch["actions"][None])[0]
        t2 = time.thread_time()
        adv = recipe.advantages(batch["rewards"], logp=logp.detach(), behavior_logp=batch["behavior_logp"], mask=mask,
                                score_sq_norms=score)
        terms = PolicyTerms(logp, batch["behavior_logp"], adv, mask, proximal_logp=logp.detach())
        out = recipe.loss(terms, "token-mean")
        t3 = time.thread_time()
        self.opt.zero_grad(set_to_none=True)
        out.loss.backward()
        t4 = time.thread_time()
        metrics = recipe.step(self.model, self.opt, terms)
        t5 = time.thread_time()
        for name, a, b in zip(PHASES, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5), strict=True):
            phase[name] += b - a
        return metrics


def measure(kind: str, rounds: int, repeat: int, recipes: list[str] | None = None) -> list[Ratio]:
    setup = Setup(kind)
    specs = ["pg", *(recipes or RECIPES)]
    learners = {spec: Learner(setup, spec) for spec in specs}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*batching rule.*")
        times = interleaved({k: v.step for k, v in learners.items()}, rounds=rounds, repeat=repeat, warmup=2)
    pg_ms = 1e3 * sorted(times["pg"])[len(times["pg"]) // 2]
    out = []
    for spec in specs[1:]:
        per_round = [a / b for a, b in zip(times[spec], times["pg"], strict=True)]
        lo, hi = spread(per_round)
        target = RECIPES.get(spec, (None, None))[0 if kind == "mnist" else 1] or ""
        out.append(Ratio(f"overhead:{kind}", f"{spec} / pg step", median_ratio(times[spec], times["pg"]), target,
                         f"IQR {lo:.3f}-{hi:.3f}; pg step {pg_ms:.1f} ms; {rounds}x{repeat} steps"))
    return out


def run(rounds: int | None = None, quick: bool = False, models: tuple[str, ...] = ("mnist", "transformer")) -> list[Ratio]:
    out = []
    for kind in models:
        r = rounds or (4 if quick else (30 if kind == "mnist" else 12))
        repeat = (3 if quick else 10) if kind == "mnist" else (1 if quick else 2)
        out += measure(kind, r, repeat)
    return out


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--model", choices=("mnist", "transformer", "both"), default="both")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    threads = set_threads(args.threads)
    models = ("mnist", "transformer") if args.model == "both" else (args.model,)
    print(f"threads: {threads}")
    for ratio in run(args.rounds, args.quick, models):
        print(ratio.line())


if __name__ == "__main__":
    main()
