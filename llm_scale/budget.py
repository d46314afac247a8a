"""``python -m llm_scale budget --model M --task T``: what the completion budget does to a model's rewards.

A completion that hits the budget of new tokens is scored on what it wrote so far, so its reward may be
wrong (the trainer warns when more than a quarter of a batch is cut, `tasks.truncation_warning`). This
command measures how wrong, at fixed weights, for the two kinds of completions the trainer scores:

* **sampled**: ``prompts`` problems (the training stream's batch 0 at ``seed``) x ``group_size`` samples at
  ``temperature``, as the rollout side draws them;
* **greedy**: the ``eval_size`` held-out problems of the trainer's evaluation (same stream at ``seed``).

Every completion is drawn once with the ``longer`` budget L and scored twice: whole, and cut to its first B
tokens, B the budget under test (the trainer's for the prompt style unless ``max_new_tokens`` is given).
Sampling draws each position's token from that position's distribution with one generator, so the first B
tokens of an L-token completion are exactly the completion the same seed draws with budget B (a test checks
it): the cut score is the reward the trainer would have recorded. Per kind: the fraction of completions
cut at B (no stop token among their first B tokens) and at L, the mean reward at B and at L, and the
fractions whose reward the cut changed, lowered (the whole completion scores higher) or raised, each fraction
with its exact (Clopper-Pearson) 95% interval. A reward changed by the cut is a completion whose answer came
after token B (lowered) or whose later text overturns it (raised). A completion still cut at L is scored on
its L tokens, so an answer written after token L is missed at both budgets: when many completions are
still cut at L, raise ``longer``.

Writes ``OUT/<model>__<task>.json`` and prints a summary.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .config import ModelAndTask
from .generation import hit_budget

CONFIDENCE = 0.95


@dataclass
class BudgetArgs(ModelAndTask):
    """Measure how the completion budget changes a model's rewards on a task (see llm_scale/budget.py)."""

    max_new_tokens: int | None = None
    """the budget under test (default: the task's budget for the prompt style, as train)"""
    longer: int | None = None
    """the longer budget every completion is drawn with (default: 4 x the budget under test)"""
    prompts: int = 64
    """problems of the sampled completions"""
    group_size: int = 4
    """samples per problem"""
    eval_size: int = 256
    """held-out problems of the greedy completions (0: none)"""
    temperature: float = 1.0
    """sampling temperature"""
    prompt_style: str = "auto"
    """auto, compact, qa or chat (as in train)"""
    micro_batch_size: int = 64
    """prompts per generation call of the greedy completions"""
    seed: int = 0
    """seed of the problems and the sampling (train's --seed)"""
    out: str = "results/llm/budget"
    """output directory"""


@dataclass
class Proportion:
    """k of n completions, with the exact (Clopper-Pearson) interval; NaN when n is 0."""

    k: int
    n: int
    value: float
    low: float
    high: float

    @staticmethod
    def of(k: int, n: int, confidence: float = CONFIDENCE) -> Proportion:
        if n == 0:
            return Proportion(k, n, math.nan, math.nan, math.nan)
        from testbed.util.stats import clopper_pearson

        return Proportion(k, n, k / n, *clopper_pearson(k, n, confidence))

    def __str__(self) -> str:
        return f"{self.value:.3f} [{self.low:.3f}, {self.high:.3f}] ({self.k}/{self.n})"


@dataclass
class BudgetEffect:
    """One kind of completions (sampled or greedy) scored whole (budget L) and cut at the budget B."""

    kind: str
    budget: int
    longer: int
    truncated_at_budget: Proportion
    truncated_at_longer: Proportion
    reward_at_budget: float
    reward_at_longer: float
    changed: Proportion
    lowered: Proportion  # reward at B < reward at L: the cut lost an answer
    raised: Proportion  # reward at B > reward at L: later text overturned it

    def lines(self) -> list[str]:
        return [f"{self.kind}: reward {self.reward_at_budget:.3f} at {self.budget} tokens, "
                f"{self.reward_at_longer:.3f} at {self.longer}",
                f"  cut at {self.budget}: {self.truncated_at_budget}; at {self.longer}: {self.truncated_at_longer}",
                f"  reward changed by the cut: {self.changed}; lowered {self.lowered}; raised {self.raised}"]  # fmt: skip


