"""The pocket LM's update at its designs' setting: the plain path against the fast paths, in one process.

    python -m benchmarks.pocket_fastpath                     # 32 prompts x 8 samples, pocket-arithmetic
    python -m benchmarks.pocket_fastpath --out results/llm/pocket/update_cost_fastpath.json

Three trainers of the same run (`llm_scale.trainer.Trainer`, ``--mode sync``, GRPO at the pre-registered
designs' setting: ``--prompts`` x ``--group`` sequences, one optimizer step per update, greedy evaluation of
``--eval-size`` problems) advance side by side, one update each per round in rotating order:

* ``plain``: generation without its shortcuts (``Sampler.shortcuts = False``: every row in every forward, the
  loop as it was before them) and the learner's full forward per sequence;
* ``exact``: the default, generation's shortcuts on (`generation.sample_completions`), which return the same
  bits: the benchmark checks, update by update, that the sampled tokens, behaviour log-probs, rewards, loss,
  gradient norm and parameters equal ``plain``'s;
* ``shared``: ``exact`` plus the learner's shared prompt forward (``LearnerSettings.share_prompts``,
  `learner.shared_prompt_logits`): gradients equal up to float32 summation order, so the runs part after the
  first update; the benchmark reports how far (the largest parameter difference and whether the sampled tokens
  still agree).

Each update is timed in its three parts (sampling with rewards, learner update, one greedy evaluation) on one
intra-op thread and this thread's CPU clock (`benchmarks.common`). Per update with evaluations amortised over
``--eval-every`` updates: sampling + learner + evaluation / eval_every. Ratios are medians over rounds of plain's
time / the fast path's.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import clock, clock_name, machine, median_ratio, set_threads, spread, write_report
from testbed.util.arguments import CommandLine

VARIANTS = ("plain", "exact", "shared")


def _trainer(args: argparse.Namespace, out: str, variant: str) -> Any:
    from llm_scale.config import TrainConfig
    from llm_scale.trainer import Trainer

    cfg = TrainConfig(model=args.model, task=args.task, recipe="grpo", mode="sync", steps=args.rounds + 1,
                      prompts_per_step=args.prompts, group_size=args.group, out=out, tensorboard="off", progress=False,
                      save_final=False, lr=args.lr, eval_every=args.eval_every, eval_size=args.eval_size,
                      learner_threads=args.threads, seed=args.seed)  # fmt: skip
    trainer = Trainer(cfg)
    trainer.sampler.shortcuts = variant != "plain"
    trainer.learner.s.share_prompts = variant == "shared"
    return trainer


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.detach().contiguous().cpu().numpy().tobytes()).hexdigest()[:16]


def _params(trainer: Any) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in trainer.model.parameters()])


def _update(trainer: Any, k: int) -> dict[str, Any]:
    """Update ``k`` of ``trainer``'s run, timed in its parts, with what identifies its result."""
    now = clock()
    t0 = now()
    batch = trainer.sampler.batch(trainer.model, k, k)
    t1 = now()
    metrics = trainer.learner.update(batch, k)
    t2 = now()
    score = trainer.evaluate()
    t3 = now()
    return {"sample_s": t1 - t0, "learner_s": t2 - t1, "eval_s": t3 - t2, "tokens": int(batch.n_tokens),
            "result": {"ids": _digest(batch.completion_ids), "behavior_logp": _digest(batch.behavior_logp),
                       "rewards": _digest(batch.rewards), "loss": metrics["loss"], "grad_norm": metrics["grad_norm_raw"],
                       "params": _digest(_params(trainer)), "eval": score}}  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    from llm_scale.models import is_present

    set_threads(args.threads)
    report: dict[str, Any] = {"machine": machine(), "clock": clock_name(), "threads": args.threads, "model": args.model,
                              "task": args.task, "sequences_per_update": args.prompts * args.group, "lr": args.lr,
                              "eval_size": args.eval_size, "eval_every": args.eval_every,
                              "command": "python -m benchmarks.pocket_fastpath " + " ".join(sys.argv[1:])}  # fmt: skip
    if not is_present(args.model):
        report["skipped"] = f"{args.model} is not built: python -m llm_scale models build {args.model}"
        return report
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {v: _trainer(args, str(Path(tmp) / v), v) for v in VARIANTS}
        for r in range(args.rounds):
            for v in VARIANTS[r % 3 :] + VARIANTS[: r % 3]:
                rows[v].append(_update(trainers[v], r))
            line = ", ".join(f"{v} {rows[v][-1]['sample_s']:.2f}+{rows[v][-1]['learner_s']:.2f}+{rows[v][-1]['eval_s']:.2f} s"
                             for v in VARIANTS)  # fmt: skip
            print(f"  update {r} (sampling + learner + evaluation): {line}", flush=True)
        gap = float((_params(trainers["plain"]) - _params(trainers["shared"])).abs().max())
    per = {}
    for v in VARIANTS:
        t = {part: [row[part] for row in rows[v]] for part in ("sample_s", "learner_s", "eval_s")}
        t["update_s"] = [row["sample_s"] + row["learner_s"] + row["eval_s"] / args.eval_every for row in rows[v]]
        t["update_eval_each_s"] = [row["sample_s"] + row["learner_s"] + row["eval_s"] for row in rows[v]]
        per[v] = {**t, **{f"{k}_median": statistics.median(x) for k, x in t.items()}, "tokens": [row["tokens"] for row in rows[v]]}
    report["per_variant"] = per
    ratios: dict[str, Any] = {}
    for v in ("exact", "shared"):
        for part in ("sample_s", "learner_s", "eval_s", "update_s", "update_eval_each_s"):
            ratios[f"{v}/{part}"] = median_ratio(per["plain"][part], per[v][part])
        pairs = [a / b for a, b in zip(per["plain"]["update_s"], per[v]["update_s"], strict=True)]
        ratios[f"{v}/update_s_iqr"] = spread(pairs)
    report["ratios_plain_over_fast"] = ratios
    plain = [row["result"] for row in rows["plain"]]
    report["exact_equals_plain_bit_for_bit"] = plain == [row["result"] for row in rows["exact"]]
    shared = [row["result"] for row in rows["shared"]]
    report["shared_vs_plain"] = {
        "same_sampled_tokens_per_update": [a["ids"] == b["ids"] for a, b in zip(plain, shared, strict=True)],
        "same_params_per_update": [a["params"] == b["params"] for a, b in zip(plain, shared, strict=True)],
        "params_max_abs_diff_at_end": gap,
        "eval_per_update": {"plain": [a["eval"] for a in plain], "shared": [b["eval"] for b in shared]},
    }
    report["target"] = ">= 2 (plain's update time / the fast path's, evaluations amortised)"
    return report


