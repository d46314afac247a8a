"""The pocket LM's designs: ``python -m llm_scale.pocket_design PILOT_DIR | pilot ... | lag ... | diagnose ...``.

`design` (the learning rate by synchronous GRPO's health, and every design's power and cost; its module states
the rules), `pilot` (a pilot's file, the runs it plans, and running and tabulating them), `diagnosis` (what GRPO
changed in a pocket LM); `main`, the command line.
"""


from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from testbed.util.files import atomic_write_text

from .design import (
    BAND,
    COLLAPSE,
    MARGIN,
    MIN_COLLAPSES,
    Z_LEARN,
    choose_lag,
    choose_lr,
    collapsed,
    design,
    gac1_seeds,
    sync_health,
)
from .diagnosis import diagnose
from .pilot import load_pilot, pilot_plan, run_pilot

__all__ = ["BAND", "COLLAPSE", "MARGIN", "MIN_COLLAPSES", "Z_LEARN", "choose_lag", "choose_lr", "collapsed", "design",
           "diagnose", "gac1_seeds", "load_pilot", "main", "pilot_plan", "run_pilot", "sync_health"]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["diagnose"] and len(argv) >= 2:
        out_file, models = (Path(argv[2]), argv[3:]) if argv[1] == "--out" and len(argv) >= 3 else (None, argv[1:])
        report = {"command": "python -m llm_scale.pocket_design " + " ".join(argv), "models": diagnose(models)}
        text = json.dumps(report, indent=1) + "\n"
        if out_file is not None:
            atomic_write_text(out_file, text)
        print(text, end="")
        return 0
    if argv[:1] == ["lag"]:
        min_drop = MARGIN
        if "--min-drop" in argv:
            at = argv.index("--min-drop")
            value = argv[at + 1] if at + 1 < len(argv) else ""
            try:
                min_drop = float(value)
            except ValueError:
                min_drop = math.nan
            if not (math.isfinite(min_drop) and min_drop > 0):
                print(f"error: lag: --min-drop takes a positive score difference, got {value!r}", file=sys.stderr)
                return 2
            argv = argv[:at] + argv[at + 2:]
        if len(argv) < 4 or not all((Path(d) / "runs.csv").is_file() for d in [argv[1], *argv[3:]]) \
                or not (Path(argv[1]) / "design.json").is_file():
            print(f"error: lag BASE_PILOT OUT.json LAG_PILOT... [--min-drop D], BASE_PILOT with runs.csv and design.json, each lag pilot "
                  f"with runs.csv; got {' '.join(argv[1:])!r}", file=sys.stderr)
            return 2
        res = choose_lag(Path(argv[1]), [Path(d) for d in argv[3:]], min_drop)
        atomic_write_text(Path(argv[2]), json.dumps(res, indent=1) + "\n")
        print(res["reading"])
        return 0
    if argv[:1] == ["pilot"]:
        usage = "pilot SWEEP RUNS OUT [ARM,ARM...] [collect | CELL LR] [--parallel N] [--executor {local,ray} [--address ADDR]]"
        parallel, options = 1, {}
        for flag in ("--parallel", "--executor", "--address"):
            if flag in argv:
                at = argv.index(flag)
                options[flag], argv = (argv[at + 1] if at + 1 < len(argv) else ""), argv[:at] + argv[at + 2:]
        if "--parallel" in options:
            value = options["--parallel"]
            if not value.isdigit() or int(value) < 1:
                print(f"error: {usage}: --parallel takes a whole number >= 1, got {value!r}", file=sys.stderr)
                return 2
            parallel = int(value)
        arms = tuple(argv[4].split(",")) if len(argv) >= 5 else ("sync",)
        rest = argv[5:]
        only = None
        if len(rest) == 2:
            try:
                only = (rest[0], float(rest[1]))
            except ValueError:
                only = None
        if len(argv) not in (4, 5, 6, 7) or not all(arms) or (rest not in ([], ["collect"]) and only is None):
            print(f"error: {usage}, got {' '.join(argv[1:])!r}", file=sys.stderr)
            return 2
        from testbed.util.executor import make, using

        from ..config import UsageError

        try:
            executor = make(options.get("--executor", "local"), options.get("--address"), num_cpus=parallel)
            if rest != ["collect"]:
                executor.start(parallel)
            with using(executor):
                run_pilot(argv[1], Path(argv[2]), Path(argv[3]), arms, start=rest != ["collect"], only=only,
                          parallel=parallel)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if set(arms) - {"sync", "stale"}:  # recipes: a comparison, judged by figures/llm_column/, not a pilot
            print(f"tabulated {argv[3]}/runs.csv (arms {', '.join(arms)}); a comparison with recipes chooses no design")
            return 0
        if "sync" not in arms:  # a stale-only pilot: its numbers are read against a base pilot's sync arm (`lag`)
            print(f"tabulated {argv[3]}/runs.csv; a pilot without the sync arm has no design of its own: read it "
                  f"with `python -m llm_scale.pocket_design lag BASE_PILOT OUT.json {argv[3]}`")
            return 0
        argv = [argv[3]]
    if len(argv) != 1 or not (Path(argv[0]) / "runs.csv").is_file():
        print(f"error: give one pilot directory holding runs.csv, updates.csv and study.json (or: pilot SWEEP RUNS OUT "
              f"[ARMS]), got {argv!r}", file=sys.stderr)  # fmt: skip
        return 2

    out = design(Path(argv[0]))
    atomic_write_text(Path(argv[0]) / "design.json", json.dumps(out, indent=1, default=str) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k != "rule"}, indent=1, default=str))
    return 0

