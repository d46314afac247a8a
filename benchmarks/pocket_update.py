"""The pocket LM's RL update against SmolLM2-135M-Instruct's, at the same batch, in one process.

    python -m benchmarks.pocket_update                      # pocket-arithmetic vs smollm2-135m-instruct
    python -m benchmarks.pocket_update --out results/llm/pocket_update.json

One update = what the synchronous trainer does per policy version: sample a rollout batch of
``--prompts`` x ``--group`` sequences on ``arithmetic(max_operand=20)`` (chat prompts, each model's own
completion budget) and one learner update (GRPO advantages and loss, backward, AdamW). Both models are
loaded through `llm_scale.trainer.Trainer` (``--mode sync``) as ``python -m llm_scale train`` loads them;
the two updates alternate round by round (the order rotating), on one intra-op thread and this thread's CPU
clock (`benchmarks.common`), so time spent descheduled on a shared machine does not count. The ratio is the
median over rounds of SmolLM2's update time / the pocket LM's; the learner part alone is reported beside it.
A model that is not in the model cache is skipped with the command that installs it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import clock, clock_name, machine, median_ratio, set_threads, spread, write_report
from testbed.util.arguments import CommandLine


def _trainer(model: str, args: argparse.Namespace, out: str) -> Any:
    from llm_scale.config import TrainConfig
    from llm_scale.trainer import Trainer

    cfg = TrainConfig(model=model, task=args.task, recipe="grpo", mode="sync", steps=1000, prompts_per_step=args.prompts,
                      group_size=args.group, out=out, tensorboard="off", progress=False, save_final=False,
                      grad_cosine=False, lr=1e-6, learner_threads=args.threads)  # fmt: skip
    return Trainer(cfg)


def _update(trainer: Any, k: int) -> tuple[float, float, int]:
    """(seconds of the whole update, seconds of the learner part, completion tokens) of rollout batch ``k``."""
    now = clock()
    t0 = now()
    batch = trainer.sampler.batch(trainer.model, k, 0)
    t1 = now()
    trainer.learner.update(batch, k)
    t2 = now()
    return t2 - t0, t2 - t1, int(batch.n_tokens)


def run(args: argparse.Namespace) -> dict[str, Any]:
    from llm_scale.models import is_present

    set_threads(args.threads)
    models = {"pocket": args.pocket, "smollm2": args.smollm2}
    missing = {k: m for k, m in models.items() if not is_present(m)}
    report: dict[str, Any] = {"machine": machine(), "clock": clock_name(), "threads": args.threads,
                              "sequences_per_update": args.prompts * args.group, "task": args.task, "models": models,
                              "command": "python -m benchmarks.pocket_update " + " ".join(sys.argv[1:])}  # fmt: skip
    if "pocket" in missing:
        report["skipped"] = f"{args.pocket} is not built: python -m llm_scale models build {args.pocket}"
        return report
    with tempfile.TemporaryDirectory() as tmp:
        trainers = {k: _trainer(m, args, str(Path(tmp) / k)) for k, m in models.items() if k not in missing}
        times: dict[str, dict[str, list[float]]] = {k: {"update_s": [], "learner_s": [], "tokens": []} for k in trainers}
        for t in trainers.values():  # warm-up: kernels, allocator, AdamW state
            _update(t, 10_000)
        names = list(trainers)
        for r in range(args.rounds):
            for k in names[r % len(names) :] + names[: r % len(names)]:
                whole, learn, tokens = _update(trainers[k], r)
                times[k]["update_s"].append(whole)
                times[k]["learner_s"].append(learn)
                times[k]["tokens"].append(tokens)
                print(f"  round {r}: {k} update {whole:.2f} s (learner {learn:.2f} s, {tokens} tokens)", flush=True)
    report["per_model"] = {k: {**v, "update_s_median": statistics.median(v["update_s"]),
                               "learner_s_median": statistics.median(v["learner_s"])} for k, v in times.items()}  # fmt: skip
    if "smollm2" in missing:
        report["skipped"] = (f"{args.smollm2} is not in the model cache (python -m llm_scale models fetch {args.smollm2}): "
                             "no ratio")  # fmt: skip
        return report
    s, p = times["smollm2"], times["pocket"]
    report["ratio_update"] = median_ratio(s["update_s"], p["update_s"])
    report["ratio_update_iqr"] = spread([a / b for a, b in zip(s["update_s"], p["update_s"], strict=True)])
    report["ratio_learner"] = median_ratio(s["learner_s"], p["learner_s"])
    report["target"] = ">= 20 (SmolLM2's update time / the pocket LM's)"
    report["met"] = report["ratio_update"] >= 20
    return report


def main(argv: list[str] | None = None) -> int:
    ap = CommandLine(prog="python -m benchmarks.pocket_update", description=__doc__.splitlines()[0])
    ap.add_argument("--pocket", default="pocket-arithmetic", help="pocket model name")
    ap.add_argument("--smollm2", default="smollm2-135m-instruct", help="the web-pretrained model it is compared with")
    ap.add_argument("--task", default="arithmetic(max_operand=20)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per update")
    ap.add_argument("--group", type=int, default=4, help="samples per prompt")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (each times one update of each model)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help="write the report as JSON here")
    args = ap.parse_args(argv)
    for flag in ("prompts", "group", "rounds", "threads"):
        if getattr(args, flag) < 1:
            print(f"error: --{flag} must be a positive integer, got {getattr(args, flag)}", file=sys.stderr)
            return 2
    report = run(args)
    if "ratio_update" in report:
        lo, hi = report["ratio_update_iqr"]
        print(f"SmolLM2 / pocket, one {report['sequences_per_update']}-sequence update: x{report['ratio_update']:.1f} "
              f"(IQR {lo:.1f}-{hi:.1f}); learner part alone x{report['ratio_learner']:.1f}; {report['clock']}")  # fmt: skip
    if "skipped" in report:
        print(f"skipped: {report['skipped']}")
    if args.out:
        write_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
