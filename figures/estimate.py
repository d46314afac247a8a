"""Predict the wall time of ``python -m figures all`` (the papers' budgets) from timed samples.

    python -m figures.estimate [--workers 2] [--quick] [--json FILE]

How. ``python -m figures all`` trains figure by figure; each figure's missing runs go to
`testbed.sweep.run_sweep`, which packs runs of one model shape into loops (`group_runs`) and hands the
loops, in order, to ``workers`` processes. This script builds the same loops from the same configs,
then times one sample loop per shape (the first loop of that shape, its own runs) at two lengths,
L and (1 + m) L learner steps with L = the runs' ``log_every`` (so evaluation is sampled at its real
frequency) and m the smallest that makes the second sample's extra steps last ``MIN_SPAN_S`` (`fit_line`),
after a short warm-up run, fits time = a + b * steps, and predicts every loop of that shape as a + b * steps * c,
c = the loop's summed `cost_estimate` over the sample's (more runs or heavier recipes cost more).
Shapes that differ only in the token-reversal length H are sampled at a few lengths and the fit's
b interpolated linearly in H. The figure's wall time is the list schedule of its loops over the
workers; the exact-gradient MNIST runs (figures/oracle_runs.py) and the GAC probe (figures/gac_probe.py) are
timed the same way; the theory
figures are timed by running their evidence at the full budget; drawing adds the seconds measured in
the quick setting. Assumes a quiet machine (time it alone): on
a loaded machine every loop slows down by the load. So it reports what it can see of other work (`loaded`): the
1-minute load average when it starts (other jobs: it has not started its own yet) and the share of a core its
timed samples got (CPU seconds over wall seconds). It says the estimate is too high when its samples shared
a core, and that it may be too high when only the load average shows other work (`load_warning`).

Seeds. The claims' sequential designs (figures/budgets.py, testbed/util/sequential.py) train the first look's
seeds for every cell and more seeds, in stages, only for undecided claims. How many claims stay
undecided is not known before the run, so the estimate gives two numbers: the first look (every claim
decided at n0) and the honest upper bound where every staged claim runs to its cap (the extra runs of
every experiment's cells at all the design's seeds, and their exact-gradient runs). ``--stops REPORT``
adds a third: each claim staged as far as it went in that report (its claims.json ``seeds_used``: the
runs of every look the claim was still undecided at), the forecast for a re-run that stops where the
last one did. Several reports are priced from the same timed samples, so their difference is not the
machine's pace moving between two estimates (it can move by 30% within a day).

    python -m figures.estimate --stops results/paper/claims.json [OTHER_CLAIMS_JSON ...]
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from figures import FIGURES, module
from figures.common import cost_estimate, dedupe
from testbed.config import RunConfig
from testbed.runner import run_many
from testbed.sweep import default_loop_size, group_runs
from testbed.util.arguments import CommandLine
from testbed.util.files import atomic_write_text

DRAW_S = 2.0  # seconds to read back, judge and draw one figure (measured in the quick setting: 0.4 to 2.2 s)


CAP_ROW = "extra seeds (cap)"
QUIET_LOAD = 0.5  # a 1-minute load average above this, before the estimate's own work, means other jobs run
QUIET_SHARE = 0.9  # timed samples that got less of a core than this shared it
# The slope is a difference of two timings, so a short difference is mostly noise: measured on one MNIST loop
# (8 runs, 10,000 steps of 32 to 35 ms each in the real run), slopes from 100 extra steps (3 s) ranged 25 to
# 47 ms/step over four fits, from about 20 s of extra steps 29 to 38 over three (the machine's pace itself
# varies that much between such windows); every shape is sampled, so the errors partly average out.
MIN_SPAN_S = 20.0


def loaded(load_at_start: float, cpu_share: float, cores: int) -> str | None:
    """Why the machine was not quiet while it was timed, or None when it was: the 1-minute load average before
    the estimate's own work (``load_at_start``, jobs wanting a core) above `QUIET_LOAD`, or the timed samples'
    CPU seconds over their wall seconds (``cpu_share``) below `QUIET_SHARE` (another job took part of the core)."""
    why = []
    if load_at_start > QUIET_LOAD:
        why.append(f"the load average was {load_at_start:.2f} on {cores} core(s) before it started")
    if cpu_share < QUIET_SHARE:
        why.append(f"its timed samples got {cpu_share:.0%} of a core")
    return "; ".join(why) or None


def load_warning(why: str, cpu_share: float) -> str:
    """What a `loaded` finding means for the printed times. Timed samples that got less than `QUIET_SHARE` of a
    core ran slower than on a quiet machine, so every time is too high. A load average alone says less: it
    decays over minutes, so it also counts jobs that had ended before the samples ran (measured: load 0.80 at
    the start from a job that had just ended, samples at 99.97% of a core, and token_horizon's first look then
    trained 7% slower than estimated), so the times may be too high or not."""
    if math.isfinite(cpu_share) and cpu_share < QUIET_SHARE:
        return f"the machine was not quiet ({why}): every time above is too high; time it alone"
    got = f"; the timed samples got {cpu_share:.0%} of a core" if math.isfinite(cpu_share) else ""
    return f"the machine may not have been quiet ({why}{got}): the times above may be too high; time it alone"


def cap_stops(quick: bool) -> dict[str, int]:
    """The upper bound's stops: every staged claim at its design's cap (claim id -> seeds)."""
    from figures.budgets import DESIGN_OF, budget
    from figures.experiments import experiment

    b = budget(quick)
    return {c.id: getattr(b, f"{kind}_design").cap for name, kind in DESIGN_OF.items()
            for c in experiment(name).CLAIMS if c.staged}


def read_stops(path: Path) -> dict[str, int]:
    """Claim id -> seeds used, from a report's claims.json (claims without a stop are left out). Raises
    ValueError, naming the file and what it lacks, when it is not such a report."""
    try:
        rows = json.loads(Path(path).read_text())["claims"]
        return {str(r["id"]): int(r["seeds_used"]) for r in rows if r.get("seeds_used") is not None}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a claims report with per-claim seeds_used (claims.json): {exc}") from exc


def stop_configs(quick: bool, stops: dict[str, int]) -> list[RunConfig]:
    """Every run the staged experiments train when each claim stops after the seeds ``stops`` gives it (a claim
    not named stops at the first look): the first look's runs, and at each later look the staged runs of the
    claims that were still undecided there (those that went on to at least that look's seeds)."""
    from figures.budgets import DESIGN_OF, budget
    from figures.experiments import experiment

    b = budget(quick)
    out = []
    for name, kind in DESIGN_OF.items():
        exp = experiment(name)
        design = getattr(b, f"{kind}_design")
        seeds = b.all_seeds(kind)
        out += exp.configs(b)
        for n in design.looks[1:]:
            going = [c.id for c in exp.CLAIMS if c.staged and stops.get(c.id, 0) >= n]
            if going:
                out += exp.staged_runs(b, seeds[:n], going)
    return out


def stops_row(i: int) -> str:
    """The name of the extra row for the ``i``-th (0-based) set of stops."""
    return f"extra seeds (stops {i + 1})"


def beyond_first_look(quick: bool, cap: bool, stops: list[dict[str, int]] | None) -> dict[str, dict[str, int]]:
    """The rows of runs beyond the first look, by name, with the stops each prices: the cap's (with ``cap``),
    then one per set of ``stops``."""
    return {**({CAP_ROW: cap_stops(quick)} if cap else {}), **{stops_row(i): to for i, to in enumerate(stops or [])}}


def plan(workers: int, quick: bool = False, cap: bool = False,
         stops: list[dict[str, int]] | None = None) -> list[tuple[str, list[list[RunConfig]]]]:
    """Per figure, in the order ``python -m figures all`` runs them: the loops run_sweep would train; then the
    rows of `beyond_first_look`, each with its staged experiments' runs up to its stops (`stop_configs`) beyond
    the first look's, on its own."""
    first: set[str] = set()

    def loops(cfgs: list[RunConfig], seen: set[str]) -> list[list[RunConfig]]:
        todo = [c for c in dedupe(cfgs) if c.run_id not in seen]
        seen.update(c.run_id for c in todo)
        todo.sort(key=cost_estimate, reverse=True)
        return group_runs(todo, default_loop_size(len(todo), workers), workers=workers) if todo else []

    out = [(name, loops(module(name).configs(quick), first)) for name in FIGURES]
    return out + [(name, loops(stop_configs(quick, to), set(first)))
                  for name, to in beyond_first_look(quick, cap, stops).items()]


def shape_key(cfg: RunConfig) -> tuple:
    """The model shape without the run length (``H`` kept apart for interpolation)."""
    c = cfg.resolved()
    args = {k: v for k, v in c.task_args.items() if k != "H"}
    return (c.task, tuple(sorted(args.items())), c.batch_size, c.n_actors, c.group_size, c.epochs, c.minibatches,
            c.log_every, c.steps)


def _timed(loop: list[RunConfig], steps: int) -> float:
    sample = [replace(c, steps=steps) for c in loop]
    t0 = time.perf_counter()
    run_many(sample)
    return time.perf_counter() - t0


def fit_line(time_at: Callable[[int], float], unit: int, steps: int,
             min_span_s: float = MIN_SPAN_S) -> tuple[float, float]:
    """(a, b) of time = a + b * steps from two timed lengths, both multiples of ``unit`` steps (so work done
    every ``unit`` steps, such as evaluation, is in the sample at its real frequency):

        n1 = unit,  n2 = n1 + m * unit,  m = max(1, min(ceil(min_span_s / t1), steps // unit - 1)),
        b = (t2 - t1) / (n2 - n1),  a = max(t1 - b * n1, 0)

    with t_i = ``time_at(n_i)``: the second sample's extra steps last about ``min_span_s`` at the first
    sample's pace, so a second of jitter in either timing moves b by a few percent, not by half; the
    sample is never longer than the run it stands for (``steps``), except that it takes two units."""
    t1 = time_at(unit)
    m = max(1, min(math.ceil(min_span_s / max(t1, 1e-9)), steps // unit - 1))
    t2 = time_at(unit + m * unit)
    b = max(t2 - t1, 1e-9) / (m * unit)
    return max(t1 - b * unit, 0.0), b


def fit(loop: list[RunConfig]) -> tuple[float, float]:
    """(a, b) of time = a + b * steps for this loop (`fit_line` with L = log_every), after a 2-step warm-up
    run (first calls pay one-time costs that would otherwise shrink the fitted slope: measured 3.6 instead
    of 15.9 ms per step on an MNIST loop)."""
    _timed(loop, 2)
    c = loop[0].resolved()
    return fit_line(lambda n: _timed(loop, n), c.log_every, c.steps)


def list_schedule(durations: list[float], workers: int) -> float:
    """Makespan of jobs handed out in order to the first free of ``workers`` processes."""
    free = [0.0] * workers
    for d in durations:
        i = min(range(workers), key=free.__getitem__)
        free[i] += d
    return max(free, default=0.0)


def _h_samples(hs: list[int]) -> list[int]:
    hs = sorted(set(hs))
    if len(hs) <= 3:
        return hs
    picks = {hs[0], hs[len(hs) // 2], hs[-1]}
    return sorted(picks)


def _interp(h: int, points: dict[int, tuple[float, float]]) -> tuple[float, float]:
    xs = sorted(points)
    if h in points:
        return points[h]
    lo = max([x for x in xs if x < h], default=xs[0])
    hi = min([x for x in xs if x > h], default=xs[-1])
    if lo == hi:
        return points[lo]
    w = (h - lo) / (hi - lo)
    return tuple(points[lo][i] * (1 - w) + points[hi][i] * w for i in range(2))  # type: ignore[return-value]


def estimate(workers: int = 2, quick: bool = False, progress: bool = True,
             stops: list[dict[str, int]] | None = None) -> dict[str, Any]:
    """The estimate (module docstring): per figure and extra row, runs, loops, CPU and wall seconds; the
    totals at the first look, at the caps and, per set of ``stops``, at those stops (``stops_wall_s``, a list
    in the order given; None without stops)."""
    import torch

    torch.set_num_threads(1)
    load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")  # (not on Windows)
    figures = plan(workers, quick, cap=True, stops=stops)
    beyond = beyond_first_look(quick, True, stops)
    # one sample per shape (per H for token reversal, at a few H)
    firsts: dict[tuple, dict[int, list[RunConfig]]] = defaultdict(dict)
    for _, loops in figures:
        for loop in loops:
            c = loop[0].resolved()
            firsts[shape_key(loop[0])].setdefault(int(c.task_args.get("H", 0)), loop)
    fits: dict[tuple, dict[int, tuple[float, float, float]]] = {}
    sampling = sampling_cpu = 0.0
    for key, by_h in firsts.items():
        fits[key] = {}
        for h in _h_samples(list(by_h)):
            loop = by_h[h]
            t0, c0 = time.perf_counter(), time.process_time()
            a, b = fit(loop)
            sampling += time.perf_counter() - t0
            sampling_cpu += time.process_time() - c0
            fits[key][h] = (a, b, sum(cost_estimate(c) for c in loop))
            if progress:
                print(f"  sampled {loop[0].task} {dict(loop[0].task_args)} x{len(loop)} runs: a = {a:.2f} s, "
                      f"b = {1e3 * b:.2f} ms/step", file=sys.stderr, flush=True)
    rows = []
    total = 0.0
    for name, loops in figures:
        durations = []
        for loop in loops:
            c = loop[0].resolved()
            per_h = fits[shape_key(loop[0])]
            h = int(c.task_args.get("H", 0))
            if h in per_h:
                a, b, cost0 = per_h[h]
            else:  # interpolate b per unit of cost, in H
                ab = {x: (v[0], v[1] / v[2]) for x, v in per_h.items()}
                a, b_unit = _interp(h, ab)
                b, cost0 = b_unit, 1.0
            scale = sum(cost_estimate(x) for x in loop) / cost0
            durations.append(a + b * c.steps * scale)
        train = list_schedule(durations, workers)
        rows.append({"figure": name, "runs": sum(len(x) for x in loops), "loops": len(loops),
                     "cpu_s": sum(durations), "wall_s": train})
        if name not in beyond:
            total += train
    extra = _oracle_and_theory(workers, quick, beyond)
    extra["probe_wall_s"] = _probe(quick, workers)
    total += extra["oracle_wall_s"] + extra["theory_s"] + extra["probe_wall_s"] + DRAW_S * len(FIGURES)
    at = {name: total + sum(r["wall_s"] for r in rows if r["figure"] == name) + extra["oracle_beyond_wall_s"][name]
          for name in beyond}  # the wall time of a run that stops at each row's stops
    share = sampling_cpu / sampling if sampling > 0 else float("nan")
    return {"workers": workers, "setting": "quick" if quick else "full", "figures": rows, **extra,
            "draw_s": DRAW_S * len(FIGURES), "sampling_s": sampling, "total_wall_s": total,
            "cap_wall_s": at[CAP_ROW],
            "stops_wall_s": None if stops is None else [at[stops_row(i)] for i in range(len(stops))],
            "load_at_start": load_at_start, "sampling_cpu_share": share,
            "loaded": loaded(load_at_start, share, os.cpu_count() or 1)}


def probe_seconds(b: Any, steps: int) -> tuple[float, float, int]:
    """(a, s per batch, runs) of the probe's largest loop, timed at ``steps`` and 2 x ``steps`` batches."""
    from figures.experiments.async_grpo.settings import probe_loops
    from testbed.gac_signal import measure

    loop = max(probe_loops(b, True), key=len)
    measure(loop, 2)  # warm-up

    def time_at(n: int) -> float:
        t0 = time.perf_counter()
        measure(loop, n)
        return time.perf_counter() - t0

    a, slope = fit_line(time_at, steps, 2 * steps, min_span_s=0.0)
    return a, slope, len(loop)


def _probe(quick: bool, workers: int) -> float:
    """Wall seconds of the GAC probe's first look (figures/gac_probe.py: its loops over ``workers`` processes, one
    with --quick), from one timed loop (`probe_seconds`)."""
    from figures.budgets import budget
    from figures.experiments.async_grpo.settings import probe_loops

    b = budget(quick)
    workers = 1 if b.quick else workers
    a, per_batch, runs = probe_seconds(b, min(50, b.async_exact_until))
    return list_schedule([a + per_batch * b.async_exact_until * len(loop) / runs for loop in probe_loops(b, False, workers)],
                         workers)


def _oracle_and_theory(workers: int, quick: bool, beyond: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The exact-gradient MNIST runs of the first look (wall and CPU seconds) and, per row of ``beyond``
    (`beyond_first_look`), those DG-1's later looks add up to its stop there; the theory figures' seconds."""
    from figures import oracle_runs
    from figures.budgets import budget
    from figures.common import Context
    from figures.experiments import delayed_sgd, mnist_samples
    from figures.experiments.contamination.evidence import theory_curves
    from figures.experiments.mnist_samples.settings import oracle_jobs

    b = budget(quick)
    seeds, looks = b.all_seeds("mnist"), b.mnist_design.looks
    jobs = oracle_jobs(b)

    def later(to: dict[str, int]) -> list[list[tuple[str, int]]]:
        """The jobs each later look trains, up to DG-1's stop in ``to`` (a look trains its new seeds together)."""
        n = max([to.get(c.id, 0) for c in mnist_samples.CLAIMS if c.staged], default=0)
        return [oracle_jobs(b, seeds[lo:hi]) for lo, hi in itertools.pairwise(looks) if hi <= n]

    beyond_jobs = {name: later(to) for name, to in beyond.items()}
    cost: dict[tuple[str, int], float] = {}  # (kind, seeds trained together) -> seconds at the full length
    for some in [jobs, *(look for looks_jobs in beyond_jobs.values() for look in looks_jobs)]:
        for kind, together in oracle_runs.batches(some, workers):
            if (kind, len(together)) in cost:
                continue
            oracle_runs.train(kind, together, 2, 2)  # warm-up

            def time_at(n: int, kind: str = kind, together: list[int] = together) -> float:
                t0 = time.perf_counter()
                oracle_runs.train(kind, together, n, b.mnist_log)
                return time.perf_counter() - t0

            a, slope = fit_line(time_at, b.mnist_log, b.mnist_steps)
            cost[kind, len(together)] = a + slope * b.mnist_steps

    def durations(some: list[tuple[str, int]]) -> list[float]:
        return [cost[k, len(s)] for k, s in oracle_runs.batches(some, workers)]

    def wall(some: list[tuple[str, int]]) -> float:
        return list_schedule(durations(some), workers)

    ctx = Context(out=Path("."), cache=Path("."), quick=quick)
    t0 = time.perf_counter()
    delayed_sgd.measure(ctx)  # the exact values, the simulations and the GAC runs on the quadratic
    theory_curves(b.contamination_deltas)
    theory = time.perf_counter() - t0
    return {"oracle_wall_s": wall(jobs), "oracle_cpu_s": sum(durations(jobs)), "theory_s": theory,
            "oracle_beyond_wall_s": {name: sum(wall(look) for look in j) for name, j in beyond_jobs.items()}}


def main(argv: list[str] | None = None) -> int:
    p = CommandLine(prog="python -m figures.estimate", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="parallel training processes of the run (default 2)")
    p.add_argument("--quick", action="store_true", help="estimate the quick setting instead (a self-check)")
    p.add_argument("--json", default=None, help="also write the estimate to this JSON file")
    p.add_argument("--stops", default=None, nargs="+", metavar="CLAIMS_JSON",
                   help="also estimate a run whose claims stop where they stopped in this report's claims.json "
                        "(several reports: each, from the same timed samples)")
    args = p.parse_args(argv)
    if args.workers < 1:
        print(f"error: --workers must be >= 1, got {args.workers}", file=sys.stderr)
        return 2
    stops = None
    if args.stops is not None:
        try:
            stops = [read_stops(Path(f)) for f in args.stops]
        except ValueError as exc:
            print(f"error: --stops: {exc}", file=sys.stderr)
            return 2
    res = estimate(args.workers, args.quick, stops=stops)
    from figures.publish import hms

    width = max([len("figure")] + [len(r["figure"]) for r in res["figures"]])
    print(f"{'figure':{width}s} {'runs':>5s} {'loops':>5s} {'CPU':>9s} {'wall':>9s}")
    for r in res["figures"]:
        print(f"{r['figure']:{width}s} {r['runs']:5d} {r['loops']:5d} {hms(r['cpu_s']):>9s} {hms(r['wall_s']):>9s}")
    print(f"exact-gradient MNIST runs: {hms(res['oracle_wall_s'])} wall ({hms(res['oracle_cpu_s'])} CPU); GAC probe "
          f"{hms(res.get('probe_wall_s', 0.0))}; theory figures {res['theory_s']:.0f} s; drawing {res['draw_s']:.0f} s")
    print(f"estimated wall time with {res['workers']} worker(s): {hms(res['total_wall_s'])} if every claim is "
          f"decided at its first look; upper bound {hms(res['cap_wall_s'])} if every staged claim runs to its cap "
          f"(sampling took {res['sampling_s']:.0f} s)")
    for i, wall in enumerate(res.get("stops_wall_s") or []):
        print(f"with each claim stopping where it stopped in {args.stops[i]}: {hms(wall)} ({stops_row(i)})")
    if res["loaded"]:
        print(f"warning: {load_warning(res['loaded'], res['sampling_cpu_share'])}")
    if args.json:
        atomic_write_text(args.json, json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
