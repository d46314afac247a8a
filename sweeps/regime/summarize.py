"""The regime search table: per setting, naive GRPO's final test error synchronous vs stale, paired by seed.

    python sweeps/regime/summarize.py runs/regime/search_mnist [--metric test_error]

A setting "degrades significantly" at a staleness level when the paired difference (stale - sync) over
the seeds exceeds both 2 standard errors and 0.02 (2 error points), and its synchronous version learns
(final error below the task's chance level by half: < 0.45 on MNIST, < 0.5 on token reversal).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

SETTING = ["epochs", "minibatches", "group_size", "lr", "task.H"]


def table(out: Path, metric: str) -> pd.DataFrame:
    import json

    summary = pd.read_csv(out / "summary.csv", dtype={"run_id": str})
    results = pd.read_csv(out / "results.csv", dtype={"run_id": str})
    configs = {rid: json.loads((out / "runs" / f"{rid}.json").read_text())["config"] for rid in summary["run_id"]}
    for key in ("epochs", "minibatches", "group_size", "lr", "delay"):  # every grid variable, from the run records
        summary[key] = summary["run_id"].map(lambda rid, key=key: configs[rid][key])
    last = results.dropna(subset=[metric]).groupby("run_id").tail(1).set_index("run_id")[metric]
    summary["final"] = summary["run_id"].map(last)
    summary.loc[summary["status"] != "ok", "final"] = float("nan")
    keys = [k for k in SETTING if k in summary.columns]
    rows = []
    for setting, grp in summary.groupby(keys, dropna=False):
        sync = grp[grp["delay"] == "sync"].set_index("seed")["final"]
        for delay, stale in grp[grp["delay"] != "sync"].groupby("delay"):
            stale = stale.set_index("seed")["final"]
            d = (stale - sync).dropna()
            n = len(d)
            se = d.std(ddof=1) / math.sqrt(n) if n > 1 else float("nan")
            rows.append({**dict(zip(keys, setting if isinstance(setting, tuple) else (setting,), strict=True)),
                         "delay": delay, "sync": sync.mean(), "stale": stale.mean(), "diff": d.mean(), "se": se, "n": n,
                         "diverged": int(grp[(grp["delay"] == delay)]["status"].ne("ok").sum())})
    frame = pd.DataFrame(rows)
    chance = 0.45 if "task.H" not in frame else 0.5
    frame["significant"] = (frame["diff"] > 2 * frame["se"]) & (frame["diff"] > 0.02) & (frame["sync"] < chance)
    return frame


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--metric", default="test_error")
    args = p.parse_args()
    frame = table(args.out, args.metric)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


if __name__ == "__main__":
    main()