def cut_at(ids: Tensor, mask: Tensor, budget: int, stop: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """The completions cut to their first ``budget`` tokens: (ids, mask, truncated), ``truncated`` [B] true where
    no stop token is among the kept tokens (the completion hit the budget, `generation.hit_budget`)."""
    ids, mask = ids[:, :budget], mask[:, :budget]
    return ids, mask, hit_budget(ids, mask, stop)


def effect(kind: str, at_budget: Tensor, at_longer: Tensor, truncated_b: Tensor, truncated_l: Tensor,
           budget: int, longer: int) -> BudgetEffect:
    """The statistics of one kind from its per-completion rewards at B and at L and cut flags at B and at L."""
    n = int(at_budget.numel())
    diff = at_longer - at_budget
    return BudgetEffect(
        kind, budget, longer, Proportion.of(int(truncated_b.sum()), n), Proportion.of(int(truncated_l.sum()), n),
        float(at_budget.mean()) if n else math.nan, float(at_longer.mean()) if n else math.nan,
        Proportion.of(int((diff != 0).sum()), n), Proportion.of(int((diff > 0).sum()), n), Proportion.of(int((diff < 0).sum()), n),
    )  # fmt: skip


def measure(args: BudgetArgs, log: Any = print) -> tuple[list[BudgetEffect], dict[str, Any]]:
    """Both kinds' `BudgetEffect` and the settings they were measured with (see the module docstring)."""
    from .config import UsageError
    from .fingerprint import task_and_policy
    from .models import prompt_style, stop_ids
    from .sampler import Sampler
    from .tasks import completion_budget

    task, model, tok = task_and_policy(args.task, args.data, args.model, args.seed)
    style = prompt_style(args.prompt_style, args.model, tok)
    budget = args.max_new_tokens or completion_budget(task, style, tok, seed=args.seed)
    longer = args.longer or 4 * budget
    if longer <= budget:
        raise UsageError(f"--longer must exceed the budget under test ({budget} tokens), got {longer}")
    stop = stop_ids(model, tok)
    sampler = Sampler(task, tok, style, args.seed, args.prompts, args.group_size, longer, args.temperature, eos_ids=stop)
    out = []
    t0 = time.perf_counter()
    with torch.no_grad():
        batch = sampler.batch(model, 0, 0)
    problems = sampler.problems(0)
    ids_b, mask_b, cut_b = cut_at(batch.completion_ids, batch.completion_mask, budget, stop)
    cut_l = hit_budget(batch.completion_ids, batch.completion_mask, stop)
    at_b = sampler.rewards(problems, args.group_size, ids_b, mask_b)
    out.append(effect("sampled", at_b, batch.rewards.cpu(), cut_b.cpu(), cut_l.cpu(), budget, longer))
    log(f"  sampled {batch.completion_ids.shape[0]} completions in {time.perf_counter() - t0:.0f} s")
    if args.eval_size:
        t0 = time.perf_counter()
        problems = sampler.eval_problems(args.eval_size)
        m = args.micro_batch_size
        parts = []
        for chunk, ids, mask in sampler.greedy(model, problems, m):
            ids_b, mask_b, cut_b = cut_at(ids, mask, budget, stop)
            parts.append((sampler.rewards(chunk, 1, ids_b, mask_b), sampler.rewards(chunk, 1, ids, mask), cut_b,
                          hit_budget(ids, mask, stop)))
        out.append(effect("greedy", *(torch.cat([p[i].cpu() for p in parts]) for i in range(4)), budget, longer))
        log(f"  greedy: {len(problems)} completions in {time.perf_counter() - t0:.0f} s")
    settings = {"prompt_style": style, "budget": budget, "longer": longer, "stop_ids": stop, "seed": args.seed,
                "temperature": args.temperature, "prompts": args.prompts, "group_size": args.group_size,
                "eval_size": args.eval_size, "confidence": CONFIDENCE}  # fmt: skip
    return out, settings


def _check(args: BudgetArgs) -> None:
    from .config import UsageError, check_style_and_out

    if args.max_new_tokens is not None and not 1 <= args.max_new_tokens <= 1 << 16:
        raise UsageError(f"--max-new-tokens must be in 1..65536, got {args.max_new_tokens}")
    if args.longer is not None and not 2 <= args.longer <= 1 << 16:
        raise UsageError(f"--longer must be in 2..65536, got {args.longer}")
    if not 1 <= args.prompts <= 1 << 16 or not 1 <= args.group_size <= 1024:
        raise UsageError(f"--prompts must be in 1..65536 and --group-size in 1..1024, got {args.prompts}, {args.group_size}")
    if not 0 <= args.eval_size <= 1 << 16 or args.micro_batch_size < 1:
        raise UsageError(f"--eval-size must be in 0..65536 and --micro-batch-size >= 1, got {args.eval_size}, "
                         f"{args.micro_batch_size}")  # fmt: skip
    if not 0 < args.temperature <= 100:
        raise UsageError(f"--temperature must be in (0, 100], got {args.temperature}")
    check_style_and_out(args.prompt_style, args.out)


def main(argv: list[str]) -> int:
    import json

    from testbed.util.files import atomic_write_text

    from .config import parse
    from .fingerprint import model_label, source_commit, task_label

    args = parse(BudgetArgs, argv, "python -m llm_scale budget")
    _check(args)
    start = time.perf_counter()
    effects, settings = measure(args, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    record = {"model": model_label(args.model), "task": args.task, **settings,
              "effects": [asdict(e) for e in effects], "command": "python -m llm_scale budget " + shlex.join(argv),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": source_commit(),
              "wall_s": time.perf_counter() - start}  # fmt: skip
    path = Path(args.out) / f"{record['model']}__{task_label(args.task)}.json"
    atomic_write_text(path, json.dumps(record, indent=1) + "\n")
    print(f"{record['model']} on {args.task}, {settings['prompt_style']} prompts, budget {settings['budget']} vs "
          f"{settings['longer']} tokens ({record['wall_s']:.0f} s)")  # fmt: skip
    for e in effects:
        print("\n".join(e.lines()))
    print(f"wrote {path}")
    return 0
