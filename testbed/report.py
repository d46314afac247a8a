"""``python -m testbed report DIR``: what a finished run/sweep directory holds, by setting.

A *setting* is a combination of the config values that differ between the runs of the directory
(every config column, task options included, except the run id and the seed): runs that differ only
in their seed are pooled, runs that differ in anything else (a learning rate, a batch size, a task
option) never are. Per setting: the final value of the main metric (``final_test_error``, else
``final_test_reward``) as mean +- sample std over the ok and collapsed runs (collapsed runs ended at
a real, finite value; diverged and failed runs have none and are counted instead), the number of runs
of each status (testbed/outcomes.py), and the mean consecutive-gradient cosine over all logged steps
of its runs (and, where recorded, the within-batch and across-batch cosines of testbed/health.py). Beside
the error, the health of the setting's runs (testbed/health.py): ``health`` counts the healthy ones
(``4/5``; ``s``: stalled, ``l``: lost a class, e.g. ``3/5 s1 l1``) and ``lost`` is the mean number of
test classes the final policies never predict, in a second table (by the same settings, with the mean
error, the zero-gradient share and the within / across-batch cosines) below the first. Settings shared by every run are listed once above the
table. Every run that is not ok, or not healthy, is listed by id; ``--runs`` lists all of them.

Works on any mix of statuses (all diverged included). A directory without summary.csv, or whose
summary lacks the ``run_id`` and ``status`` columns, is an error naming what is missing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.outcomes import STATUSES
from testbed.results import CONFIG_COLUMNS, read_frame
from testbed.util.errors import UsageError

METRICS = ("final_test_error", "final_test_reward")
REQUIRED = ("run_id", "status")
SHOWN_NOT_OK = 20


def setting_columns(summary: pd.DataFrame) -> tuple[list[str], dict[str, Any]]:
    """(config columns that differ between runs, {column: value} of those shared by all), seed and id aside."""
    cols = [c for c in CONFIG_COLUMNS if c not in ("run_id", "seed") and c in summary]
    cols += sorted(c for c in summary.columns if c.startswith("task.") and c not in cols)
    varying, constant = [], {}
    for col in cols:
        values = summary[col]
        if values.nunique(dropna=False) > 1:
            varying.append(col)
        elif len(values):
            constant[col] = values.iloc[0]
    return varying, constant


def _read(path: Path) -> pd.DataFrame:
    try:
        return read_frame(path)
    except (ValueError, OSError) as exc:  # pandas' EmptyDataError / ParserError, undecodable bytes, ...
        raise UsageError(f"cannot read {str(path)!r}: {exc}") from None


def _fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _stat(values: pd.Series) -> str:
    v = values[values.map(lambda x: isinstance(x, int | float) and math.isfinite(x))].astype(float)
    if not len(v):
        return "n/a"
    if len(v) == 1:
        return f"{v.iloc[0]:.3f} (n=1, no spread)"
    return f"{v.mean():.3f} +- {float(v.std(ddof=1)):.3f} (n={len(v)})"


def _detail(row: pd.Series) -> str:
    status = row["status"]
    if status == "diverged" and "diverged_at" in row and pd.notna(row["diverged_at"]):
        return f"diverged at step {int(row['diverged_at'])}"
    if status == "failed":
        return f"failed: {row.get('error', '?')}"
    if status == "collapsed" and pd.notna(row.get("final_test_reward")) and pd.notna(row.get("chance_reward")):
        return (f"collapsed: held-out reward {float(row['final_test_reward']):.3f}, chance "
                f"{float(row['chance_reward']):.3f}")
    return str(status)


def report(out: Path, runs: bool = False) -> str:
    """The report of output directory ``out`` (module docstring) as text."""
    out = Path(out)
    if not out.is_dir():
        raise UsageError(f"{str(out)!r} is not a directory (give a run/sweep output directory)")
    path = out / "summary.csv"
    if not path.is_file():
        raise UsageError(f"{str(out)!r} has no summary.csv (not a finished run/sweep output directory)")
    summary = _read(path)
    missing = [c for c in REQUIRED if c not in summary]
    if missing:
        raise UsageError(f"{str(path)!r} lacks column(s) {', '.join(missing)}; it was not written by "
                         "`python -m testbed run/sweep` (expected run_id, status and the config columns)")
    if not len(summary):
        return f"0 runs in {out}"
    summary["status"] = summary["status"].fillna("unknown").astype(str)
    metric = next((m for m in METRICS if m in summary), METRICS[0])
    summary[metric] = pd.to_numeric(summary[metric], errors="coerce") if metric in summary else math.nan
    varying, constant = setting_columns(summary)
    statuses = list(dict.fromkeys([s for s in STATUSES if s == "ok" or s in set(summary["status"])]
                                  + list(summary["status"])))
    counts = summary["status"].value_counts()
    lines = [f"{len(summary)} runs in {out}: " + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in statuses)]
    if constant:
        lines.append("same in every run: " + ", ".join(f"{k}={_fmt(v)}" for k, v in constant.items()))
    cosine = _cosines(out, summary)
    keys = varying or None
    groups = summary.groupby(keys, sort=False, dropna=False) if keys else [((), summary)]
    rows, health_rows = [], []
    for key, grp in groups:
        key = key if isinstance(key, tuple) else (key,)
        row: dict[str, Any] = dict(zip(varying, map(_fmt, key), strict=True)) if varying else {"setting": "(all runs)"}
        hrow = dict(row)
        good = grp[grp["status"].isin(["ok", "collapsed"])]
        row[metric] = _stat(good[metric])
        row["runs"] = len(grp)
        for s in statuses:
            row[s] = int((grp["status"] == s).sum())
        if cosine is not None and "grad_cos_prev" in cosine:
            values = cosine["grad_cos_prev"].reindex(grp["run_id"]).dropna()
            row["grad_cos_prev"] = f"{values.mean():.3f}" if len(values) else "-"
        rows.append(row)
        if "health" in grp:
            hrow[metric] = _fmt(float(good[metric].mean())) if len(good) else "-"
            hrow.update(_health(grp))
            if cosine is not None:
                for col in ("grad_cos_within", "grad_cos_across"):
                    values = cosine[col].reindex(grp["run_id"]).dropna() if col in cosine else pd.Series([])
                    hrow[col] = f"{values.mean():.3f}" if len(values) else "-"
            health_rows.append(hrow)
    lines += ["", f"{metric} by setting (mean +- std over seeds of the ok and collapsed runs; diverged and failed runs "
              "have no final value and are counted):", pd.DataFrame(rows).to_string(index=False)]
    if cosine is not None and "grad_cos_prev" in cosine:
        lines.append("grad_cos_prev: mean consecutive-gradient cosine over all logged steps of the setting's runs")
    if health_rows:
        lines += ["", f"health by setting ({metric}: mean; health: healthy runs / runs, s = stalled, l = lost a class; "
                  "lost: mean test classes the final policies never predict; zero_grad: share of exactly zero "
                  "gradients in the second half; grad_cos_within / _across: mean cosine to the previous optimizer "
                  "step on the same / the previous batch):", pd.DataFrame(health_rows).to_string(index=False)]
    unhealthy = summary["health"].fillna("healthy") != "healthy" if "health" in summary else False
    bad = summary[(summary["status"] != "ok") | unhealthy]
    listed = summary if runs else bad
    if len(listed):
        title = "runs:" if runs else "runs not ok or not healthy:"
        lines += ["", title]
        for _, r in listed.head(len(listed) if runs else SHOWN_NOT_OK).iterrows():
            parts = [str(r["run_id"]), *(f"{c}={_fmt(r[c])}" for c in varying)]
            if "seed" in r:
                parts.append(f"seed={_fmt(r['seed'])}")
            final = ""
            if r["status"] in ("ok", "collapsed") and pd.notna(r[metric]):
                final = f", {metric} {float(r[metric]):.3f}"
            flag = f" [{r['health']}]" if "health" in r and pd.notna(r["health"]) and r["health"] != "healthy" else ""
            lines.append(f"  {' '.join(parts)}: {_detail(r)}{flag}{final}")
        if not runs and len(bad) > SHOWN_NOT_OK:
            lines.append(f"  ... and {len(bad) - SHOWN_NOT_OK} more (--runs lists all)")
    if "wall_s" in summary:
        wall = pd.to_numeric(summary["wall_s"], errors="coerce").sum()
        lines += ["", f"total run time {wall / 60:.1f} min"]
    return "\n".join(lines)


def _health(grp: pd.DataFrame) -> dict[str, str]:
    """The health cells of one setting (module docstring)."""
    flags = grp["health"].fillna("healthy").astype(str)
    cell = f"{int((flags == 'healthy').sum())}/{len(grp)}"
    for flag, letter in (("stalled", "s"), ("lost_class", "l")):
        n = int((flags == flag).sum())
        if n:
            cell += f" {letter}{n}"
    lost = pd.to_numeric(grp.get("lost_classes_final"), errors="coerce") if "lost_classes_final" in grp else None
    zero = pd.to_numeric(grp["zero_grad_frac_late"], errors="coerce") if "zero_grad_frac_late" in grp else None
    return {"health": cell, "lost": "-" if lost is None or lost.isna().all() else f"{lost.mean():.1f}",
            "zero_grad": "-" if zero is None or zero.isna().all() else f"{zero.mean():.2f}"}


COSINES = ("grad_cos_prev", "grad_cos_within", "grad_cos_across")


def _cosines(out: Path, summary: pd.DataFrame) -> pd.DataFrame | None:
    """Mean consecutive-gradient cosines (`COSINES` present) per run id from results.csv (None when it is
    missing or lacks the columns)."""
    path = out / "results.csv"
    if not path.is_file():
        return None
    try:
        table = read_frame(path)
    except (ValueError, OSError):
        return None
    cols = [c for c in COSINES if c in table]
    if not cols or "run_id" not in table:
        return None
    values = table[cols].apply(pd.to_numeric, errors="coerce")
    return values.groupby(table["run_id"].astype(str), sort=False).mean()
