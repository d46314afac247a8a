"""``python -m testbed demo``: the figure (with its caption) and the plain-language conclusion."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import pandas as pd

GOOD = ("ok", "collapsed")  # runs with a final value


def _finals(summary: pd.DataFrame) -> dict[tuple[str, str], float]:
    """Mean final test error per (recipe, delay) over the runs that have one."""
    good = summary[summary["status"].isin(GOOD)].copy()
    good["final_test_error"] = pd.to_numeric(good.get("final_test_error"), errors="coerce")
    means = good.groupby(["recipe", "delay"], sort=False)["final_test_error"].mean()
    return {k: float(v) for k, v in means.items() if math.isfinite(v)}


def _setting(summary: pd.DataFrame) -> tuple[int, int]:
    steps = int(summary["steps"].iloc[0]) if "steps" in summary and len(summary) else 0
    seeds = int(summary["seed"].nunique()) if "seed" in summary else 1
    return steps, seeds


def caption(summary: pd.DataFrame) -> str:
    steps, seeds = _setting(summary)
    chance = pd.to_numeric(summary.get("chance_reward", pd.Series(dtype=float)), errors="coerce").dropna()
    chance_text = f" Dotted line: chance (guessing: test error {1 - float(chance.iloc[0]):.2f})." if len(chance) else ""
    mean = f", mean over {seeds} seeds" if seeds > 1 else ""
    return (f"MNIST as a 10-action contextual bandit (the embedded 5,000 images), {steps} learner steps{mean}. "
            "Test error (lower is better) against learner step: one panel per staleness setting (fixed:D = every "
            f"batch was sampled by the policy of D updates ago), one line per recipe.{chance_text}")


STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "v")


def plot_demo(table: pd.DataFrame, summary: pd.DataFrame, path: Path) -> str:
    """Test error against step: one panel per delay, one line per recipe (mean over seeds), with its caption
    under the panels (also written to ``demo.caption.txt``). Returns the caption."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    text = caption(summary)
    delays = list(dict.fromkeys(summary["delay"]))
    fig, axes = plt.subplots(1, len(delays), figsize=(4 * len(delays), 3.9), sharey=True, squeeze=False)
    chance = pd.to_numeric(summary.get("chance_reward", pd.Series(dtype=float)), errors="coerce").dropna()
    for ax, delay in zip(axes[0], delays, strict=True):
        sub = table[(table["delay"] == delay) & table["test_error"].notna()] if "test_error" in table else table.iloc[0:0]
        curves: dict[tuple, list[str]] = {}  # recipes with identical curves (e.g. pg, tis, ppo at sync: ratio 1)
        for recipe, grp in sub.groupby("recipe", sort=False):
            curve = grp.groupby("step")["test_error"].mean()
            key = (tuple(curve.index.to_numpy(dtype=float)), tuple(curve.to_numpy(dtype=float)))
            curves.setdefault(key, []).append(str(recipe))
        order = list(dict.fromkeys(summary["recipe"]))
        for (x, y), names in curves.items():  # one line per distinct curve; a recipe keeps its colour and style
            k = order.index(names[0])
            ax.plot(x, y, label=" = ".join(names), linestyle=STYLES[k % len(STYLES)], marker=MARKERS[k % len(MARKERS)],
                    markersize=3, color=f"C{k}")
        if len(chance):
            ax.axhline(1 - float(chance.iloc[0]), color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"delay {delay}")
        ax.set_xlabel("learner step")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("MNIST test error")
    for ax in axes[0]:  # every panel has its own legend: a panel may merge recipes whose curves coincide
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    wrapped = textwrap.fill(text, width=int(40 * len(delays) + 20))
    n_lines = wrapped.count("\n") + 1
    fig.tight_layout(rect=(0, 0.04 * n_lines + 0.02, 1, 1))
    fig.text(0.01, 0.01, wrapped, fontsize=8, ha="left", va="bottom")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)
    from testbed.util.files import atomic_write_text

    atomic_write_text(path.with_name(path.stem + ".caption.txt"), text + "\n")
    return text


def conclusion(summary: pd.DataFrame, out: Path) -> str:
    """What the demo ran and found, in a few plain sentences, and where to look next."""
    recipes = list(dict.fromkeys(summary["recipe"]))
    delays = list(dict.fromkeys(summary["delay"]))
    steps, seeds = _setting(summary)
    finals = _finals(summary)
    wall = pd.to_numeric(summary.get("wall_s", pd.Series(dtype=float)), errors="coerce").sum()
    lines = [f"What ran: {len(recipes)} recipe(s) ({', '.join(recipes)}) x {len(delays)} staleness setting(s) "
             f"({', '.join(delays)}) on MNIST as a 10-action contextual bandit, {steps} learner steps, {seeds} "
             f"seed(s) each: {len(summary)} runs, {wall / 60:.1f} min of training."]

    def span(delay: str) -> str:
        vals: dict[str, list[str]] = {}  # recipes by their final error as printed (ties share a value)
        for value, r in sorted((finals[(r, delay)], r) for r in recipes if (r, delay) in finals):
            vals.setdefault(f"{value:.3f}", []).append(r)
        if not vals:
            return f"at {delay} no run has a final value"
        (lo, best), (hi, worst) = next(iter(vals.items())), list(vals.items())[-1]
        if len(vals) == 1:
            return f"at {delay} the final test error is {lo} ({', '.join(best)})"
        return (f"at {delay} the final test error ranges from {lo} ({', '.join(best)}: best) to "
                f"{hi} ({', '.join(worst)}: worst)")

    base = "sync" if "sync" in delays else delays[0]
    found = [span(base)]
    last = delays[-1]
    if last != base:
        found.append(span(last))
        cost = sorted((finals[(r, last)] - finals[(r, base)], r) for r in recipes
                      if (r, last) in finals and (r, base) in finals)
        if len(cost) > 1:
            found.append(f"going from {base} to {last}, the error of {cost[-1][1]} changes most ({cost[-1][0]:+.3f}) "
                         f"and that of {cost[0][1]} least ({cost[0][0]:+.3f})")
        elif len(cost) == 1:
            found.append(f"going from {base} to {last}, the error of {cost[0][1]} changes by {cost[0][0]:+.3f}")
    text = "; ".join(found)
    lines.append(f"What it found: {text[0].upper()}{text[1:]}.")
    counts = summary["status"].value_counts()
    odd = [f"{int(counts[s])} {s}" for s in ("collapsed", "diverged", "failed") if s in counts]
    if odd:
        lines.append(f"Not every run ended well: {', '.join(odd)} (listed by `testbed report`).")
    if seeds == 1:
        lines.append("One seed per cell: differences of a few hundredths may be noise (rerun with --seeds 3).")
    lines.append(f"Next: python -m testbed report {out}   (every setting, statuses, gradient cosines)")
    return "\n".join(lines)
