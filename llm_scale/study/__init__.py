"""The promotion study: does a testbed verdict hold on a real LLM? ``python -m llm_scale study SWEEP.toml``.

Two stages, both fixed by the sweep file before any run:

1. **Regime search.** For every (eta, lr) cell of the grid, in the file's order: synchronous GRPO
   (``--mode sync``) and naive GRPO under bounded staleness (the base recipe, fixed lag eta, K x N
   optimizer steps per batch), each over the search seeds. The score of a run is its greedy
   accuracy on held-out problems at the end (the mean of its last ``last_evals`` evaluations). A
   cell *degrades* when the mean paired difference sync - stale (paired by seed: a seed fixes the
   prompts and the held-out problems) is >= ``min_drop`` and >= ``min_se`` standard errors of that
   mean (`degrades`; the SE never below the evaluation's own binomial noise) and its one-sided
   paired t test of "drop > 0" rejects under Holm's step-down over all the grid's cells at
   family-wise level ``[search] alpha`` (`holm_cells`): searching up to nine cells does not buy
   nine chances to find a degradation by luck. The chosen cell is the first degrading one in the
   file's order (once every cell before it is complete); if none degrades, the comparison is
   "not testable" in this grid and is not run (``--force-cell`` runs it anyway, labelled so).
2. **Comparison.** In the chosen cell: sync, stale naive GRPO, and stale + each recipe, over the
   comparison seeds. Each recipe gets a promotion decision by the rule of ``[compare]``
   (`promotion`), fixed before the runs: the fraction of the sync - stale gap it closes,
   mean(recipe - stale) / mean(sync - stale) paired by seed, with Fieller's paired interval at
   level 1 - 2 alpha (`testbed.util.stats.ratio_interval`); "promote" when the interval's lower
   end exceeds ``threshold`` over at least ``min_seeds`` (>= 10) seeds; "do not promote" when its
   upper end is below; else "undecided". The decision reads only the comparison seeds the search
   did not use (fresh seeds: the cell was chosen because its search seeds showed a large gap, and
   re-reading them would bias the gap). A gap below ``gap_tol`` leaves nothing to close: the
   fraction is NaN and the verdict "no gap to close". A diverged run counts as accuracy 0. Each
   recipe's decision is its own claim: a recipe that closes at most ``threshold`` of the gap is
   promoted with probability at most alpha (tests/llm/test_llm_study.py simulates it).

Every run is an ordinary ``python -m llm_scale train`` in its own directory named by a hash of its
configuration, so the study is a set of cached, resumable runs: a run whose summary says finished
and whose evaluations reach its last version is done and never rerun; an interrupted one resumes
from its last checkpoint. One invocation runs at most ``--parallel`` runs at once (sharing one GPU,
or splitting the CPU threads), each a job of the executor (``--executor local``: worker processes on this
machine; ``ray``: tasks on a Ray cluster; testbed/util/executor.py), for at most ``--budget-s`` seconds,
then interrupts what is still running (each keeps its last checkpoint) and writes the tables from what has
finished; the next invocation picks up from there. Each run records the device it ran on (its summary.json).

Outputs under ``--out`` (default results/llm/study): search.csv (one row per cell), compare.csv
(one row per arm), runs.csv (one row per run with its accuracy, device and wall time), updates.csv (one
row per finished run and policy version: the version's greedy evaluation and the metrics of the update
that made it, `run_updates`), study.json
(the rule, the base and recipes, the problems behind each accuracy, the chosen cell and, per arm and
seed, its comparison runs' accuracies, the verdict, how many runs are done), study.png / study.pdf.
"""


from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from testbed.util.arguments import ArgumentParser
from testbed.util.executor import using

