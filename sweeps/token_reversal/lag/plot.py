"""The figure of the lag-1 finding: results/findings/token_lag.png.

    PYTHONPATH=$PWD python sweeps/token_reversal/lag/plot.py      (after summarize.py)

Panels: (a) sampled sequence error over training, per seed and median, sync against fixed:1; (b) the learner's
per-token entropy (median over seeds); (c) sequence ESS / N of the consumed batch against the learner (median
over seeds, 10-step bins); (d) final error per seed, each sync run joined to its fixed:1 and uniform:1 pairs;
(e) the paired gap fixed:1 - sync with its interval for PG and the baseline variants at the variants' step;
(f) the probe's cos(baseline part of the update, last update) and cos(reward part, last update) per step (median
over seeds, 5-step mean).
"""

from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from summarize import OUT, load

from testbed.util.files import atomic_open

COLORS = {"sync": "#1f77b4", "fixed:1": "#d62728", "uniform:1": "#ff7f0e"}
PNG = OUT.parent / "token_lag.png"


def main() -> int:
    rows, steps = load("pg")
    summary = json.loads((OUT / "summary.json").read_text())
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    ax = axes[0, 0]
    for delay in ("sync", "fixed:1"):
        g = rows[(rows["recipe"] == "pg") & (rows["delay"] == delay)]
        for _, run in g.groupby("seed"):
            ax.plot(run["step"], 100 * run["test_error"], color=COLORS[delay], alpha=0.25, lw=0.8)
        med = g.groupby("step")["test_error"].median()
        ax.plot(med.index, 100 * med, color=COLORS[delay], lw=2.2, label=f"{delay} (median)")
    ax.set(xlabel="learner step", ylabel="sampled sequence error (%)", title="(a) PG: error per seed", xscale="log")
    ax.legend()
    ax = axes[0, 1]
    for delay, g in steps.groupby("delay"):
        med = g.groupby("step")["entropy"].median()
        ax.plot(med.index, med, color=COLORS[delay], label=delay)
    ax.set(xlabel="learner step", ylabel="entropy per token (nats)", yscale="log", xscale="log",
           title="(b) learner entropy (median)")
    ax.legend()
    ax = axes[0, 2]
    for delay, g in steps.groupby("delay"):
        if delay == "sync":
            continue
        binned = g.assign(bin=(g["step"] - 1) // 10 * 10 + 5).groupby("bin")["ess"].median()
        ax.plot(binned.index, binned, color=COLORS[delay], label=delay, marker=".")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xlabel="learner step", ylabel="sequence ESS / N", xscale="log", title="(c) sequence ESS (median, 10-step bins)")
    ax.legend()
    ax = axes[1, 0]
    for lag, g in summary["pg"].items():
        for i, seed in enumerate(g["seeds"]):
            ax.plot([0, 1 if lag == "fixed:1" else 2], [100 * g["sync"][i], 100 * g["lag"][i]], color=COLORS[lag],
                    alpha=0.6, marker="o", label=lag if i == 0 else None)
            if lag == "fixed:1":
                ax.annotate(str(seed), (0, 100 * g["sync"][i]), fontsize=7, xytext=(-10, 0), textcoords="offset points")
    ax.set_xticks([0, 1, 2], ["sync", "fixed:1", "uniform:1"])
    ax.set(ylabel="final sampled sequence error (%)", title=f"(d) PG at step {summary['final_step']}, paired by seed")
    ax.legend()
    ax = axes[1, 1]
    names = list(summary["variants"])
    for i, recipe in enumerate(names):
        iv = summary["variants"][recipe]["mean"]
        ax.errorbar([100 * iv["estimate"]], [i], xerr=[[100 * (iv["estimate"] - iv["lo"])], [100 * (iv["hi"] - iv["estimate"])]],
                    fmt="o", color="k", capsize=4)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(names)), names)
    ax.set(xlabel=f"fixed:1 - sync, final error (points; mean, {100 * summary['level']:.0f}% t interval)",
           title=f"(e) PG variants: fixed:1 - sync at step {summary['variant_step']}")
    ax = axes[1, 2]
    probe = OUT / "probe.csv"
    if probe.exists():
        p = pd.read_csv(probe)
        for delay, g in p.groupby("delay"):
            for column, style, what in (("cos_base_last", "-", "baseline part"), ("cos_reward_last", ":", "reward part")):
                med = g.groupby("step")[column].median().rolling(5, min_periods=1).mean()
                ax.plot(med.index + 1, med, style, color=COLORS.get(delay, "k"), label=f"{delay}, {what}")
        ax.axhline(0, color="grey", lw=0.8)
        ax.legend()
    ax.set(xlabel="learner step", ylabel="cos(part of the update, last update)",
           title="(f) parts of the update vs the last update (median)")
    fig.suptitle("Token reversal H = 10, M = 2, PG, 10 actors: one version of lag (exploration seeds)")
    fig.tight_layout()
    with atomic_open(PNG, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    print(f"wrote {PNG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
