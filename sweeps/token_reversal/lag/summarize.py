"""Summary of the lag-1 experiment on token reversal (pg.toml, baselines.toml, sequence_is.toml, probe.py).

    PYTHONPATH=$PWD python sweeps/token_reversal/lag/summarize.py

Reads the sweeps' runs (runs/token_reversal/lag/) and results/findings/token_lag/probe.csv, and writes
results/findings/token_lag/summary.json and summary.md (atomically). Definitions, fixed before the runs:

* **error**: the final sampled sequence error on the held-out contexts (``test_error``, n_eval 1024);
* **paired gap** (lag minus sync, per seed; the runs of one seed share every stream): its mean with the
  Student-t interval and its 20% trimmed mean with Yuen's interval, both two-sided at testbed/util/stats.py's
  level (`difference`);
* **switched basin**: the lag run's final error exceeds its sync pair's by more than `SWITCH` (25 points);
  the share of seeds that do, with its exact Clopper-Pearson interval;
* **parting step**: the first evaluated step at which the lag run's error exceeds its pair's by more than
  `SWITCH` ("first apart"), and the first from which it does at every later evaluation ("apart for good"); NaN
  for a pair that never parts; medians over the pairs that part;
* **ESS by window**: the normalised ESS of the sequence ratios pi_t / mu of every learner step (the runs'
  per-step records), median over the window's steps and the seeds; the probe adds token-level ESS;
* **cosines** (probe, steps 2..): mean over steps and seeds of cos(baseline part of the update, last
  update), and the same for the reward part and the whole gradient.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from testbed.sweep_file import load_file
from testbed.util.files import atomic_write_text
from testbed.util.stats import LEVEL, clopper_pearson, difference

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = ROOT / "results" / "findings" / "token_lag"
SWITCH = 0.25
WINDOWS = ((1, 10), (11, 20), (21, 50), (51, 100), (101, 200), (201, 500))
LAGS = ("fixed:1", "uniform:1")
VARIANT_STEP = 200  # baselines.toml's length: every recipe (pg too) compared at this step
VARIANT_FILES = ("baselines", "sequence_is")


def load(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Logged rows and per-step records of one sweep file's runs (empty frames if it has not run)."""
    out = ROOT / load_file(HERE / f"{name}.toml")["out"]
    files = sorted(f for f in (out / "runs").glob("*.csv") if not f.name.endswith(".steps.csv"))
    if not files:
        return pd.DataFrame(), pd.DataFrame()
    rows = pd.concat([pd.read_csv(f) for f in files])  # every finished run's logged rows
    steps = []
    for run_id, g in rows.groupby("run_id"):
        path = out / "runs" / f"{run_id}.steps.csv"
        if path.exists():
            s = pd.read_csv(path)
            s["run_id"], s["delay"], s["seed"], s["recipe"] = run_id, g["delay"].iloc[0], g["seed"].iloc[0], g["recipe"].iloc[0]
            steps.append(s)
    return rows, pd.concat(steps) if steps else pd.DataFrame()


def at_step(rows: pd.DataFrame, recipe: str, delay: str, step: int) -> pd.Series:
    """test_error per seed at ``step`` (indexed by seed)."""
    sel = rows[(rows["recipe"] == recipe) & (rows["delay"] == delay) & (rows["step"] == step)]
    return sel.set_index("seed")["test_error"].sort_index()


def interval(iv) -> dict[str, float]:
    return {"estimate": iv.estimate, "lo": iv.lo, "hi": iv.hi, "n": iv.n}


def gap(sync: pd.Series, lag: pd.Series) -> dict:
    seeds = sorted(set(sync.index) & set(lag.index))
    a, b = sync.loc[seeds].to_numpy(), lag.loc[seeds].to_numpy()
    k = int(((b - a) > SWITCH).sum())
    lo, hi = clopper_pearson(k, len(seeds))
    return {"seeds": [int(s) for s in seeds], "sync": a.tolist(), "lag": b.tolist(),
            "sync_mean": float(a.mean()), "lag_mean": float(b.mean()),
            "mean": interval(difference(a, b, estimator="mean")), "trimmed": interval(difference(a, b)),
            "switched": k, "switched_frac": k / len(seeds), "switched_ci": [lo, hi]}


def parting_steps(rows: pd.DataFrame, lag: str) -> tuple[list[float], list[float]]:
    """Per seed: the first evaluated step at which the lag run is more than `SWITCH` worse than its sync pair,
    and the first from which it stays so at every later evaluation (NaN where none)."""
    out, first_apart = [], []
    for seed in sorted(rows["seed"].unique()):
        s = rows[(rows["recipe"] == "pg") & (rows["delay"] == "sync") & (rows["seed"] == seed)].set_index("step")["test_error"]
        lg = rows[(rows["recipe"] == "pg") & (rows["delay"] == lag) & (rows["seed"] == seed)].set_index("step")["test_error"]
        common = s.index.intersection(lg.index).sort_values()
        apart = ((lg.loc[common] - s.loc[common]) > SWITCH).to_numpy()
        first_apart.append(float(common[apart.argmax()]) if apart.any() else math.nan)
        # the first step from which every later evaluation is apart
        first = math.nan
        for i in range(len(common) - 1, -1, -1):
            if not apart[i]:
                break
            first = float(common[i])
        out.append(first)
    return first_apart, out