from ..config import UsageError
from .report import Report, collect, format_promotion, format_report, plan_cost, write_report
from .rules import PROMOTION_VERDICTS, degrades, holm_cells, promotion
from .runs import (
    UPDATE_COLUMNS,
    add_scheduler_arguments,
    execute,
    late_split_half_cosine,
    run_result,
    run_updates,
    scheduler_executor,
)
from .sweep import (
    GAP_TOL,
    KEY_NEUTRAL,
    MIN_SEEDS,
    STALE,
    STUDY_SET,
    SYNC,
    Run,
    Sweep,
    compare_runs,
    config_run,
    load_sweep,
    make_run,
    read_tables,
    search_runs,
)

__all__ = ["GAP_TOL", "KEY_NEUTRAL", "MIN_SEEDS", "PROMOTION_VERDICTS", "STALE", "STUDY_SET", "SYNC",
           "UPDATE_COLUMNS", "Report", "Run", "Sweep", "add_scheduler_arguments", "collect", "compare_runs",
           "config_run", "degrades", "execute", "format_promotion", "format_report", "holm_cells",
           "late_split_half_cosine", "load_sweep", "main", "make_run", "plan_cost", "promotion", "read_tables",
           "run_result", "run_updates", "scheduler_executor", "search_runs", "write_report"]


def _train(sweep: Sweep, root: Path, rep: Report, args: argparse.Namespace, force: tuple[int, float] | None,
           t0: float) -> Report:
    """The runs an invocation trains: the search (and the comparison where a cell is chosen), then, if the search
    has just chosen a cell, the comparison in the budget left. Returns the report of what has finished."""
    todo = search_runs(sweep)
    if rep.chosen is not None and not args.search_only:
        todo = todo + compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"])
    execute(todo, root, budget_s=args.budget_s, parallel=args.parallel, device=args.device)
    rep = collect(sweep, root, force)
    left = args.budget_s - (time.monotonic() - t0)
    if rep.chosen is not None and left > 30 and not args.search_only:  # the search just chose: compare in the time left
        execute(compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"]), root, budget_s=left, parallel=args.parallel,
                device=args.device)  # fmt: skip
        rep = collect(sweep, root, force)
    return rep


def main(argv: list[str] | None = None) -> int:
    """``study SWEEP [--budget-s S] [--parallel N] [--device D] [--runs DIR] [--out DIR] [--plan] [--search-only]
    [--force-cell ETA,LR] [--executor {local,ray} [--address ADDR]]``."""
    parser = ArgumentParser(prog="python -m llm_scale study", description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep file (e.g. sweeps/llm/promotion.toml)")
    add_scheduler_arguments(parser, runs="runs/llm_study", out="results/llm/study", budget_s=540.0)
    parser.add_argument("--search-only", action="store_true",
                        help="run only the regime search, never a comparison run (one that could not finish in the "
                             "budget, without checkpoints, would be lost)")
    parser.add_argument("--force-cell", default=None, help="ETA,LR: run the comparison there even if the rule chose none")
    parser.add_argument("--cost-from", default=None,
                        help="with --plan: a finished study's runs.csv; print this study's size and estimated device time")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0)
        sweep = load_sweep(args.sweep)
        executor = scheduler_executor(args, "study")
        force = None
        if args.force_cell is not None:
            try:
                eta, lr = args.force_cell.split(",")
                force = (int(eta), float(lr))
            except ValueError:
                raise UsageError(f"study: --force-cell takes ETA,LR (e.g. 2,1e-6), got {args.force_cell!r}") from None
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cost_from is not None:
        try:
            print(plan_cost(sweep, args.cost_from, args.parallel))
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.plan:
            return 0
    root, out = Path(args.runs), Path(args.out)
    command = "python -m llm_scale study " + " ".join(argv)
    t0 = time.monotonic()
    rep = collect(sweep, root, force)
    if not args.plan:
        try:
            executor.start(args.parallel)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        with using(executor):
            rep = _train(sweep, root, rep, args, force, t0)
    write_report(sweep, rep, out, command)
    print(format_report(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
