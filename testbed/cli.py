"""Command line: ``python -m testbed {run, sweep, demo, report, list, validate}``.

    python -m testbed run --task mnist --recipe dg --delay fixed:1000 --steps 10000 --seeds 3 --out DIR
    python -m testbed sweep sweeps/mnist_delay.toml [--out DIR] [--workers N] [--executor ray [--address ADDR]]
    python -m testbed demo [--out runs/demo]
    python -m testbed report DIR [--runs]  (final test error per setting, statuses, gradient cosines)
    python -m testbed list
    python -m testbed fingerprint --regime async_grpo  (the regime's staleness fingerprint: testbed/fingerprint.py)
    python -m testbed validate ...      (llm_scale's scorecard check: testbed/validate.py)
    python -m testbed plot DIR [--to FILE]  (learning curves and the final-error table of a run or sweep)

Your own stabilizer: ``--import MODULE`` (repeatable, any command; a dotted module name found from the
working directory, or a path to a .py file) imports a module that registers components with
`testbed.stabilizers.registry.register`; a recipe term ``module:ClassName`` does the same without the flag,
and a sweep file's ``imports = ["MODULE"]`` too. Worker processes import the modules again
(docs/own_stabilizer.md).

Task options are flags too: after ``--task NAME`` every option of that task is accepted as
``--OPTION VALUE`` (e.g. ``--data-dir`` for mnist, ``--H``/``--M`` for token reversal), and always as
``--task-arg OPTION=VALUE``. ``run``, ``sweep`` and ``demo`` take ``--dry-run``: check everything and
say what would run and what it needs, write nothing.

Bad input (a malformed spec, a value out of range, work that cannot fit in memory or on disk, an
output path that is a file or not writable) gets one ``error:`` line on stderr and exit code 2, and
nothing is written: every config is validated, every task built and the output directory checked
before it is touched. A run that fails with an internal error is recorded as ``failed`` (traceback in
``OUT/runs/<id>.log``), the others finish, and the command exits 1. Ctrl-C (or SIGTERM) stops every loop
in progress after its current step and saves it (testbed/util/stopping.py), and exits 130; rerunning the same
command resumes each saved loop at its step, exactly; a second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.usage import directory, guarded, integer, number
from testbed.util.arguments import ArgumentParser
from testbed.util.errors import EXIT_USAGE, RunFailed, UsageError

DEMO_RECIPES = ("pg", "tis", "ppo", "dg")
DEMO_DELAYS = ("sync", "fixed:10", "fixed:100")

_OUT: list[Path] = []  # the output directory of the command being run (for the log of an internal error)


def _parser_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE first: your own stabilizer (repeatable; docs/own_stabilizer.md)")
    p.add_argument("--out", type=directory, help="output directory (results.csv, summary.csv, config.json, runs/)")
    p.add_argument("--workers", type=integer(1), default=None, help="parallel worker processes (default 1)")
    p.add_argument("--format", choices=("csv", "parquet"), default=None, help="also write results.parquet")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--loop-size", type=integer(), default=None, metavar="N",
                   help="train at most N runs that share a model shape (e.g. the seeds) in one loop; default: up "
                        "to 8, fewer when that keeps every worker busy; results do not depend on it")
    p.add_argument("--dry-run", action="store_true",
                   help="check everything, print what would run and what it needs; write nothing")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where the workers run: local processes (default), or Ray tasks (the optional extra "
                        "ray; docs/simulator.md)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --executor ray: the address of a running Ray cluster (default: a Ray instance "
                        "started on this machine)")


def _config_flags(p: argparse.ArgumentParser) -> None:
    """A flag per field of `RunConfig` (but ``task_args``), and ``--seeds`` before ``--seed``: name, type and
    default the field's, order, help and allowed values from `testbed.config.FLAGS`."""
    import dataclasses
    import typing

    from testbed.config import FLAGS, RunConfig

    types = typing.get_type_hints(RunConfig)
    fields = {f.name: f for f in dataclasses.fields(RunConfig) if f.name != "task_args"}
    for name in sorted(fields, key=lambda n: list(FLAGS).index(n) if n in FLAGS else len(FLAGS)):
        shown = FLAGS.get(name, {})
        kind = next(t for t in typing.get_args(types[name]) or (types[name],) if t is not type(None))
        extra: dict[str, Any] = {"choices": shown["choices"]} if "choices" in shown else {}
        if kind is int:
            extra["type"] = integer(shown.get("min", 1))
        elif kind is float:
            extra["type"] = number(0, open_lo=True)
        if name == "seed":
            p.add_argument("--seeds", type=integer(1), default=1, help="number of seeds (seed, seed+1, ...)")
        p.add_argument(*shown.get("flags", ("--" + name.replace("_", "-"),)), dest=name, default=fields[name].default,
                       help=shown.get("help"), **extra)


