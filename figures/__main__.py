"""Command line: regenerate the figures and the claims report.

    python -m figures all [--quick] [--out DIR] [--cache DIR] [--workers N] [--executor ray [--address ADDR]]
    python -m figures NAME [NAME ...] [same options]     one or more figures (see `list`)
    python -m figures list                                 the figures and the claims each tests
    python -m figures claims [--out DIR]                   rebuild claims.md / claims.json from DIR/data
    python -m figures all --confirmatory [--workers N]     the confirmatory report (figures/preregistration.toml)
    python -m figures all --registration FILE [--workers N]   a later registration's report (figures/registrations/)

The full setting (the papers' budgets, figures/budgets.py) is the default; ``--quick`` uses a handful
of steps and two seeds (CI smoke test; its verdicts are not evidence). Outputs (default
``results/paper``, ``results/figures/quick`` with --quick): NAME.png, NAME.pdf, NAME.caption.txt per
figure, data/NAME.json (the numbers behind the verdicts), claims.md, claims.json and index.html (one
self-contained page; written by ``all`` and ``claims``), timings.json. Simulator runs are cached in
the testbed's results store (``--cache``, default ``results/figures/runs``), keyed by config hash:
re-plotting retrains nothing and an interrupted run resumes. ``python -m figures.estimate`` predicts
the full run's wall time from timed samples.

``--confirmatory`` runs the pre-registered design instead of the full setting: the seeds, designs, logging
interval and horizon grid of figures/preregistration.toml (`figures.budgets.confirmatory_budget`), into
``results/confirmatory`` with its own run cache ``results/figures/confirmatory_runs``; the report is
labelled "confirmatory" only when the protocol holds (docs/claims_protocol.md); ``python -m
figures.walltime`` predicts its wall time. ``--registration FILE`` (implies ``--confirmatory``) runs a later
registration instead (`figures.prereg.load_later`): its claims only (``all`` means the figures that show them),
its seed block, task options and budget fields, into the report and cache directories it names.
"""

from __future__ import annotations

