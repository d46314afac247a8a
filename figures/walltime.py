"""Predict the confirmatory run's wall time from the measured cost of a handful of short runs.

    python -m figures.walltime [--workers 1] [--steps N] [--json FILE]

The confirmatory budget (`figures.budgets.confirmatory_budget`) is the full budget (figures/budgets.py) with the seeds,
designs, logging interval and horizon grid of figures/preregistration.toml. Its runs (`confirmatory_runs`:
the first look's, and every later look's up to each design's cap for the upper bound) are packed into the
loops `python -m figures all` would train (`testbed.plan.group_runs`, at most `MAX_LOOP` runs a loop). For
each model shape one loop is timed in this process, at ``steps`` and 2 x ``steps`` learner steps (``steps`` = the
run's evaluation interval when that is shorter, so evaluation is in the sample at its real frequency; a
longer interval leaves evaluation out of the sample) after a 2-step warm-up (`figures.estimate.fit_line`: time = a + b x steps); token-reversal shapes are timed at the
shortest, middle and longest H and b is interpolated in H per unit of `cost_estimate`. Every loop is
priced as a + b x its steps x its cost relative to the timed loop, and the loops are list-scheduled over
``workers`` processes. One process, one loop at a time: it never starts a worker pool.

The GAC probe (figures/gac_probe.py: the GAC-1 base's async runs re-trained through ``gac.exact_until`` batches
with one exact gradient per optimizer step, its loops over the same workers) is timed on one of its loops the same
way, and its loops are list-scheduled after the runs' (`figures.experiments.async_grpo.probe_loops`). The exact-gradient MNIST runs and the theory figures are not re-seeded by
the design; their cost is
``python -m figures.estimate``'s (the same for both reports). Times are for this machine at its load while
sampling (the printed CPU share says how much of a core the samples got).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import defaultdict
from dataclasses import replace
from typing import Any

from figures.budgets import DESIGN_OF, Budget, confirmatory_budget
from figures.common import cost_estimate, dedupe
from figures.estimate import fit_line, list_schedule, probe_seconds
from figures.experiments.async_grpo.settings import probe_loops
from figures.prereg import load
from testbed.config import RunConfig
from testbed.runner import run_many
from testbed.util.arguments import CommandLine


def confirmatory_runs(b: Budget, cap: bool) -> list[RunConfig]:
    """The staged experiments' runs: the first look's; with ``cap``, also every later look's (every staged
    claim undecided to its design's cap: the upper bound)."""
    from figures.experiments import experiment

    out: list[RunConfig] = []
    for name, kind in DESIGN_OF.items():
        exp = experiment(name)
        design = getattr(b, f"{kind}_design")
        seeds = b.all_seeds(kind) if kind != "horizon" else b.tr_seeds
        out += exp.configs(b)
        if cap:
            staged = [c.id for c in exp.CLAIMS if c.staged]
            for n in design.looks[1:]:
                out += exp.staged_runs(b, seeds[:n], staged)
    return dedupe(out)


def _loops(configs: list[RunConfig], workers: int) -> list[list[RunConfig]]:
    from testbed.plan import MAX_LOOP
    from testbed.sweep import group_runs

    todo = sorted(configs, key=cost_estimate, reverse=True)
    return group_runs(todo, MAX_LOOP, workers=workers) if todo else []


# task arguments that change with the length H but not the cost of a step at that H (token reversal's rare
# discovery threshold): loops that differ only in them and H are one shape, priced by interpolation in H
_PER_H_ARGS = ("H", "min_correct")


def shape_key(cfg: RunConfig) -> tuple:
    """A loop's shape for timing: the model and batch settings without the run length and the per-H arguments
    (its steps enter the price through `cost_estimate`)."""
    c = cfg.resolved()
    args = {k: v for k, v in c.task_args.items() if k not in _PER_H_ARGS}
    return (c.task, tuple(sorted(args.items())), c.batch_size, c.n_actors, c.group_size, c.epochs, c.minibatches,
            c.log_every)


def _h(cfg: RunConfig) -> int:
    return int(cfg.resolved().task_args.get("H", 0))