def _run_parser(task_opts: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    p = ArgumentParser(prog="python -m testbed run", description="Train one config over one or more seeds.")
    _config_flags(p)
    p.add_argument("--task-arg", action="append", default=[], metavar="KEY=VALUE", help="a task option (repeatable)")
    _parser_common(p)
    taken = {a.dest for a in p._actions}
    if task_opts:
        group = p.add_argument_group("task options")
        for name, opt in task_opts.items():
            if name in taken:
                continue  # reachable through --task-arg only
            flag = "--" + name.replace("_", "-")
            group.add_argument(flag, dest=f"taskopt__{name}", default=None,
                               help=f"task option (default {opt.default!r})")
    return p


def _set_option(task: str, task_args: dict[str, Any], given: dict[str, str], key: str, value: Any, how: str) -> None:
    from testbed.tasks import coerce_option

    if key in given:
        raise UsageError(f"task option {key!r} is given twice ({given[key]} and {how}); give it once")
    task_args[key] = coerce_option(task, key, value)
    given[key] = how


def _cmd_run(argv: list[str]) -> int:
    from testbed import limits
    from testbed.config import RunConfig
    from testbed.tasks import parse_task, task_options

    pre = ArgumentParser(add_help=False)
    pre.add_argument("--task", default="mnist")
    known, _ = pre.parse_known_args(argv)
    task_name, task_args = parse_task(known.task)  # "token_reversal" or "token_reversal(H=10, M=2)"
    given = {k: f"--task {known.task!r}" for k in task_args}
    opts = task_options(task_name)
    args = _run_parser(opts).parse_args(argv)
    args.task = task_name
    for item in args.task_arg:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise UsageError(f"--task-arg expects KEY=VALUE, got {item!r}")
        _set_option(task_name, task_args, given, key.strip(), value, f"--task-arg {item!r}")
    for key, value in vars(args).items():
        if key.startswith("taskopt__") and value is not None:
            name = key[len("taskopt__"):]
            _set_option(task_name, task_args, given, name, value, f"--{name.replace('_', '-')}")
    limits.check_count(args.seeds, f"--seeds {args.seeds}")
    configs = [
        RunConfig(**{**{name: getattr(args, name) for name in RunConfig.field_names() if name != "task_args"},
                     "seed": args.seed + i, "task_args": dict(task_args)})
        for i in range(args.seeds)
    ]
    out = args.out or "runs/run"
    return _execute(configs, out, args, {"command": "run", "argv": argv})


def _loop_size(args: argparse.Namespace) -> int | None:
    if args.loop_size is not None and args.loop_size < 1:
        raise UsageError(f"--loop-size must be >= 1, got {args.loop_size}")
    return args.loop_size


def _execute(configs: list, out: str, args: argparse.Namespace, meta: dict[str, Any],
             after: Any = None, specs: dict[str, Any] | None = None) -> int:
    """Plan (everything checked), then run (unless --dry-run), print the summary; exit 1 if a run failed."""
    from testbed.sweep import failure_message, failures, plan_sweep, run_sweep
    from testbed.util.executor import make

    executor = make(args.executor, args.address, num_cpus=args.workers)
    if not args.dry_run:
        executor.start(args.workers or 1)
    plan = plan_sweep(configs, out, workers=args.workers or 1, fmt=args.format or "csv", loop_size=_loop_size(args),
                      create=not args.dry_run, specs=specs)
    if args.dry_run:
        for line in plan.warnings:
            print(f"warning: {line}", file=sys.stderr)
        for line in plan.reuse_lines():
            print(line, file=sys.stderr)
        print(f"dry run: {plan.describe()}; nothing written")
        return 0
    _OUT.append(Path(out))
    run_sweep(configs, out, meta=meta, progress=not args.no_progress, warn=True, plan=plan, executor=executor)
    _print_summary(Path(out))
    if after is not None:
        after()
    failed = failures(out, configs)
    if failed:
        raise RunFailed(failure_message(out, failed, len(configs)))
    return 0


def _print_summary(out: Path) -> None:
    from testbed.report import setting_columns
    from testbed.results import read_frame

    summary = read_frame(out / "summary.csv")
    varying = setting_columns(summary)[0]
    cols = [c for c in (*varying, "seed", "status", "final_test_error", "wall_s") if c in summary]
    cols = list(dict.fromkeys(cols))
    print(summary[cols].to_string(index=False))
    print(f"wrote {out / 'results.csv'} and {out / 'summary.csv'}; tables: python -m testbed report {out}")


def _cmd_sweep(argv: list[str]) -> int:
    from testbed.sweep import expand, file_settings, load_file

    p = ArgumentParser(prog="python -m testbed sweep", description="Run a sweep file (TOML or YAML).")
    p.add_argument("file")
    _parser_common(p)
    args = p.parse_args(argv)
    spec = load_file(args.file)
    settings = file_settings(spec)
    parsed: dict[str, Any] = {}
    configs = expand(spec, parsed)
    out = args.out or settings["out"]
    if not out:
        raise UsageError(f"no output directory: give --out or set out = ... in {args.file!r}")
    args.workers = args.workers or settings["workers"]
    args.format = args.format or settings["format"]
    if args.loop_size is None:
        args.loop_size = settings["loop_size"]
    return _execute(configs, out, args, {"command": "sweep", "file": str(args.file), "spec": spec}, specs=parsed)


def split_top(text: str) -> list[str]:
    """``text`` split at commas outside parentheses and brackets, items stripped (empty ones kept)."""
    items, depth, cur = [], 0, ""
    for ch in text:
        depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    items.append(cur.strip())
    return items


def _list_arg(text: str, what: str) -> list[str]:
    items = split_top(text)
    if any(not i for i in items):
        raise UsageError(f"--{what} must be a comma-separated list of specs without empty entries, got {text!r}")
    return items


def _cmd_demo(argv: list[str]) -> int:
    from testbed.demo import conclusion, plot_demo
    from testbed.sweep import expand

    p = ArgumentParser(prog="python -m testbed demo",
                       description="Staleness comparison on the embedded MNIST bandit: table, plot and conclusion.")
    p.add_argument("--out", type=directory, default="runs/demo")
    p.add_argument("--steps", type=integer(1), default=2000)
    p.add_argument("--workers", type=integer(1), default=2)
    p.add_argument("--recipes", default=",".join(DEMO_RECIPES), help="comma-separated recipe specs")
    p.add_argument("--delays", default=",".join(DEMO_DELAYS), help="comma-separated staleness specs")
    p.add_argument("--seeds", type=integer(1), default=1)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--dry-run", action="store_true", help="check everything and say what would run; write nothing")
    args = p.parse_args(argv)
    spec = {"base": {"task": "mnist", "steps": args.steps, "log_every": max(1, args.steps // 20), "seeds": args.seeds},
            "grid": {"recipe": _list_arg(args.recipes, "recipes"), "delay": _list_arg(args.delays, "delays")}}
    parsed: dict[str, Any] = {}
    configs = expand(spec, parsed)
    args.format, args.loop_size, args.executor, args.address = None, None, "local", None
    out = Path(args.out)

    def after() -> None:
        from testbed.results import read_frame

        table, summary = read_frame(out / "results.csv"), read_frame(out / "summary.csv")
        caption = plot_demo(table, summary, out / "demo.png")
        print(f"\nplot: {out / 'demo.png'}\n{caption}\n")
        print(conclusion(summary, out))

    return _execute(configs, str(out), args, {"command": "demo", "spec": spec}, after=after, specs=parsed)


def _cmd_list(argv: list[str]) -> int:
    from testbed.delay import FORMS as DELAY_FORMS
    from testbed.frictions import FORMS as FRICTION_FORMS
    from testbed.stabilizers import available
    from testbed.tasks import task_names, task_options

    ArgumentParser(prog="python -m testbed list", description="Tasks, recipes, staleness models, frictions.").parse_args(argv)
    print("tasks:")
    for name in task_names():
        try:
            opts = ", ".join(f"{k}={o.default!r}" for k, o in task_options(name).items())
        except ValueError as exc:
            opts = f"(unavailable: {exc})"
        print(f"  {name}: {opts}")
    from testbed.stabilizers.registry import describe

    print("recipes (named bundles) and components (each a recipe of its own name; compose with +):")
    for name in available():
        kind, doc = describe(name)
        print(f"  {name} ({kind}): {doc if len(doc) <= 110 else doc[:107] + '...'}")
    print("staleness:", ", ".join(DELAY_FORMS))
    print("frictions:", " + ".join(FRICTION_FORMS))
    return 0


def _cmd_validate(argv: list[str]) -> int:
    import importlib

    try:
        validate = importlib.import_module("testbed.validate")
    except ModuleNotFoundError as exc:
        if exc.name not in ("testbed.validate",):
            raise
        raise UsageError("`validate` is not available: testbed/validate.py (from llm_scale) is not installed") from None
    return int(validate.cli(argv) or 0)


def _cmd_report(argv: list[str]) -> int:
    from testbed.report import report

    p = ArgumentParser(prog="python -m testbed report", description="Tables from a run/sweep output directory.")
    p.add_argument("out", type=directory)
    p.add_argument("--runs", action="store_true", help="also list every run (id, settings, seed, status, final value)")
    args = p.parse_args(argv)
    print(report(Path(args.out), runs=args.runs))
    return 0


def _cmd_fingerprint(argv: list[str]) -> int:
    from testbed.regimes import REGIMES

    p = ArgumentParser(prog="python -m testbed fingerprint",
                       description="The staleness fingerprint of a regime (testbed/fingerprint.py), in llm_scale's schema.")
    p.add_argument("--regime", required=True, choices=tuple(REGIMES))
    p.add_argument("--task", default="mnist")
    p.add_argument("--recipe", default="grpo", help="the regime's base recipe")
    p.add_argument("--steps", type=integer(1), default=None, help="the regime's run length (default: 1000)")
    p.add_argument("--at", type=number(0, 1, open_lo=True), default=0.5,
                   help="measure at this fraction of the run (default 0.5)")
    p.add_argument("--groups", type=integer(4), default=256, help="prompt groups drawn for the statistics")
    p.add_argument("--lags", default="1,2,4,8,16,32", help="comma-separated lags (versions)")
    p.add_argument("--seed", type=integer(0), default=0)
    p.add_argument("--group-size", type=integer(1), default=None, help="override the regime's")
    p.add_argument("--minibatches", type=integer(1), default=None, help="override the regime's")
    p.add_argument("--lr", type=number(0, open_lo=True), default=None, help="override the regime's")
    p.add_argument("--out", type=directory, default="results/fingerprint")
    p.add_argument("--real", type=directory, default="results/llm/fingerprint",
                   help="directory of real-model fingerprints: the newest of each model and task is drawn beside it")
    args = p.parse_args(argv)
    try:
        lags = tuple(int(x) for x in args.lags.split(","))
    except ValueError:
        raise UsageError(f"--lags must be comma-separated integers >= 1, got {args.lags!r}") from None
    if any(lag < 1 for lag in lags):
        raise UsageError(f"--lags must be comma-separated integers >= 1, got {args.lags!r}")
    from testbed import fingerprint as fpm
    from testbed.util.files import atomic_write_text

    command = "python -m testbed fingerprint " + " ".join(argv)
    fp = fpm.fingerprint(args.regime, task=args.task, recipe=args.recipe, steps=args.steps, at=args.at,
                         groups=args.groups, lags=lags, seed=args.seed, command=command,
                         settings={k: v for k in ("group_size", "minibatches", "lr")
                                   if (v := getattr(args, k)) is not None})
    out = Path(args.out)
    atomic_write_text(out / f"{args.regime}.json", fp.to_json())
    real = fpm.real_fingerprints(Path(args.real))
    fpm.figure(fp, real, out / f"{args.regime}.png")
    print(fpm.describe(fp, real))
    print(f"wrote {out / (args.regime + '.json')} and {out / (args.regime + '.png')}")
    return 0


def _cmd_plot(argv: list[str]) -> int:
    from testbed.plot import plot

    p = ArgumentParser(prog="python -m testbed plot",
                       description="Learning curves and the final-value table of a run or sweep directory.")
    p.add_argument("out", type=directory, help="the --out directory of a testbed run or sweep")
    p.add_argument("--to", type=directory, default=None, metavar="FILE", help="the figure (default: DIR/plot.png)")
    args = p.parse_args(argv)
    path, finals = plot(Path(args.out), args.to)
    with_values = finals.to_string(index=False, float_format=lambda v: f"{v:.4f}")
    print(with_values)
    print(f"wrote {path}, {path.with_suffix('.pdf')} and {path.with_suffix('.csv')}")
    return 0


COMMANDS = {"run": _cmd_run, "plot": _cmd_plot, "report": _cmd_report, "sweep": _cmd_sweep, "demo": _cmd_demo, "list": _cmd_list,
            "validate": _cmd_validate, "fingerprint": _cmd_fingerprint}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USAGE
    _OUT.clear()

    def body() -> int:
        from testbed.stabilizers.registry import import_modules, split_import_flags

        args, modules = split_import_flags(rest)
        import_modules(modules)
        return COMMANDS[command](args)

    return guarded(body, lambda: _OUT[-1] if _OUT else None)