def ess_windows(steps: pd.DataFrame, column: str = "ess", step_col: str = "step") -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for delay, g in steps.groupby("delay"):
        out[delay] = {}
        for lo, hi in WINDOWS:
            w = g[(g[step_col] >= lo) & (g[step_col] <= hi)][column]
            out[delay][f"{lo}-{hi}"] = float(w.median()) if len(w) else math.nan
    return out


def probe_summary() -> dict:
    path = OUT / "probe.csv"
    if not path.exists():
        return {}
    p = pd.read_csv(path)
    p = p.assign(step1=p["step"] + 1)  # learner step t consumes batch t and produces version t + 1: step t + 1
    out: dict = {"seeds": int(p["seed"].nunique()), "steps": int(p["step1"].max()), "by_delay": {}}
    for delay, g in p.groupby("delay"):
        later = g[g["step"] >= 1]
        per_seed = later.groupby("seed")[["cos_base_last", "cos_reward_last", "cos_full_last"]].mean()
        out["by_delay"][delay] = {
            **{f"{c}_mean": float(later[c].mean()) for c in ("cos_base_last", "cos_reward_last", "cos_full_last")},
            **{f"{c}_seed_min": float(per_seed[c].min()) for c in per_seed},
            **{f"{c}_seed_max": float(per_seed[c].max()) for c in per_seed},
            "b_mean": float(g["b"].mean()), "base_share_median": float(g["base_share"].median()),
            "ess_actor_min_median": float(g["ess_actor_min"].median()),
            "logratio_abs_max_median": float(g["logratio_abs_max"].median()),
        }
    out["ess_tok"] = ess_windows(p, "ess_tok", "step1")
    out["ess_seq"] = ess_windows(p, "ess_seq", "step1")
    return out


def main() -> int:
    rows, steps = load("pg")
    if rows.empty:
        print("no finished runs of pg.toml")
        return 1
    last = int(rows["step"].max())
    summary: dict = {"level": LEVEL, "switch": SWITCH, "final_step": last, "pg": {}, "parting": {}, "variants": {}}
    sync = at_step(rows, "pg", "sync", last)
    for lag in LAGS:
        if (rows["delay"] == lag).any():
            summary["pg"][lag] = gap(sync, at_step(rows, "pg", lag, last))
            first, parts = parting_steps(rows, lag)
            finite, ffin = [x for x in parts if math.isfinite(x)], [x for x in first if math.isfinite(x)]
            summary["parting"][lag] = {"per_seed": parts, "median": float(np.median(finite)) if finite else math.nan,
                                       "n": len(finite), "first_apart_per_seed": first,
                                       "first_apart_median": float(np.median(ffin)) if ffin else math.nan,
                                       "first_apart_n": len(ffin)}
    ent = steps.groupby(["delay", "step"])["entropy"].median().unstack(0) if not steps.empty else pd.DataFrame()
    summary["entropy_median_at"] = {d: {str(s): float(ent.loc[s, d]) for s in (10, 30, 50, 100, last) if s in ent.index}
                                    for d in ent.columns}
    summary["ess_seq"] = ess_windows(steps) if not steps.empty else {}
    vrows = pd.concat([load(name)[0] for name in VARIANT_FILES])
    recipes = ["pg", *([] if vrows.empty else list(dict.fromkeys(vrows["recipe"])))]
    for recipe in recipes:
        src = rows if recipe == "pg" else vrows
        s, lg = at_step(src, recipe, "sync", VARIANT_STEP), at_step(src, recipe, "fixed:1", VARIANT_STEP)
        if len(s) and len(lg):
            summary["variants"][recipe] = gap(s, lg)
    summary["variant_step"] = VARIANT_STEP
    summary["probe"] = probe_summary()
    OUT.mkdir(parents=True, exist_ok=True)
    atomic_write_text(OUT / "summary.json", json.dumps(summary, indent=1, allow_nan=True) + "\n")
    atomic_write_text(OUT / "summary.md", markdown(summary))
    print(markdown(summary))
    return 0


def pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{100 * x:.1f}"


def fmt_gap(g: dict, key: str = "mean") -> str:
    iv = g[key]
    return f"{100 * iv['estimate']:+.1f} [{100 * iv['lo']:+.1f}, {100 * iv['hi']:+.1f}]"


