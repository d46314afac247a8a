"""Sync PG at a smaller batch against the lag-1 runs of the same seeds (exploration, seeds 0-9).

Reads runs/token_reversal/lag/batch/summary.csv (``batch.toml``) and the pg pairs of
results/findings/token_lag/summary.json; writes results/findings/token_lag/batch.{json,md}: per batch size the
mean final sampled sequence error, the paired gap to sync at batch 100 and to fixed:1 at batch 100 (90% t
intervals, testbed/util/stats.py), and the seeds in the worse basin (more than `summarize.SWITCH` above their
batch-100 sync pair) with exact Clopper-Pearson intervals.

    python sweeps/token_reversal/lag/batch_summary.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import binomtest

from testbed.util.files import atomic_write_text
from testbed.util.stats import t_interval

RUNS = Path("runs/token_reversal/lag/batch/summary.csv")
SUMMARY = Path("results/findings/token_lag/summary.json")
OUT = Path("results/findings/token_lag")
LEVEL = 0.9


def main() -> None:
    pairs = json.loads(SUMMARY.read_text())
    switch = float(pairs["switch"])
    pg = pairs["pg"]["fixed:1"]
    seeds = list(pg["seeds"])
    sync100, lag100 = np.array(pg["sync"]), np.array(pg["lag"])
    table = pd.read_csv(RUNS)
    out: dict[str, dict] = {}
    for batch, g in table.groupby("batch_size"):
        err = g.set_index("seed").loc[seeds, "final_test_error"].to_numpy(float)
        worse = int(np.sum(err - sync100 > switch))
        ci = binomtest(worse, len(seeds)).proportion_ci(confidence_level=LEVEL, method="exact")
        out[str(int(batch))] = {
            "error": err.tolist(),
            "mean": float(err.mean()),
            "gap_to_sync100": t_interval(err - sync100, LEVEL).__dict__,
            "gap_fixed1_minus_this": t_interval(lag100 - err, LEVEL).__dict__,
            "worse_basin": worse,
            "worse_basin_ci": [ci.low, ci.high],
        }
    payload = {"seeds": seeds, "level": LEVEL, "switch": switch, "sync100_mean": float(sync100.mean()),
               "fixed1_mean": float(lag100.mean()), "by_batch": out}
    atomic_write_text(OUT / "batch.json", json.dumps(payload, indent=1, default=float))
    lines = ["Sync PG at a smaller batch vs batch 100 (sync and fixed:1), token reversal H = 10, 500 steps, "
             f"seeds {seeds[0]}-{seeds[-1]} (exploration); final sampled sequence error, %; paired gaps with "
             f"{LEVEL:.0%} t intervals.", "",
             "| batch | mean | gap to sync@100 | fixed:1@100 minus this | worse basin | exact interval |",
             "| ---: | ---: | --- | --- | ---: | --- |",
             f"| 100 (sync) | {100 * sync100.mean():.1f} | - | - | - | - |",
             f"| 100 (fixed:1) | {100 * lag100.mean():.1f} | - | - | - | - |"]
    for batch, r in out.items():
        a, b = r["gap_to_sync100"], r["gap_fixed1_minus_this"]
        lo, hi = r["worse_basin_ci"]
        lines.append(f"| {batch} (sync) | {100 * r['mean']:.1f} | {100 * a['estimate']:+.1f} [{100 * a['lo']:+.1f}, "
                     f"{100 * a['hi']:+.1f}] | {100 * b['estimate']:+.1f} [{100 * b['lo']:+.1f}, {100 * b['hi']:+.1f}] "
                     f"| {r['worse_basin']}/{len(seeds)} | [{100 * lo:.1f}, {100 * hi:.1f}]% |")
    atomic_write_text(OUT / "batch.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
