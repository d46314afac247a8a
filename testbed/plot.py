"""``python -m testbed plot DIR``: learning curves and the final-value table of any run or sweep directory.

The metric is the directory's main one (testbed/report.py: ``test_error``, else ``test_reward``). A
*setting* is what `testbed.report.setting_columns` calls one (every config value that differs between
the runs, the seed aside). The figure has one panel per staleness setting (``delay``) when the delay
varies, else one panel, and one line per other setting: the mean over seeds of the metric against
the learner step, over the runs that logged it (a diverged run's rows stop where it diverged). The
table, printed and written beside the figure (``plot.csv``), gives per setting the number of runs,
how many ended ok, and the mean and sample standard deviation over seeds of the final value of the
ok and collapsed runs (NaN where none has one, or, for the deviation, where there is one run).
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from testbed.report import METRICS, setting_columns
from testbed.results import read_frame
from testbed.util.errors import UsageError

STYLES = ("-", "--", "-.", ":")


def _read(out: Path, name: str) -> pd.DataFrame:
    path = out / name
    if not path.is_file():
        raise UsageError(f"{str(out)!r} has no {name} (give the --out directory of a finished testbed run or sweep)")
    try:
        return read_frame(path)
    except (ValueError, OSError) as exc:
        raise UsageError(f"cannot read {str(path)!r}: {exc}") from None


def _label(key: tuple, cols: list[str]) -> str:
    return ", ".join(f"{c}={v}" if c != "recipe" else str(v) for c, v in zip(cols, key, strict=True)) or "all runs"


def final_table(summary: pd.DataFrame, metric: str) -> pd.DataFrame:
    """Per setting: runs, ok runs, mean and sample std over seeds of the final ``metric`` (module docstring)."""
    final = f"final_{metric}"
    varying = setting_columns(summary)[0]
    values = pd.to_numeric(summary[final], errors="coerce") if final in summary else pd.Series(math.nan, summary.index)
    good = summary["status"].isin(["ok", "collapsed"])
    rows = []
    groups = summary.groupby(varying, sort=False, dropna=False) if varying else [((), summary)]
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        v = values[grp.index][good[grp.index]].dropna()
        rows.append({**dict(zip(varying, key, strict=True)), "runs": len(grp), "ok": int((grp["status"] == "ok").sum()),
                     f"{final}_mean": float(v.mean()) if len(v) else math.nan,
                     f"{final}_std": float(v.std(ddof=1)) if len(v) > 1 else math.nan})
    return pd.DataFrame(rows)


def plot(out: str | Path, path: str | Path | None = None) -> tuple[Path, pd.DataFrame]:
    """Draw ``out``'s learning curves to ``path`` (default ``OUT/plot.png``, and a PDF beside it) and write the
    final-value table to ``plot.csv`` beside it; return (the PNG's path, the table)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from testbed.util.files import atomic_write_text

    out = Path(out)
    if not out.is_dir():
        raise UsageError(f"{str(out)!r} is not a directory (give the --out directory of a testbed run or sweep)")
    summary, table = _read(out, "summary.csv"), _read(out, "results.csv")
    metric = next((m for m in METRICS if m in summary), METRICS[0]).removeprefix("final_")
    if metric not in table or not table[metric].notna().any():
        raise UsageError(f"{str(out)!r}: no run logged {metric!r}; nothing to plot")
    varying = setting_columns(summary)[0]
    panels = ["delay"] if "delay" in varying else []
    lines = [c for c in varying if c not in panels]
    panel_keys = list(dict.fromkeys(summary["delay"])) if panels else [None]
    fig, axes = plt.subplots(1, len(panel_keys), figsize=(4.2 * len(panel_keys) + 1.0, 3.6), sharey=True, squeeze=False)
    rows = table[table[metric].notna()]
    order = [k if isinstance(k, tuple) else (k,) for k in summary.groupby(lines, sort=False).groups] if lines else [()]
    for ax, delay in zip(axes[0], panel_keys, strict=True):
        sub = rows if delay is None else rows[rows["delay"] == delay]
        groups = sub.groupby(lines, sort=False) if lines else [((), sub)]
        for key, grp in groups:
            key = key if isinstance(key, tuple) else (key,)
            k = order.index(key) if key in order else 0
            curve = grp.groupby("step")[metric].mean()
            ax.plot(curve.index, curve.to_numpy(), label=_label(key, lines), color=f"C{k % 10}",
                    linestyle=STYLES[k // 10 % len(STYLES)])
        ax.set_title("all runs" if delay is None else f"delay {delay}")
        ax.set_xlabel("learner step")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"{metric} (mean over seeds)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    if handles:
        axes[0][-1].legend(handles, labels, fontsize=8, loc="best")
    fig.tight_layout()
    path = Path(path) if path is not None else out / "plot.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)
    finals = final_table(summary, metric)
    atomic_write_text(path.with_suffix(".csv"), finals.to_csv(index=False))
    return path, finals
