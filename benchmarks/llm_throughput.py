"""llm_scale's asynchronous pipeline: tokens/s of sync, thread and process modes, stabilizer and precision costs.

    python -m benchmarks.llm_throughput                                   # CPU, tiny model (this machine)
    python -m benchmarks.llm_throughput --device cuda --model random:qwen2.5-0.5b --stabilizers --precision

Throughput: each round trains one short run per mode (sync, thread, process; the order rotates
round by round, so contention and warm-up hit every mode alike) and measures steady-state
throughput, completion tokens consumed by the learner per second of wall time after the first
``--warmup`` updates (process start-up and model building are excluded). A ratio is the median
over rounds of the per-round ratio to sync. Thread counts: sync uses every core; thread and
process split them between the two sides (``TrainConfig.threads``).

``--stabilizers``: the wall time of one learner update (forward, advantages, loss, backward,
gradient transforms, AdamW) of each gradient-level stabilizer / that of plain GRPO (``pg``: group
z-score advantages, policy-gradient surrogate) on the same rollout batch, in alternation;
``opob`` includes its per-sample score norms (one backward per sequence). ``--precision``: update
time and peak memory of float32, bf16 autocast, and bf16 autocast with gradient checkpointing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from testbed.util.arguments import CommandLine
from testbed.util.files import atomic_write_text


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def base_config(args: argparse.Namespace, out: str, **kw: Any) -> Any:
    from llm_scale.config import TrainConfig
    from llm_scale.models import TinyConfig

    tiny = TinyConfig(hidden_size=args.tiny_hidden, num_layers=args.tiny_layers, intermediate_size=2 * args.tiny_hidden)
    return TrainConfig(
        tiny=tiny,
        model=args.model, task=args.task, recipe="pg", steps=args.steps, prompts_per_step=args.prompts,
        group_size=args.group, max_new_tokens=args.max_new_tokens, device=args.device, out=out, tensorboard="off",
        progress=False, save_final=False, grad_cosine=False, lr=1e-6 if args.model != "tiny" else 1e-3,
        micro_batch_size=args.micro, autocast=kw.pop("autocast", args.autocast), **kw,
    )  # fmt: skip


def steady_tokens_per_s(metrics_csv: Path, warmup: int) -> tuple[float, float, float, float]:
    """(tokens/s after the first ``warmup`` updates, mean realised lag, mean generation s per batch, learner s per update)."""
    import pandas as pd

    rows = pd.read_csv(metrics_csv)
    start = rows["elapsed_s"].iloc[warmup - 1] if warmup else 0.0
    steady = rows.iloc[warmup:]
    gen = float((steady["tokens"] / steady["gen_tokens_per_s"]).mean())
    learn = float((steady["step_seconds"] - steady["wait_seconds"]).mean())
    return float(steady["tokens"].sum() / (steady["elapsed_s"].iloc[-1] - start)), float(steady["lag_mean"].mean()), gen, learn


def throughput(args: argparse.Namespace, report: dict[str, Any]) -> None:
    from llm_scale.trainer import Trainer

    modes = ["sync", "thread", "process"] + (["sync-1-thread"] if args.device == "cpu" else [])
    per: dict[str, list[float]] = {m: [] for m in modes}
    lags: dict[str, list[float]] = {m: [] for m in modes}
    split: dict[str, list[tuple[float, float]]] = {m: [] for m in modes}
    peaks: dict[str, float] = {}
    for r in range(args.rounds):
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        for mode in order:
            with tempfile.TemporaryDirectory() as tmp:
                if mode == "sync-1-thread":  # the synchronous baseline with the thread count of one async side
                    kw = dict(mode="sync", max_staleness=0, learner_threads=1, rollout_threads=1)
                else:
                    kw = dict(mode=mode, max_staleness=0 if mode == "sync" else args.eta)
                cfg = base_config(args, str(Path(tmp) / "run"), **kw)
                summary = Trainer(cfg).run()
                tps, lag, gen, learn = steady_tokens_per_s(Path(tmp) / "run" / "metrics.csv", args.warmup)
                split[mode].append((gen, learn))
                per[mode].append(tps)
                lags[mode].append(lag)
                if "peak_memory_gib" in summary:
                    peaks[mode] = max(peaks.get(mode, 0.0), summary["peak_memory_gib"])
                print(f"  round {r} {mode:<8} {tps:10,.0f} tokens/s  (lag {lag:.2f}, copies {summary['weight_copies']})",
                      flush=True)  # fmt: skip
        _save(args, report)
    rows = []
    for mode in modes:
        ratio = statistics.median(a / b for a, b in zip(per[mode], per["sync"], strict=True))
        rows.append({
            "mode": mode, "tokens_per_s": statistics.median(per[mode]), "ratio_to_sync": ratio,
            "rounds": per[mode], "lag_mean": statistics.mean(lags[mode]), "peak_memory_gib": peaks.get(mode),
            "gen_s": statistics.median(g for g, _ in split[mode]), "learn_s": statistics.median(v for _, v in split[mode]),
        })  # fmt: skip
        g, lrn = rows[-1]["gen_s"], rows[-1]["learn_s"]
        rows[-1]["overlap_ceiling"] = (g + lrn) / max(g, lrn)  # one rollout worker: (G + L) / max(G, L)
    report["throughput"] = rows


def _learner(trainer: Any, recipe: str, **settings: Any) -> Any:
    from llm_scale.learner import Learner
    from testbed.stabilizers import build

    t = trainer.learner
    return Learner(trainer.model, build(recipe), t.optimizer, t.scheduler, replace(t.s, **settings), None, t.eos_ids)


def _time_update(learner: Any, batch: Any, device: str) -> tuple[float, float]:
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    _sync(device)
    t0 = time.perf_counter()
    learner.update(batch, 0)
    _sync(device)
    peak = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None
    return time.perf_counter() - t0, peak


def learner_costs(args: argparse.Namespace, report: dict[str, Any], what: str) -> None:
    from llm_scale.trainer import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(base_config(args, str(Path(tmp) / "run"), mode="sync"))
        batch = trainer.sampler.batch(trainer.model, 0, 0)
        print(f"  batch: {batch.completion_ids.shape[0]} sequences, {batch.n_tokens} completion tokens", flush=True)
        if what == "stabilizers":
            variants = {name: _learner(trainer, name) for name in ("pg", "gac", "ess_lr", "opob")}
        else:
            variants = {"float32": _learner(trainer, "pg"), "bf16 autocast": _learner(trainer, "pg", autocast="bf16")}
        times: dict[str, list[float]] = {n: [] for n in variants}
        peaks: dict[str, float] = {}
        names = list(variants)
        for name in names:  # warm-up (kernels, allocator, Adam state)
            _time_update(variants[name], batch, args.device)
        for r in range(args.update_rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                seconds, peak = _time_update(variants[name], batch, args.device)
                times[name].append(seconds)
                if peak is not None:
                    peaks[name] = max(peaks.get(name, 0.0), peak)
        if what == "precision":  # checkpointing changes the model for good: measured last
            ckpt = _learner(trainer, "pg", autocast="bf16", grad_checkpointing=True)
            _time_update(ckpt, batch, args.device)
            name = "bf16 autocast + grad checkpointing"
            times[name] = []
            for _ in range(args.update_rounds):
                seconds, peak = _time_update(ckpt, batch, args.device)
                times[name].append(seconds)
                if peak is not None:
                    peaks[name] = max(peaks.get(name, 0.0), peak)
        base = names[0]
        rows = []
        for name, values in times.items():
            ratio = statistics.median(v / b for v, b in zip(values, times[base], strict=True))
            rows.append({"variant": name, "update_s": statistics.median(values), "ratio": ratio, "base": base,
                         "peak_memory_gib": peaks.get(name), "rounds": values})  # fmt: skip
            mem = f"  peak {peaks[name]:.2f} GiB" if name in peaks else ""
            print(f"  {name:<36} {statistics.median(values):8.3f} s/update  x{ratio:.3f} of {base}{mem}", flush=True)
        report[what] = rows


def _save(args: argparse.Namespace, report: dict[str, Any]) -> None:
    if args.json:
        atomic_write_text(args.json, json.dumps(report, indent=1, default=float))


def device_name(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name()
    from benchmarks.common import cpu_model

    return f"{cpu_model()} ({os.cpu_count()} cores)"


def table(report: dict[str, Any]) -> str:
    lines = [
        f"Measured {report['date']} on {report['device_name']}, torch {report['torch']}, transformers "
        f"{report['transformers']}; model {report['model']}, task {report['task']}, {report['batch']}; "
        f"command: `{report['command']}`.",
        "",
        "| what | value | ratio | peak memory | how measured |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for row in report.get("throughput", []):
        mem = "" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.1f} GiB"
        lines.append(f"| {row['mode']} mode | {row['tokens_per_s']:,.0f} tokens/s | {row['ratio_to_sync']:.2f} x sync | {mem} "
                     f"| median of {len(row['rounds'])} paired rounds; mean lag {row['lag_mean']:.2f}; generation "
                     f"{row['gen_s']:.3f} s/batch, learner {row['learn_s']:.3f} s/update"
                     + (f"; overlap ceiling (G+L)/max(G,L) {row['overlap_ceiling']:.2f}" if row["mode"].startswith("sync") else "")
                     + " |")  # fmt: skip
    for what in ("stabilizers", "precision"):
        for row in report.get(what, []):
            mem = "" if row["peak_memory_gib"] is None else f"{row['peak_memory_gib']:.1f} GiB"
            lines.append(f"| update: {row['variant']} | {row['update_s']:.3f} s | {row['ratio']:.2f} x {row['base']} | {mem} "
                         f"| median of {len(row['rounds'])} alternated updates on one batch |")  # fmt: skip
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = CommandLine(prog="python -m benchmarks.llm_throughput", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="tiny")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--tiny-hidden", type=int, default=64, help="tiny model width (intermediate: twice it)")
    p.add_argument("--tiny-layers", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--micro", type=int, default=0, help="learner micro-batch size (0: whole batch)")
    p.add_argument("--autocast", default="off", choices=("off", "bf16"), help="learner autocast in the throughput and stabilizer runs")
    p.add_argument("--eta", type=int, default=4, help="max staleness of the asynchronous modes")
    p.add_argument("--steps", type=int, default=40, help="updates per run")
    p.add_argument("--warmup", type=int, default=5, help="updates excluded from the steady-state rate")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--update-rounds", type=int, default=5)
    p.add_argument("--no-throughput", action="store_true")
    p.add_argument("--stabilizers", action="store_true", help="per-update cost of gac, ess_lr, opob vs pg")
    p.add_argument("--precision", action="store_true", help="float32 vs bf16 autocast vs + gradient checkpointing")
    p.add_argument("--json", default=None, help="also write the numbers to this JSON file")
    p.add_argument("--markdown", default=None, help="also write the results table to this file")
    args = p.parse_args(argv)
    if args.warmup >= args.steps:
        p.error(f"--warmup {args.warmup} must be below --steps {args.steps}")
    import transformers

    report: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "device_name": device_name(args.device),
        "torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
        "model": args.model if args.model != "tiny" else f"tiny (hidden {args.tiny_hidden}, {args.tiny_layers} layers)",
        "task": args.task, "batch": f"{args.prompts} prompts x {args.group} samples, up to "
        f"{args.max_new_tokens} new tokens, eta {args.eta}, learner micro-batch {args.micro or 'all'}, autocast {args.autocast}", "command": "python -m benchmarks.llm_throughput "
        + " ".join(argv if argv is not None else sys.argv[1:]),
    }  # fmt: skip
    print(f"{report['device_name']}; {report['batch']}", flush=True)
    sections = [] if args.no_throughput else [("throughput", lambda: throughput(args, report))]
    if args.stabilizers:
        sections.append(("stabilizers", lambda: learner_costs(args, report, "stabilizers")))
    if args.precision:
        sections.append(("precision", lambda: learner_costs(args, report, "precision")))
    for name, run in sections:
        print(f"{name}:", flush=True)
        try:
            run()
        except Exception as exc:  # keep the other sections' numbers
            report.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
            print(f"  FAILED: {type(exc).__name__}: {exc}", flush=True)
        _save(args, report)
    print(table(report))
    if args.markdown:
        atomic_write_text(args.markdown, table(report) + "\n")
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