def markdown(s: dict) -> str:
    lvl = f"{100 * s['level']:.0f}%"
    lines = ["# One version of lag on token reversal: summary", "",
             "Generated by sweeps/token_reversal/lag/summarize.py from the runs of pg.toml, baselines.toml and sequence_is.toml "
             "and from "
             "probe.csv (exploration seeds). Errors: final sampled sequence error on the held-out contexts, %.", "",
             f"## PG at step {s['final_step']} (paired by seed; gap = lag - sync, points, {lvl} interval)", "",
             "| delay | seeds | sync mean | lag mean | gap (mean, t) | gap (20% trimmed, Yuen) | switched basin | "
             f"exact {lvl} interval | first apart (median; pairs) | apart for good from (median; pairs) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for lag, g in s["pg"].items():
        part = s["parting"][lag]
        lines.append(f"| {lag} | {len(g['seeds'])} | {pct(g['sync_mean'])} | {pct(g['lag_mean'])} | {fmt_gap(g)} | "
                     f"{fmt_gap(g, 'trimmed')} | {g['switched']}/{len(g['seeds'])} | "
                     f"[{pct(g['switched_ci'][0])}, {pct(g['switched_ci'][1])}] | {part['first_apart_median']:.0f} "
                     f"({part['first_apart_n']}) | {part['median']:.0f} ({part['n']}) |")
    lines += ["", f"Switched basin: the lag run ends more than {100 * s['switch']:.0f} points worse than its sync pair. "
              "First apart: the first evaluation (every 10 steps) at which the pair is more than that apart; apart for good: "
              "the first from which it holds at every later evaluation.", "",
              "Per seed (sync / " + " / ".join(s["pg"]) + "):", ""]
    sync = {seed: v for g in s["pg"].values() for seed, v in zip(g["seeds"], g["sync"], strict=True)}
    lag = [dict(zip(g["seeds"], g["lag"], strict=True)) for g in s["pg"].values()]
    for seed in sorted(sync):
        lines.append(f"- seed {seed}: {pct(sync[seed])} / " + " / ".join(pct(v.get(seed, math.nan)) for v in lag))
    if s["variants"]:
        lines += ["", f"## Which form of the baseline carries it: fixed:1 vs sync at step {s['variant_step']}", "",
                  "| recipe | sync mean | fixed:1 mean | gap (mean, t) | gap (trimmed) | switched |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for recipe, g in s["variants"].items():
            lines.append(f"| {recipe} | {pct(g['sync_mean'])} | {pct(g['lag_mean'])} | {fmt_gap(g)} | {fmt_gap(g, 'trimmed')} | "
                         f"{g['switched']}/{len(g['seeds'])} [{pct(g['switched_ci'][0])}, {pct(g['switched_ci'][1])}] |")
    if s["ess_seq"]:
        wins = list(next(iter(s["ess_seq"].values())))
        lines += ["", "## Sequence ESS / N of pi_t against the behaviour policy (median over steps and seeds)", "",
                  "| delay | " + " | ".join(f"steps {w}" for w in wins) + " |", "| --- |" + " --- |" * len(wins)]
        for d, w in s["ess_seq"].items():
            lines.append(f"| {d} | " + " | ".join(f"{v:.3f}" for v in w.values()) + " |")
    if s["entropy_median_at"]:
        lines += ["", "## Per-token entropy of the learner on its batch (nats; median over seeds)", ""]
        for d, e in s["entropy_median_at"].items():
            lines.append(f"- {d}: " + ", ".join(f"step {k}: {v:.3f}" for k, v in e.items()))
    p = s.get("probe") or {}
    if p:
        lines += ["", f"## Probe (probe.py; {p['seeds']} seeds, steps 1-{p['steps']})", "",
                  "| delay | cos(baseline part, last update) | per-seed range | cos(reward part, last update) | "
                  "cos(whole gradient, last update) | mean b | median min per-actor seq ESS | median max |log ratio| |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for d, v in p["by_delay"].items():
            lines.append(f"| {d} | {v['cos_base_last_mean']:+.3f} | [{v['cos_base_last_seed_min']:+.3f}, "
                         f"{v['cos_base_last_seed_max']:+.3f}] | {v['cos_reward_last_mean']:+.3f} | "
                         f"{v['cos_full_last_mean']:+.3f} | {v['b_mean']:.3f} | {v['ess_actor_min_median']:.3f} | "
                         f"{v['logratio_abs_max_median']:.3f} |")
        wins = list(next(iter(p["ess_tok"].values())))
        lines += ["", "Token-level ESS / N (probe; median over steps and seeds):", ""]
        for d, w in p["ess_tok"].items():
            lines.append(f"- {d}: " + ", ".join(f"steps {k}: {v:.3f}" for k, v in w.items() if math.isfinite(v)))
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