def _samples(hs: list[int]) -> list[int]:
    hs = sorted(set(hs))
    return hs if len(hs) <= 3 else sorted({hs[0], hs[len(hs) // 2], hs[-1]})


def predict(workers: int, steps: int, progress: bool = True) -> dict[str, Any]:
    """Timed samples and the predicted wall seconds at the first look and at the caps (module docstring)."""
    import torch

    torch.set_num_threads(1)
    b = confirmatory_budget(load())
    first, upper = _loops(confirmatory_runs(b, False), workers), _loops(confirmatory_runs(b, True), workers)
    by_shape: dict[tuple, dict[int, list[RunConfig]]] = defaultdict(dict)
    for loop in upper:
        by_shape[shape_key(loop[0])].setdefault(_h(loop[0]), loop)
    fits: dict[tuple, dict[int, tuple[float, float]]] = {}  # shape -> H -> (a, b per unit of cost)
    samples, wall0, cpu0 = [], time.perf_counter(), time.process_time()
    for key, per_h in by_shape.items():
        fits[key] = {}
        for h in _samples(list(per_h)):
            loop = per_h[h]
            run_many([replace(c, steps=2) for c in loop])  # warm-up

            def time_at(n: int, loop: list[RunConfig] = loop) -> float:
                t0 = time.perf_counter()
                run_many([replace(c, steps=n) for c in loop])
                return time.perf_counter() - t0

            unit_steps = min(loop[0].resolved().log_every, steps)  # evaluation at its real frequency when it fits
            a, slope = fit_line(time_at, unit_steps, 2 * unit_steps, min_span_s=0.0)
            unit = sum(cost_estimate(c) / c.steps for c in loop)
            fits[key][h] = (a, slope / unit)
            samples.append({"task": loop[0].task, "H": h, "runs": len(loop), "a_s": a, "ms_per_step": 1e3 * slope})
            if progress:
                print(f"  timed {loop[0].task} H={h} x{len(loop)} runs: a = {a:.2f} s, {1e3 * slope:.1f} ms/step",
                      file=sys.stderr, flush=True)
    pa, pslope, pruns = probe_seconds(b, min(steps, b.async_exact_until))
    samples.append({"task": "gac probe", "H": 0, "runs": pruns, "a_s": pa, "ms_per_step": 1e3 * pslope})
    share = (time.process_time() - cpu0) / max(time.perf_counter() - wall0, 1e-9)

    def seconds(loop: list[RunConfig]) -> float:
        per_h = fits[shape_key(loop[0])]
        h, xs = _h(loop[0]), sorted(per_h)
        lo = max([x for x in xs if x <= h], default=xs[0])
        hi = min([x for x in xs if x >= h], default=xs[-1])
        w = 0.0 if hi == lo else (h - lo) / (hi - lo)
        a = per_h[lo][0] * (1 - w) + per_h[hi][0] * w
        per_unit = per_h[lo][1] * (1 - w) + per_h[hi][1] * w
        return a + per_unit * sum(cost_estimate(c) for c in loop)

    def total(loops: list[list[RunConfig]], probe: list[list[RunConfig]]) -> dict[str, float]:
        d = [seconds(x) for x in loops]
        # the probe's loops run on the same workers once the runs' are done (the experiment measures it first:
        # either order gives the same wall time)
        p = [pa + pslope * b.async_exact_until * len(x) / pruns for x in probe]
        return {"runs": sum(len(x) for x in loops), "loops": len(loops), "probe_runs": sum(len(x) for x in probe),
                "probe_s": sum(p), "cpu_s": sum(d) + sum(p),
                "wall_s": list_schedule(d, workers) + list_schedule(p, workers)}

    return {"workers": workers, "sample_steps": steps, "samples": samples, "sampling_s": time.perf_counter() - wall0,
            "sampling_cpu_share": share, "load_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
            "first_look": total(first, probe_loops(b, False, workers)), "cap": total(upper, probe_loops(b, True, workers))}


def main(argv: list[str] | None = None) -> int:
    from figures.publish import hms
    from testbed.util.errors import UsageError

    p = CommandLine(prog="python -m figures.walltime", description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=1, help="training processes of the confirmatory run (default 1)")
    p.add_argument("--steps", type=int, default=100,
                   help="at most this many learner steps in the shorter timed sample (default 100; a run's log_every "
                        "when smaller)")
    p.add_argument("--json", default=None, help="also write the prediction to this JSON file")
    args = p.parse_args(argv)
    try:
        if args.workers < 1 or args.steps < 2:
            raise UsageError(f"need --workers >= 1 and --steps >= 2, got {args.workers} and {args.steps}")
        res = predict(args.workers, args.steps)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for k in ("first_look", "cap"):
        r = res[k]
        print(f"{k}: {r['runs']} runs in {r['loops']} loops and {r['probe_runs']} probe runs, {hms(r['cpu_s'])} CPU, "
              f"{hms(r['wall_s'])} wall with {res['workers']} worker(s)")
    print(f"sampling took {res['sampling_s']:.0f} s at {res['sampling_cpu_share']:.0%} of a core"
          + ("" if res["sampling_cpu_share"] >= 0.9 else " (a shared core: the times above are too high)"))
    if args.json:
        from testbed.util.files import atomic_write_text

        atomic_write_text(args.json, json.dumps(res, indent=1))
    return 0 if math.isfinite(res["cap"]["wall_s"]) else 1


if __name__ == "__main__":
    sys.exit(main())
