"""``python -m llm_scale train --model MODEL --task TASK --recipe RECIPE --max-staleness ETA ...``.

Other commands: ``recipes`` (the names a recipe spec may use), ``tasks``, ``scorecard RECIPE``.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields

from testbed.stabilizers import AGG_MODES, available, build

from .models import ModelLoadError, TinyConfig
from .promotion import report
from .rollout import LAG_POLICIES
from .tasks import STYLES, TASKS
from .trainer import TrainConfig, Trainer


def _on_off(text: str) -> bool:
    if text.lower() in ("on", "true", "1", "yes"):
        return True
    if text.lower() in ("off", "false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected on or off, got {text!r}")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llm_scale", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="asynchronous GRPO with a stabilizer recipe", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = TrainConfig()
    t.add_argument("--model", default=d.model, help="'tiny' (built locally, CPU, no download), a local directory, or a hub id")
    t.add_argument("--task", default=d.task, help=f"task spec, e.g. 'arithmetic(max_operand=20)'; tasks: {', '.join(TASKS)}")
    t.add_argument("--data", default=None, help="JSONL file for the gsm8k task (question/answer per line)")
    t.add_argument("--recipe", default=d.recipe, help="stabilizer recipe spec, e.g. 'dg', 'tis(c=2)+ess_lr' (see: recipes)")
    t.add_argument("--max-staleness", type=int, default=d.max_staleness, help="eta: max versions a token may lag the learner")
    t.add_argument("--lag-policy", choices=LAG_POLICIES, default=d.lag_policy,
                   help="latest: newest weights (AReaL); fixed: exactly eta behind (reproducible)")
    t.add_argument("--partial-chunk", type=int, default=d.partial_chunk,
                   help="partial rollouts: refresh the worker's weights every N tokens (0: off)")
    t.add_argument("--sync", action="store_true", help="generate in the learner's thread (no worker; the synchronous baseline)")
    t.add_argument("--steps", type=int, default=d.steps, help="length of the schedule (updates)")
    t.add_argument("--stop-after", type=int, default=d.stop_after,
                   help="stop after N updates with a checkpoint (resume later with --resume auto); 0: run to --steps")
    t.add_argument("--prompts-per-step", type=int, default=d.prompts_per_step)
    t.add_argument("--group-size", type=int, default=d.group_size, help="samples per prompt (GRPO group)")
    t.add_argument("--max-new-tokens", type=int, default=None, help="completion budget (default: the task's)")
    t.add_argument("--temperature", type=float, default=d.temperature)
    t.add_argument("--lr", type=float, default=None, help="AdamW lr (default 1e-3 for tiny, 1e-6 otherwise)")
    t.add_argument("--weight-decay", type=float, default=d.weight_decay)
    t.add_argument("--agg", choices=AGG_MODES, default=d.agg, help="loss aggregation (verl's names)")
    t.add_argument("--minibatches", type=int, default=d.minibatches, help="optimizer steps per rollout batch")
    t.add_argument("--micro-batch-size", type=int, default=d.micro_batch_size, help="sequences per forward (0: all)")
    t.add_argument("--proximal", type=_on_off, default=d.proximal, help="pass proximal log-probs (AReaL) to the surrogate")
    t.add_argument("--nan-policy", choices=("raise", "mask"), default=d.nan_policy)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--device", default=d.device, help="auto, cpu, cuda or cuda:N")
    t.add_argument("--dtype", default=d.dtype, choices=("float32", "bfloat16", "float16"))
    t.add_argument("--prompt-style", default=d.prompt_style, choices=("auto", *STYLES),
                   help="auto: compact for tiny, chat if the tokenizer has a chat template, else qa")
    t.add_argument("--out", default=d.out, help="run directory (metrics.csv, checkpoints/, final/)")
    t.add_argument("--checkpoint-every", type=int, default=d.checkpoint_every, help="steps between checkpoints (0: off)")
    t.add_argument("--keep-checkpoints", type=int, default=d.keep_checkpoints)
    t.add_argument("--resume", default=None, help="'auto' (latest under --out) or a checkpoint directory")
    t.add_argument("--eval-every", type=int, default=d.eval_every, help="greedy held-out evaluation every N steps (0: off)")
    t.add_argument("--eval-size", type=int, default=d.eval_size)
    t.add_argument("--tensorboard", choices=("auto", "on", "off"), default=d.tensorboard)
    t.add_argument("--grad-cosine", type=_on_off, default=d.grad_cosine, help="log cos(g_t, g_{t-1}) (one gradient-sized buffer)")
    t.add_argument("--scorecard", default=None, help="scorecard JSON or directory (default: results/scorecards)")
    t.add_argument("--no-progress", action="store_true")
    for f in fields(TinyConfig):
        t.add_argument(f"--tiny-{f.name.replace('_', '-')}", type=int, default=f.default, help="tiny model shape")
    sub.add_parser("recipes", help="list the names a recipe spec may use")
    sub.add_parser("tasks", help="list the tasks and their parameters")
    s = sub.add_parser("scorecard", help="show the testbed scorecard of a recipe")
    s.add_argument("recipe")
    s.add_argument("--scorecard", default=None)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "recipes":
        print("\n".join(available()))
        return 0
    if args.command == "tasks":
        for name, cls in TASKS.items():
            params = ", ".join(f"{f.name}={f.default!r}" for f in fields(cls) if f.init)
            print(f"{name}({params}): {(cls.__doc__ or '').strip().splitlines()[0]}")
        return 0
    try:
        if args.command == "scorecard":
            build(args.recipe)
            ok, text = report(args.recipe, args.scorecard)
            print(text)
            return 0 if ok else 1
        cfg = TrainConfig(
            **{k: v for k, v in vars(args).items() if k in {f.name for f in fields(TrainConfig)} and k != "tiny"},
            progress=not args.no_progress,
            tiny=TinyConfig(**{f.name: getattr(args, f"tiny_{f.name}") for f in fields(TinyConfig)}),
        )
        trainer = Trainer(cfg)  # validates everything (recipe, task, model) before anything is written
        _, text = report(cfg.recipe, args.scorecard)
        print(text, file=sys.stderr)
        summary = trainer.run()
    except (ValueError, FileNotFoundError, ModelLoadError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2, default=float))
    return 0 if summary["status"] in ("finished", "stopped") else 3
