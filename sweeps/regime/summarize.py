"""Tables of the regime search and of the measurements in the regime, paired by seed.

    python sweeps/regime/summarize.py search runs/regime/search_mnist [--markdown]
    python sweeps/regime/summarize.py measure runs/regime/measure_mnist [--markdown]

``search``: per setting (every grid variable), naive GRPO's final test error synchronous vs stale. A
setting "degrades significantly" at a staleness level when the paired difference (stale - sync) over the
seeds exceeds both 2 standard errors and 0.02 (2 error points) and its synchronous version learns (final
error below half the chance level: 0.45 on MNIST, 0.5 on token reversal).

``measure``: per recipe, the final test error (mean +- standard error over seeds) at each staleness level,
the paired change from its own synchronous run, and the paired difference from GRPO at the same level.

The final error is the last logged test error; a diverged run counts as missing (and is counted).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

GRID = ("recipe", "epochs", "minibatches", "group_size", "lr", "delay", "seed")


def finals(out: Path, metric: str = "test_error") -> pd.DataFrame:
    """One row per run: every grid variable (from the run records) and its final metric."""
    summary = pd.read_csv(out / "summary.csv", dtype={"run_id": str})
    results = pd.read_csv(out / "results.csv", dtype={"run_id": str})
    configs = {rid: json.loads((out / "runs" / f"{rid}.json").read_text())["config"] for rid in summary["run_id"]}
    for key in GRID:
        summary[key] = summary["run_id"].map(lambda rid, key=key: configs[rid][key])
    summary["H"] = summary["run_id"].map(lambda rid: configs[rid]["task_args"].get("H"))
    last = results.dropna(subset=[metric]).groupby("run_id").tail(1).set_index("run_id")[metric]
    summary["final"] = summary["run_id"].map(last).where(summary["status"] == "ok")
    return summary


def paired(a: pd.Series, b: pd.Series) -> tuple[float, float, int]:
    """(mean of b - a, its standard error, n) over the seeds both hold."""
    d = (b - a).dropna()
    n = len(d)
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"), n


def search(out: Path) -> pd.DataFrame:
    runs = finals(out)
    chance = 0.45 if runs["H"].isna().all() else 0.5
    keys = ["epochs", "minibatches", "group_size", "lr"]
    rows = []
    for setting, grp in runs.groupby(keys):
        sync = grp[grp["delay"] == "sync"].set_index("seed")["final"]
        for delay, stale in grp[grp["delay"] != "sync"].groupby("delay"):
            diff, se, n = paired(sync, stale.set_index("seed")["final"])
            significant = diff > 2 * se and diff > 0.02 and sync.mean() < chance
            rows.append({**dict(zip(keys, setting, strict=True)), "delay": delay, "sync": sync.mean(),
                         "stale": stale["final"].mean(), "stale - sync": diff, "se": se, "n": n,
                         "degrades": "yes" if significant else "no"})
    return pd.DataFrame(rows)


def measure(out: Path) -> pd.DataFrame:
    runs = finals(out)
    delays = ["sync", *sorted((d for d in runs["delay"].unique() if d != "sync"),
                              key=lambda d: [float(x) for x in d.split(":")[1].split(",")])]
    base = runs[runs["recipe"] == "grpo"]
    rows = []
    for recipe in dict.fromkeys(runs["recipe"]):
        mine = runs[runs["recipe"] == recipe]
        row: dict[str, object] = {"recipe": recipe}
        sync = mine[mine["delay"] == "sync"].set_index("seed")["final"]
        for delay in delays:
            v = mine[mine["delay"] == delay]["final"]
            row[delay] = f"{100 * v.mean():.1f} +- {100 * v.std(ddof=1) / math.sqrt(v.count()):.1f}"
        for delay in delays[1:]:
            stale = mine[mine["delay"] == delay].set_index("seed")["final"]
            diff, se, _ = paired(sync, stale)
            row[f"{delay} - sync"] = f"{100 * diff:+.1f} +- {100 * se:.1f}"
            if recipe != "grpo":
                ref = base[base["delay"] == delay].set_index("seed")["final"]
                diff, se, _ = paired(ref, stale)
                row[f"vs grpo at {delay}"] = f"{100 * diff:+.1f} +- {100 * se:.1f}"
        row["diverged"] = int((mine["status"] != "ok").sum())
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kind", choices=("search", "measure"))
    p.add_argument("out", type=Path)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    frame = search(args.out) if args.kind == "search" else measure(args.out)
    if args.markdown:
        print(frame.to_markdown(index=False, floatfmt=".3g"))
    else:
        with pd.option_context("display.width", 250, "display.max_rows", 500):
            print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