import datetime as dt
import os
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from figures import FIGURES, module
from testbed.usage import directory, guarded, integer
from testbed.util.arguments import ArgumentParser
from testbed.util.errors import EXIT_USAGE, RunFailed, UsageError


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog="python -m figures", description="Regenerate figures and the claims report.")
    p.add_argument("targets", nargs="+", help="all | list | claims | figure name(s)")
    p.add_argument("--quick", action="store_true", help="reduced steps and seeds (CI smoke setting)")
    p.add_argument("--out", type=directory, default=None, help="output directory (default results/figures[/quick])")
    p.add_argument("--cache", type=directory, default=None,
                   help="run cache: a testbed results store (default results/figures/runs)")
    p.add_argument("--workers", type=integer(1), default=None, help="parallel training processes (default: CPU count)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--confirmatory", action="store_true",
                   help="the pre-registered confirmatory design (figures/preregistration.toml) instead of the full setting")
    p.add_argument("--registration", type=Path, default=None, metavar="FILE",
                   help="a later registration (figures/registrations/*.toml): its claims on its design (implies "
                        "--confirmatory)")
    p.add_argument("--cached-only", action="store_true",
                   help="train nothing: plot and judge from the runs already cached (a partial report if some are missing)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="where training runs: local worker processes (default), or Ray tasks (the optional extra ray)")
    p.add_argument("--address", default=None, metavar="ADDR",
                   help="with --executor ray: the address of a running Ray cluster (default: Ray started on this machine)")
    return p


def _list() -> int:
    for name in FIGURES:
        mod = module(name)
        doc = (mod.__doc__ or "").strip().splitlines()[0]
        print(f"{name:18s} {', '.join(mod.CLAIMS):18s} {doc}")
    return 0


_OUT: list[Path] = []


def main(argv: Sequence[str] | None = None) -> int:
    """Bad input: one ``error:`` line, exit 2, nothing written; a failure while working: exit 1 (traceback in a
    log file in the output directory)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else EXIT_USAGE
    _OUT.clear()
    return guarded(lambda: _main(argv), lambda: _OUT[-1] if _OUT else None)


def _check_targets(targets: list[str]) -> None:
    if "list" in targets and targets != ["list"]:
        raise UsageError(f"'list' takes no other targets, got {' '.join(targets)}")
    unknown = [t for t in targets if t not in FIGURES and t not in ("all", "claims", "list")]
    if unknown:
        raise UsageError(f"unknown figure(s) {', '.join(map(repr, unknown))}; allowed: all, list, claims, "
                         f"{', '.join(FIGURES)}")


def _main(argv: list[str]) -> int:
    from testbed.limits import check_output_dir

    args = _parser().parse_args(argv)
    targets = args.targets
    _check_targets(targets)
    if targets == ["list"]:
        return _list()
    args.confirmatory = args.confirmatory or args.registration is not None
    if args.confirmatory and args.quick:
        raise UsageError("--confirmatory runs the pre-registered design; it cannot be combined with --quick")
    default_out, default_cache = "results/paper", "results/figures/runs"
    scope: tuple[str, ...] = ()
    if args.confirmatory:
        from figures import budgets, prereg

        reg = prereg.registration(args.registration)
        default_out, default_cache = "results/confirmatory", "results/figures/confirmatory_runs"
        if reg.later:
            default_out, default_cache = reg.later["output"]["report"], reg.later["output"]["cache"]
            scope = tuple(reg.later["claims"])
            from testbed.tasks import make_task

            try:  # the data its task options name must be here (the registration itself loads without them)
                make_task("mnist", **reg.later["task_args"])
            except (ValueError, TypeError, OSError) as exc:
                raise UsageError(f"--registration {args.registration}: {str(exc).splitlines()[0]}") from None
        budgets.activate(budgets.confirmatory_budget(reg))
    # the figures that show the registration's claims (a later registration's only; every figure otherwise)
    shown = [f for f in FIGURES if not scope or set(module(f).CLAIMS) & set(scope)]
    out = Path(args.out or ("results/figures/quick" if args.quick else default_out))
    cache = Path(args.cache or default_cache)
    from figures.claims import write_report
    from figures.common import Context, dedupe, missing, read_evidence, runs_s

    command = ("python -m figures " + " ".join(targets) + (" --quick" if args.quick else "")
               + (f" --registration {args.registration}" if args.registration else
                  " --confirmatory" if args.confirmatory else "")
               + (" --cached-only" if args.cached_only else ""))
    ctx = Context(out=out, cache=cache, quick=args.quick, workers=args.workers or (os.cpu_count() or 1),
                  progress=not args.no_progress, command=command, cached_only=args.cached_only)
    from testbed.util.executor import make, using

    executor = make(args.executor, args.address, num_cpus=ctx.workers)
    if targets == ["claims"]:
        evidence = read_evidence(out) if out.is_dir() else {}
        absent = [f for f in shown if f not in evidence]
        if absent:  # the hint keeps the user's directories (a bare `all` would write the committed report)
            quick = args.quick or any(p.get("quick") for p in evidence.values())
            again = " ".join(["python -m figures all", *(["--quick"] if quick else []), "--out", shlex.quote(str(out)),
                              *(["--cache", shlex.quote(args.cache)] if args.cache else [])])
            raise UsageError(f"no data for {', '.join(absent)} under {str(out / 'data')!r}; run `{again}` first")
        check_output_dir(out, create=True)
        quick = any(p.get("quick") for p in evidence.values())
        made = [c for n in FIGURES for c in module(n).configs(quick)]
        rows = write_report(out, evidence, quick, command, runs_s=runs_s(cache, made) if cache.is_dir() else None)
        _print_verdicts(rows, out)
        return 0
    names = [n for n in (FIGURES if "all" in targets else targets) if n in shown]
    if scope and not names:
        raise UsageError(f"--registration {args.registration}: none of {', '.join(targets)} shows its claims "
                         f"({', '.join(scope)}); use all")
    configs = [c for n in names for c in module(n).configs(args.quick)]
    for cfg in dedupe(configs):
        cfg.parse()
    check_output_dir(out, create=False)
    if args.cached_only:
        if not cache.is_dir():
            raise UsageError(f"--cached-only: the cache {str(cache)!r} does not exist, so there is nothing to plot "
                             "from; drop --cached-only to train, or give --cache DIR")
        n_missing = missing(cache, configs) if configs else 0
        if configs and n_missing == len(dedupe(configs)):
            print(f"warning: --cached-only: none of the {n_missing} runs these figures need is in {str(cache)!r}; "
                  "the figures will be empty", file=sys.stderr)
    else:
        executor.start(ctx.workers)
        check_output_dir(cache, create=True, what="--cache")
    check_output_dir(out, create=True)
    _OUT.append(out)
    import torch

    torch.set_num_threads(1)
    from figures import publish
    from testbed.util.provenance import machine

    unique = dedupe(configs)
    total_runs = len(unique)
    entry = {"command": command, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
             "commit": publish.commit(), "machine": machine(), "workers": ctx.workers, "cpu_count": os.cpu_count(),
             "completed": False,
             "missing_at_start": missing(cache, configs) if configs else 0, "total_runs": total_runs}
    t0 = time.perf_counter()
    timings = None
    try:
        with using(executor):  # every run the figures train (testbed/util/executor.py)
            timings = _make(ctx, names, configs, args, out)
        entry["completed"] = True
    finally:  # finished or interrupted, the invocation is on record (a resumed run is timed whole)
        entry["wall_s"] = time.perf_counter() - t0
        entry["cpu_s"] = _cpu_s()
        publish.record_invocation(out, entry, timings)
    if "all" in targets or "claims" in targets:
        evidence = read_evidence(out)
        n_missing = missing(cache, configs) if configs else 0
        rows = write_report(out, {k: v for k, v in evidence.items() if v.get("quick") == args.quick}, args.quick,
                            command, missing_runs=n_missing, total_runs=total_runs, runs_s=runs_s(cache, configs))
        _print_verdicts(rows, out)
    print(f"total wall time {entry['wall_s']:.1f} s, CPU time {entry['cpu_s']:.1f} s ({ctx.workers} worker(s))")
    if configs and not args.cached_only:
        from testbed.sweep import failure_message, failures

        failed = failures(cache, unique)
        if failed:
            raise RunFailed(failure_message(cache, failed, total_runs))
    return 0


def _make(ctx, names: list[str], configs: list, args, out: Path) -> dict[str, float]:
    """Figure by figure: each figure's missing runs are trained (in parallel workers), then it is drawn, so an
    interrupted run leaves finished figures and a resumable cache. Returns seconds per figure."""
    from figures.common import dedupe, machines, missing, write_evidence
    from figures.style import publish

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if args.quick and configs and not args.cached_only:
        ctx.ensure(configs)  # tiny runs: one worker pool for all of them (spawning costs more than training)
        timings["_training"] = time.perf_counter() - t0
    for name in names:
        mod = module(name)
        t = time.perf_counter()
        needs = dedupe(mod.configs(args.quick))
        if args.cached_only and needs and missing(ctx.cache, needs) == len(needs):
            print(f"{name}: skipped, none of its {len(needs)} runs is cached (--cached-only); its claims read "
                  "'no evidence'", flush=True)
            continue
        with ctx.reading() as used:  # every run the figure reads, for the machines that trained them
            ctx.ensure(needs)
            trained = time.perf_counter() - t
            evidence = mod.make(ctx)
        write_evidence(ctx, name, evidence, machines(sorted(used)))
        publish(out, name)  # the figure appears only beside its data file
        timings[name] = time.perf_counter() - t
        print(f"{name}: {timings[name]:.1f} s (training {trained:.1f} s) -> {out / (name + '.png')}", flush=True)
    timings["_total"] = time.perf_counter() - t0
    timings["_cpu_s"] = _cpu_s()
    return timings


def _cpu_s() -> float:
    """CPU seconds of this process and its finished worker processes."""
    import resource

    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                                                  resource.RUSAGE_CHILDREN)))


def _print_verdicts(rows: list, out: Path) -> None:
    width = max(len(r["id"]) for r in rows)
    for r in rows:
        print(f"{r['id']:{width}s}  {r['verdict']}")
    print(f"report: {out / 'claims.md'}")


if __name__ == "__main__":
    sys.exit(main())
