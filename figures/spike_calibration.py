"""VCPO-1's spike rule on quiet runs: ``python -m figures.spike_calibration --cache DIR --out OUT``.

VCPO-1's spike part reads "some step's gradient norm in the window before a collapse is above a factor times a
reference", with the factor the smallest of a registered grid whose false-alarm rate at the ends of the runs that
do not collapse is at most the registered rate (`figures.confirm.calibrate_factor`). Whether any factor can meet
that rate depends on the reference alone, and that is measured here on the quiet runs only: the runs of a
confirmatory cache's first-look MNIST delay sweep that do not collapse (`evidence.quiet_norms`), read without
training anything (a run the cache lacks is left out and counted). Per reference (`figures.confirm.SpikeReference`:
the registered local window, and the run's first learner steps at each ``--early`` length) and per factor: the
share of quiet run ends with a spike in their last window (`false_alarm_rate`), and the calibrated factor at the
registered rate. No collapse is read: the tool cannot see whether a rule would find precursors, only whether it
stays quiet where nothing happens. Per reference it also gives the quiet runs' median norm in their last window
over the reference level, the ratio a converging policy drives down.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from testbed.util.files import atomic_write_text

GRID = (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 8.0, 10.0, 20.0, 30.0, 50.0, 100.0)
EARLY = (500, 1000, 2000)


def quiet_runs(cache: Path, reg: Any) -> tuple[list[np.ndarray], dict[str, Any]]:
    """The per-step gradient norms of the quiet runs of the first-look MNIST delay sweep of ``reg`` (a
    `figures.prereg.Prereg`) in ``cache`` (cached only), and what was read (runs planned, found, quiet; the logging
    interval)."""
    from figures import budgets
    from figures.common import Context
    from figures.experiments.mnist_delay.evidence import quiet_norms
    from figures.experiments.mnist_delay.settings import sweep

    budgets.activate(budgets.confirmatory_budget(reg))
    try:
        ctx = Context(out=Path("."), cache=cache, cached_only=True, progress=False)
        b = ctx.budget
        first = sweep(b)
        table = ctx.rows(first)
        records = ctx.step_records(first)
    finally:
        budgets.activate(None)
    ids = {c.run_id for c in first}
    rows = table[table["run_id"].isin(ids)] if len(table) else table
    quiet = quiet_norms(rows, records)
    found = int(rows["run_id"].nunique()) if len(rows) else 0
    return quiet, {"planned": len(first), "found": found, "quiet": len(quiet), "log_every": b.mnist_log,
                   "registration": reg.file,
                   "seeds_per_cell": len({c.seed for c in first})}  # not the numbers: confirmatory seeds are named by no record


def calibration(quiet: list[np.ndarray], span: int, window: int, early: tuple[int, ...], grid: tuple[float, ...],
                rate: float) -> list[dict[str, Any]]:
    """Per reference (local over ``window`` steps, then early over each of ``early``): the false-alarm rate at
    each factor of ``grid`` on ``quiet`` (each run's last ``span`` steps), the smallest factor at or below ``rate``
    (None: none), and the quiet ends' median norm over the reference level."""
    from figures.confirm import SpikeReference, calibrate_factor, false_alarm_rate

    out = []
    for ref in (SpikeReference("local", window), *(SpikeReference("early", k) for k in early)):
        f, fa = calibrate_factor(quiet, ref, grid, rate, span)
        levels = []
        for r in quiet:
            ref_level = (np.median(r[:ref.steps]) if ref.kind == "early" else
                         np.median(r[-span - ref.steps:-span]) if r.size > span + ref.steps else math.nan)
            levels.append(float(np.median(r[-span:]) / ref_level) if ref_level > 0 else math.nan)
        out.append({"reference": ref.kind, "steps": ref.steps, "label": ref.label(),
                    "false_alarm": {f"{g:g}": false_alarm_rate(quiet, ref, g, span) for g in grid},
                    "factor": None if math.isnan(f) else f, "rate": None if math.isnan(fa) else fa,
                    "end_over_reference_median": float(np.nanmedian(levels)) if levels else math.nan})
    return out


def markdown(result: dict[str, Any]) -> str:
    r = result
    head = ["reference", *[f"x{g:g}" for g in r["grid"]], f"factor at <= {r['rate']:.0%}", "end / reference"]
    lines = [f"# VCPO-1's spike rule on quiet runs ({r['read']['quiet']} quiet runs of {r['read']['found']} found, "
             f"{r['read']['planned']} planned: the first-look MNIST delay sweep of {r['read']['registration']}, "
             f"{r['read']['seeds_per_cell']} seeds per cell)", "",
             f"`{r['command']}`", "",
             f"Share of quiet run ends (last {r['span']} learner steps) with a spike at each factor; the factor the "
             f"registered calibration would choose; the quiet ends' median norm over the reference level (median "
             f"over runs). No collapse is read.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for c in r["references"]:
        row = [c["label"], *[f"{c['false_alarm'][f'{g:g}']:.3f}" for g in r["grid"]],
               "none" if c["factor"] is None else f"{c['factor']:g} ({c['rate']:.3f})", f"{c['end_over_reference_median']:.3g}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from figures import prereg
    from figures.experiments.mnist_delay.evidence import WINDOW
    from testbed.util.errors import UsageError

    p = argparse.ArgumentParser(prog="python -m figures.spike_calibration", description=__doc__.split("\n\n")[0])
    p.add_argument("--cache", type=Path, required=True, help="a confirmatory run cache (read only, nothing trained)")
    p.add_argument("--registration", default=None, help="the registration whose sweep to read (default the first)")
    p.add_argument("--early", type=int, nargs="+", default=list(EARLY), help="lengths of the early reference")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        if not args.cache.is_dir():
            raise UsageError(f"--cache {str(args.cache)!r} is not a directory; give a confirmatory run cache")
        if any(k < 1 for k in args.early):
            raise UsageError(f"--early takes learner-step counts >= 1, got {args.early}")
        reg = prereg.registration(args.registration)
        sp = reg.section("spike")
        quiet, read = quiet_runs(args.cache, reg)
        if not quiet:
            raise UsageError(f"--cache {str(args.cache)!r} holds no quiet run of the sweep ({read['found']} of "
                             f"{read['planned']} runs found)")
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    span = WINDOW * read["log_every"]
    result = {"command": "python -m figures.spike_calibration " + " ".join(sys.argv[1:] if argv is None else argv),
              "read": read, "span": span, "rate": float(sp["false_alarm"]), "grid": list(GRID),
              "references": calibration(quiet, span, int(sp["window"]), tuple(args.early), GRID, float(sp["false_alarm"]))}
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / "spike_calibration.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(args.out / "spike_calibration.md", markdown(result))
    print(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
