"""Command line: ``python -m testbed {run, sweep, demo, list, validate}``.

    python -m testbed run --task mnist --recipe dg --delay fixed:1000 --steps 10000 --seeds 3 --out DIR
    python -m testbed sweep sweeps/mnist_delay.toml [--out DIR] [--workers N]
    python -m testbed demo [--out runs/demo]
    python -m testbed report DIR        (final test error per recipe x delay, gradient cosines)
    python -m testbed list
    python -m testbed validate ...      (llm_scale's scorecard check: testbed/validate.py)

Task options are flags too: after ``--task NAME`` every option of that task is accepted as
``--OPTION VALUE`` (e.g. ``--data-dir`` for mnist, ``--H``/``--M`` for token reversal), and always as
``--task-arg OPTION=VALUE``. Bad input gets one ``error:`` line on stderr and exit code 2, and
nothing is written (every config is validated, and the task built, before the output directory is
touched).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from testbed.runner import DEFAULTS, RunConfig

EXIT_USAGE = 2

DEMO_RECIPES = ("pg", "tis", "ppo", "dg")
DEMO_DELAYS = ("sync", "fixed:10", "fixed:100")


class UsageError(ValueError):
    pass


def _parser_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", help="output directory (results.csv, summary.csv, config.json, runs/)")
    p.add_argument("--workers", type=int, default=None, help="parallel worker processes (default 1)")
    p.add_argument("--format", choices=("csv", "parquet"), default=None, help="also write results.parquet")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--loop-size", type=int, default=None, metavar="N",
                   help="train at most N runs that share a model shape (e.g. the seeds) in one loop; default: up "
                        "to 8, fewer when that keeps every worker busy; results do not depend on it")


def _run_parser(task_opts: dict[str, Any] | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m testbed run", description="Train one config over one or more seeds.")
    p.add_argument("--task", default="mnist", help='task name, or name with options, e.g. "token_reversal(H=10, M=2)" '
                   "(see `python -m testbed list`)")
    p.add_argument("--recipe", default="pg", help='stabilizer spec, e.g. dg, "tis(c=2)", "dg+gac"')
    p.add_argument("--delay", default="sync", help="staleness model: sync, fixed:D, uniform:D, geometric:p,max, "
                   "pareto:alpha,max, bounded:eta[,speed], and +mixed:q")
    p.add_argument("--friction", "--frictions", dest="frictions", default="none",
                   help='frictions, e.g. "bug(frac=0.2, kind=random)+reward(p=0.1)+mismatch(sigma=0.1)"')
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--seeds", type=int, default=1, help="number of seeds (seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=0, help="first seed")
    p.add_argument("--batch-size", type=int, default=None, help=f"default: the task's, else {DEFAULTS['batch_size']}")
    p.add_argument("--lr", type=float, default=None, help=f"default: the task's, else {DEFAULTS['lr']}")
    p.add_argument("--n-actors", type=int, default=None, help="actors per learner step (each has its own lag)")
    p.add_argument("--group-size", type=int, default=1, help="samples per context (GRPO groups)")
    p.add_argument("--epochs", type=int, default=1, help="passes over each batch (PPO/GRPO trainers' K)")
    p.add_argument("--minibatches", type=int, default=1, help="optimizer steps per pass (the batch split in N)")
    p.add_argument("--log-every", type=int, default=100, help="diagnostics interval in steps")
    p.add_argument("--agg", default=None, help="loss aggregation (verl's mode names)")
    p.add_argument("--optimizer", default="adam", choices=("adam", "sgd"))
    p.add_argument("--proximal", default="current", choices=("current", "none"))
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


def _cmd_run(argv: list[str]) -> int:
    from testbed.sweep import run_sweep
    from testbed.tasks import coerce_option, make_task, parse_task, task_options

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--task", default="mnist")
    known, _ = pre.parse_known_args(argv)
    task_name, task_args = parse_task(known.task)  # "token_reversal" or "token_reversal(H=10, M=2)"
    opts = task_options(task_name)
    args = _run_parser(opts).parse_args(argv)
    args.task = task_name
    for item in args.task_arg:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise UsageError(f"--task-arg expects KEY=VALUE, got {item!r}")
        task_args[key.strip()] = coerce_option(args.task, key.strip(), value)
    for key, value in vars(args).items():
        if key.startswith("taskopt__") and value is not None:
            task_args[key[len("taskopt__"):]] = coerce_option(args.task, key[len("taskopt__"):], value)
    if args.seeds < 1:
        raise UsageError(f"--seeds must be >= 1, got {args.seeds}")
    configs = [
        RunConfig(task=args.task, recipe=args.recipe, delay=args.delay, frictions=args.frictions, seed=args.seed + i,
                  steps=args.steps, batch_size=args.batch_size, lr=args.lr, n_actors=args.n_actors,
                  group_size=args.group_size, epochs=args.epochs, minibatches=args.minibatches,
                  log_every=args.log_every, agg=args.agg, optimizer=args.optimizer,
                  proximal=args.proximal, task_args=task_args)
        for i in range(args.seeds)
    ]
    for cfg in configs:
        cfg.validate()
    make_task(args.task, **task_args)
    out = args.out or "runs/run"
    meta = {"command": "run", "argv": argv}
    table = run_sweep(configs, out, workers=args.workers or 1, fmt=args.format or "csv", meta=meta,
                      loop_size=_loop_size(args),
                      progress=not args.no_progress)
    _print_summary(Path(out))
    return 0 if len(table) else 1


def _print_summary(out: Path) -> None:
    import pandas as pd

    summary = pd.read_csv(out / "summary.csv")
    cols = [c for c in ("recipe", "delay", "frictions", "seed", "status", "final_test_error", "wall_s") if c in summary]
    print(summary[cols].to_string(index=False))
    print(f"wrote {out / 'results.csv'} and {out / 'summary.csv'}")


def _loop_size(args: argparse.Namespace) -> int | None:
    if args.loop_size is not None and args.loop_size < 1:
        raise UsageError(f"--loop-size must be >= 1, got {args.loop_size}")
    return args.loop_size


def _cmd_sweep(argv: list[str]) -> int:
    from testbed.sweep import load_file, sweep_file

    p = argparse.ArgumentParser(prog="python -m testbed sweep", description="Run a sweep file (TOML or YAML).")
    p.add_argument("file")
    _parser_common(p)
    args = p.parse_args(argv)
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    sweep_file(args.file, out=args.out, workers=args.workers, fmt=args.format, progress=not args.no_progress,
               loop_size=_loop_size(args))
    _print_summary(Path(args.out or load_file(args.file)["out"]))
    return 0


def _cmd_demo(argv: list[str]) -> int:
    from testbed.stabilizers import build
    from testbed.sweep import expand, run_sweep

    p = argparse.ArgumentParser(prog="python -m testbed demo",
                                description="Staleness comparison on the embedded MNIST bandit: table + plot.")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--recipes", default=",".join(DEMO_RECIPES), help="comma-separated recipe specs")
    p.add_argument("--delays", default=",".join(DEMO_DELAYS), help="comma-separated staleness specs")
    p.add_argument("--seeds", type=int, default=1)
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    recipes = [r.strip() for r in args.recipes.split(",") if r.strip()]
    for r in recipes:
        build(r)
    spec = {"base": {"task": "mnist", "steps": args.steps, "log_every": max(1, args.steps // 20), "seeds": args.seeds},
            "grid": {"recipe": recipes, "delay": [d.strip() for d in args.delays.split(",") if d.strip()]}}
    configs = expand(spec)
    if args.workers < 1:
        raise UsageError(f"--workers must be >= 1, got {args.workers}")
    table = run_sweep(configs, args.out, workers=args.workers, meta={"command": "demo", "spec": spec},
                      progress=not args.no_progress)
    out = Path(args.out)
    plot_demo(table, out / "demo.png")
    _print_summary(out)
    print(f"plot: {out / 'demo.png'}")
    return 0


def plot_demo(table: Any, path: Path) -> None:
    """Test error against step: one panel per delay, one line per recipe (mean over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    delays = list(dict.fromkeys(table["delay"]))
    fig, axes = plt.subplots(1, len(delays), figsize=(4 * len(delays), 3.4), sharey=True, squeeze=False)
    for ax, delay in zip(axes[0], delays, strict=True):
        sub = table[(table["delay"] == delay) & table["test_error"].notna()]
        for recipe, grp in sub.groupby("recipe", sort=False):
            curve = grp.groupby("step")["test_error"].mean()
            ax.plot(curve.index, curve.values, label=recipe)
        ax.set_title(f"delay {delay}")
        ax.set_xlabel("learner step")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MNIST test error")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)


def _cmd_list(argv: list[str]) -> int:
    from testbed.delay import FORMS as DELAY_FORMS
    from testbed.frictions import FORMS as FRICTION_FORMS
    from testbed.stabilizers import available
    from testbed.tasks import task_names, task_options

    argparse.ArgumentParser(prog="python -m testbed list", description="Tasks, recipes, staleness models, frictions.").parse_args(argv)
    print("tasks:")
    for name in task_names():
        try:
            opts = ", ".join(f"{k}={o.default!r}" for k, o in task_options(name).items())
        except ValueError as exc:
            opts = f"(unavailable: {exc})"
        print(f"  {name}: {opts}")
    print("recipes and components:", ", ".join(available()))
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


def report(out: Path) -> str:
    """Final test error (mean +- sample std over seeds, and diverged counts) per recipe x delay, and the
    mean consecutive-gradient cosine per recipe x delay, from a finished output directory."""
    import pandas as pd

    if not (out / "summary.csv").is_file():
        raise UsageError(f"{str(out)!r} has no summary.csv (not a finished run/sweep output directory)")
    summary = pd.read_csv(out / "summary.csv")
    table = pd.read_csv(out / "results.csv")
    order = {"recipe": list(dict.fromkeys(summary["recipe"])), "delay": list(dict.fromkeys(summary["delay"]))}
    ok = summary[summary["status"] == "ok"]
    stats = ok.groupby(["recipe", "delay"], sort=False)["final_test_error"].agg(["mean", "std", "count"])
    diverged = summary[summary["status"] != "ok"].groupby(["recipe", "delay"], sort=False).size()

    def cell(recipe: str, delay: str) -> str:
        text = ""
        if (recipe, delay) in stats.index:
            m, sd, n = stats.loc[(recipe, delay)]
            text = f"{m:.3f} +- {0.0 if pd.isna(sd) else sd:.3f} (n={int(n)})"
        if (recipe, delay) in diverged.index:
            text += f" [{int(diverged.loc[(recipe, delay)])} diverged]"
        return text.strip()

    err = pd.DataFrame({d: [cell(r, d) for r in order["recipe"]] for d in order["delay"]}, index=order["recipe"])
    lines = ["final test error (mean +- std over seeds):", err.to_string(), ""]
    if "grad_cos_prev" in table:
        cos = table.groupby(["recipe", "delay"], sort=False)["grad_cos_prev"].mean().unstack("delay")
        cos = cos.reindex(index=order["recipe"], columns=order["delay"])
        lines += ["mean consecutive-gradient cosine (all logged steps, all seeds):", cos.round(3).to_string(), ""]
    if "wall_s" in summary:
        lines.append(f"runs: {len(summary)}, total run time {summary['wall_s'].sum() / 60:.1f} min")
    return "\n".join(lines)


def _cmd_report(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed report", description="Tables from a run/sweep output directory.")
    p.add_argument("out")
    print(report(Path(p.parse_args(argv).out)))
    return 0


COMMANDS = {"run": _cmd_run, "report": _cmd_report, "sweep": _cmd_sweep, "demo": _cmd_demo, "list": _cmd_list, "validate": _cmd_validate}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"error: unknown command {command!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return COMMANDS[command](rest)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted: finished runs are saved; rerun the same command to resume", file=sys.stderr)
        return 130