def main(argv: list[str] | None = None) -> int:
    ap = CommandLine(prog="python -m benchmarks.pocket_fastpath", description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="pocket-arithmetic")
    ap.add_argument("--task", default="arithmetic(max_operand=20)")
    ap.add_argument("--prompts", type=int, default=32, help="prompts per update")
    ap.add_argument("--group", type=int, default=8, help="samples per prompt")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--eval-size", type=int, default=256, help="problems per greedy evaluation")
    ap.add_argument("--eval-every", type=int, default=10, help="updates per evaluation, for the amortised cost")
    ap.add_argument("--rounds", type=int, default=4, help="updates of each variant")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    args = ap.parse_args(argv)
    for flag in ("prompts", "group", "eval_size", "eval_every", "rounds", "threads"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag.replace('_', '-')} must be a positive integer, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    if not args.lr > 0:
        print(f"error: --lr must be a positive number, got {args.lr}", file=sys.stderr)
        return 2
    report = run(args)
    if "skipped" in report:
        print(f"skipped: {report['skipped']}")
    else:
        r = report["ratios_plain_over_fast"]
        print(f"plain / exact (bit for bit: {report['exact_equals_plain_bit_for_bit']}): update x{r['exact/update_s']:.2f} "
              f"(sampling x{r['exact/sample_s']:.2f}, learner x{r['exact/learner_s']:.2f}, evaluation x{r['exact/eval_s']:.2f})")
        print(f"plain / shared: update x{r['shared/update_s']:.2f} (learner x{r['shared/learner_s']:.2f}); "
              f"evaluation every update: x{r['shared/update_eval_each_s']:.2f}; {report['clock']}")  # fmt: skip
    if args.out:
        write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
