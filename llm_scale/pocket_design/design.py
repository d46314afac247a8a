"""``python -m llm_scale.pocket_design PILOT_DIR``: the learning rate and the power of the pocket LM's designs.

Reads a pilot in the promotion study's tables (``runs.csv``, ``updates.csv``: synchronous and, where run,
naive-stale GRPO over learning rates and seeds), written by ``python -m llm_scale study SWEEP --search-only`` or
by ``python -m llm_scale.pocket_design pilot SWEEP RUNS OUT [ARM,ARM...] [--parallel N]`` (`run_pilot`: the
study's own runs of those arms alone (sync, stale, or recipes of the file's ``[compare]`` trained stale), seed by
seed across the learning rates), and writes ``PILOT_DIR/design.json``:

1. **The learning rate, by synchronous GRPO's health alone** (`choose_lr`). A sync run is *healthy* when it
   finished, did not diverge and never collapsed (no greedy evaluation more than `COLLAPSE` below its running
   best, the testbed's collapse rule). Its *gain* is its score (the study's: the mean of its last evaluations)
   minus its version-0 accuracy. A learning rate *learns* when all its sync seeds are healthy and the mean gain
   exceeds `Z_LEARN` binomial standard errors of a seed's gain over the seeds (``sqrt((p0 (1 - p0) / n0 + p1
   (1 - p1) / n1) / seeds)``). The chosen rate is the largest that learns; if none does, the healthy rate with
   the largest mean gain, marked ``learns: false``. Neither the stale arm nor any method enters the choice.
2. **Power** (`testbed.util.stats.seeds_needed`: one-sided alpha 0.05, power 0.8, Student t), from the pilot's
   spread, pooled over learning rates (paired by seed):
   * AREAL-1 / GAC-2: the paired drop sync - stale in score, to resolve `MARGIN` (3 points), its SD no
     smaller than the evaluation's binomial floor ``sqrt(2 p (1 - p) / problems)`` at the sync score p;
   * GAC-1: the per-seed late gradient cosine of each arm (within-batch, or across consecutive updates when an
     update is one optimizer step) at the chosen cell's batch, its mean at the chosen setting (sync against the
     band +-0.2, stale above it; and the seeds that decide the stale part either way, above or below 0.2);
   * VCPO-1: staleness-caused collapses (a stale run's collapse whose paired sync run has none) per stale run
     at the chosen rate; runs needed for `MIN_COLLAPSES` such collapses (with none observed: the bound from
     the exact 95% upper limit of the rate).
   Each with its cost in CPU-hours from the pilot's own wall time per update.

``python -m llm_scale.pocket_design lag BASE_PILOT OUT.json LAG_PILOT...`` (`choose_lag`): the lag of AREAL-1 and GAC-2 by
the registered rule, from naive GRPO's paired drops alone.

``python -m llm_scale.pocket_design diagnose [--out FILE] MODEL...`` (`diagnose`) says what GRPO changed in a
pocket LM: greedy and sampled accuracy on the build's known and unknown operand pairs, format and truncation,
entropy, and the KL to version 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from testbed.util.stats import binomial_diff_sd, pooled_sd

COLLAPSE = 0.2  # an evaluation this far below the run's running best is a collapse (the testbed's rule)
Z_LEARN = 2.0
MARGIN = 0.03  # the few points AREAL-1 / GAC-2 must resolve
BAND = 0.2  # GAC-1's near-orthogonal band
MIN_COLLAPSES = 5  # staleness-caused collapses VCPO-1's precursor test needs


def _runs(pilot: Path) -> tuple[Any, Any]:
    import pandas as pd

    runs = pd.read_csv(pilot / "runs.csv")
    updates = pd.read_csv(pilot / "updates.csv")
    return runs[runs["stage"] == "search"], updates


def collapsed(evals: list[float]) -> bool:
    """Whether any evaluation lies more than `COLLAPSE` below the running best before it."""
    best = -math.inf
    for e in evals:
        if math.isfinite(e):
            if e < best - COLLAPSE:
                return True
            best = max(best, e)
    return False


def _evals(updates: Any, key: str) -> list[float]:
    rows = updates[(updates["key"] == key) & updates["eval_reward"].notna()].sort_values("version")
    return [float(v) for v in rows["eval_reward"]]


def sync_health(runs: Any, updates: Any, eval_problems: int, last_problems: int) -> list[dict[str, Any]]:
    """Per learning rate: the sync seeds' health, gains and whether the rate learns (module docstring, 1)."""
    out = []
    sync = runs[(runs["arm"] == "sync") & runs["finished"].astype(bool)]  # a run not finished is no evidence
    for (cell, lr), rows in _with_cell(sync).groupby(["cell", "lr"], sort=False):
        gains, healthy, ses = [], [], []
        for r in rows.itertuples():
            ev = _evals(updates, r.key)
            ok = bool(r.finished) and not bool(r.diverged) and not collapsed(ev)
            healthy.append(ok)
            p0, p1 = float(r.accuracy_v0), float(r.accuracy)
            gains.append(p1 - p0)
            ses.append(p0 * (1 - p0) / eval_problems + p1 * (1 - p1) / last_problems)
        n = len(gains)
        mean = sum(gains) / n
        se = math.sqrt(sum(ses) / n / n)
        out.append({"cell": cell, "lr": float(lr), "seeds": n, "healthy": healthy, "gains": gains, "mean_gain": mean,
                    "gain_se": se, "learns": all(healthy) and mean > Z_LEARN * se})  # fmt: skip
    return out


def _with_cell(runs: Any) -> Any:
    """``runs`` with a ``cell`` column ("" for a pilot of one cell, whose tables have none)."""
    return runs.assign(cell=runs["cell"].fillna("").astype(str) if "cell" in runs else "")


def choose_lr(health: list[dict[str, Any]], choose: str = "largest_lr") -> dict[str, Any] | None:
    """The setting that learns with the largest rate (``choose`` "largest_lr") or the largest mean gain
    ("largest_gain"), else the healthy one with the largest mean gain (module docstring, 1)."""
    learning = [h for h in health if h["learns"]]
    if learning:
        return max(learning, key=lambda h: h["lr"] if choose == "largest_lr" else h["mean_gain"])
    healthy = [h for h in health if all(h["healthy"])]
    return max(healthy, key=lambda h: h["mean_gain"]) if healthy else None


def design(pilot: Path) -> dict[str, Any]:
    """The chosen learning rate and every design's power and cost (module docstring)."""
    from testbed.util.stats import clopper_pearson, seeds_needed

    runs, updates = _runs(pilot)
    runs = _with_cell(runs)
    study = json.loads((pilot / "study.json").read_text())
    eval_size = int(study.get("eval_problems", 256)) // max(1, int(study.get("rule", {}).get("last_evals", 1)))
    last = int(study.get("eval_problems", eval_size))
    health = sync_health(runs, updates, eval_size, last)
    chosen = choose_lr(health, str(study.get("choose", "largest_lr")))
    at = runs[(runs["cell"] == chosen["cell"]) & (runs["lr"] == chosen["lr"])] if chosen is not None else runs.iloc[:0]
    versions = updates.groupby("key")["version"].max()
    timed = at if len(at) else runs  # the cost of the chosen setting's runs (all runs when there is none)
    per = [float(r.wall_seconds) / versions[r.key] for r in timed[timed["finished"].astype(bool)].itertuples()
           if r.key in versions and versions[r.key] > 0]  # fmt: skip
    per_update_s = sum(per) / len(per) if per else math.nan
    steps = int(versions.max()) if len(versions) else 0
    cos_column = "late_grad_cos_within"
    if "late_grad_cos_across" in runs and not runs[cos_column].notna().any():  # one optimizer step per update
        cos_column = "late_grad_cos_across"
    if "late_grad_cos_split_half" in runs and runs["late_grad_cos_split_half"].notna().any():  # the registered instrument
        cos_column = "late_grad_cos_split_half"
    pair = runs.pivot_table(index=["cell", "lr", "seed"], columns="arm", values=["accuracy", cos_column], dropna=False)
    arms = [a for a in ("sync", "stale") if ("accuracy", a) in pair]

    def by_lr(column: str, arm: str) -> list[list[float]]:
        return [[float(v) for v in g[(column, arm)]] for _, g in pair.groupby(level=["cell", "lr"])] if arm in arms else []

    if "stale" in arms:
        drop_sd, drop_df = pooled_sd([[a - b for a, b in zip(x, y, strict=True)]
                                       for x, y in zip(by_lr("accuracy", "sync"), by_lr("accuracy", "stale"), strict=True)])
        drop_basis = "paired drops sync - stale, pooled over learning rates"
    else:  # sync alone: a paired drop of two independent arms with sync's spread has sqrt(2) times that spread
        sd, drop_df = pooled_sd(by_lr("accuracy", "sync"))
        drop_sd = math.sqrt(2) * sd
        drop_basis = "sqrt(2) x the sync score's between-seed SD, pooled over learning rates (no stale arm in the pilot)"
    # GAC-1 at the design's batch: SDs pooled over the chosen cell's learning rates (the cosine depends on the
    # sequences per optimizer step), means at the chosen setting
    in_cell = pair.xs(chosen["cell"], level="cell", drop_level=False) if chosen is not None else pair
    cos = {arm: [[float(v) for v in g[(cos_column, arm)]] for _, g in in_cell.groupby(level=["cell", "lr"])]
           if arm in arms else [] for arm in ("sync", "stale")}  # fmt: skip
    at_pair = in_cell.xs(chosen["lr"], level="lr", drop_level=False) if chosen is not None else pair
    out: dict[str, Any] = {"pilot": str(pilot), "health": health, "chosen_lr": None if chosen is None else chosen["lr"],
                           "chosen_cell": None if chosen is None else chosen["cell"],
                           "chosen_learns": None if chosen is None else chosen["learns"],
                           "seconds_per_update": per_update_s,
                           "seconds_per_update_basis": "wall seconds of the pilot's finished runs over their updates "
                                                       "(evaluations included), on the machine as loaded when they ran", "updates_per_run": steps, "rule": __doc__.split("1. ")[1].split("2. ")[0].strip()}  # fmt: skip

    def cost(seeds: int | None, arms: int, updates_: int) -> float | None:
        return None if seeds is None else seeds * arms * updates_ * per_update_s / 3600

    # a pilot of few seeds may show less spread than the evaluation's binomial noise, never the design
    p_sync = float(at[at["arm"] == "sync"]["accuracy"].mean()) if len(at) else math.nan
    floor = binomial_diff_sd(p_sync, p_sync, last)
    planned = max(drop_sd, floor) if math.isfinite(drop_sd) and math.isfinite(floor) else drop_sd
    n_drop = seeds_needed(planned, MARGIN)
    out["AREAL-1/GAC-2"] = {"quantity": "paired drop sync - stale in score (greedy accuracy, 256 problems x 2 evals)",
                            "sd": planned, "pilot_sd": drop_sd, "binomial_floor_sd": floor, "df": drop_df,
                            "sd_basis": drop_basis + "; the design uses the larger of it and the binomial floor",
                            "margin": MARGIN, "seeds": n_drop,
                            "arms": "sync, stale, stale + decoupled_ppo, stale + gac",
                            "cpu_hours": cost(n_drop, 4, steps)}  # fmt: skip
    sync_sd, sync_df = pooled_sd(cos["sync"])
    stale_sd, stale_df = pooled_sd(cos["stale"])
    mean = {arm: float(at_pair[(cos_column, arm)].mean()) if arm in arms else math.nan for arm in ("sync", "stale")}
    n_sync = seeds_needed(sync_sd, BAND - abs(mean["sync"]))
    n_stale = seeds_needed(stale_sd, mean["stale"] - BAND)
    n_gac = None if n_sync is None or n_stale is None else max(n_sync, n_stale)
    # the seeds that decide the stale part either way (its interval clear of the band's edge, above or below)
    n_either = seeds_needed(stale_sd, abs(mean["stale"] - BAND))
    n_gac_either = None if n_sync is None or n_either is None else max(n_sync, n_either)
    registered = {arm: gac1_seeds(mean[arm], sd, arm) for arm, sd in (("sync", sync_sd), ("stale", stale_sd))}
    n_registered = None if None in registered.values() else max(registered.values())
    out["GAC-1"] = {"quantity": f"{cos_column} per seed (second half of the updates)", "mean": mean,
                    "registered_seeds": registered, "cpu_hours_registered": cost(n_registered, 2, steps),
                    "sd": {"sync": sync_sd, "stale": stale_sd}, "df": {"sync": sync_df, "stale": stale_df},
                    "seeds": {"sync": n_sync, "stale": n_stale}, "cpu_hours": cost(n_gac, 2, steps),
                    "seeds_either_way": {"sync": n_sync, "stale": n_either}, "cpu_hours_either_way": cost(n_gac_either, 2, steps),
                    "note": "planning spread at the pilot's minibatch (its sequences per optimizer step)",
                    "why": "no stale arm in the pilot" if "stale" not in arms else "a spread or margin is undefined"}  # fmt: skip
    by_seed = at.pivot_table(index="seed", columns="arm", values="accuracy") if len(at) else None
    out["stale_drops"] = ([float(a - b) for a, b in zip(by_seed["sync"], by_seed["stale"], strict=True)
                           if math.isfinite(a - b)] if by_seed is not None and "stale" in by_seed else [])  # fmt: skip
    events, stale_runs = 0, 0
    for _, g in at.groupby("seed"):
        arms = {r.arm: collapsed(_evals(updates, r.key)) or bool(r.diverged) for r in g.itertuples()}
        if "stale" in arms:
            stale_runs += 1
            events += int(arms["stale"] and not arms.get("sync", False))
    if stale_runs:
        rate = events / stale_runs
        bound = clopper_pearson(events, stale_runs, 0.90)[1]  # one-sided 95% upper limit
        runs_needed = math.ceil(MIN_COLLAPSES / rate) if events else math.ceil(MIN_COLLAPSES / bound)
    else:
        rate, bound, runs_needed = math.nan, math.nan, None
    out["VCPO-1"] = {"quantity": "staleness-caused collapses per stale run (paired sync run without collapse)",
                     "events": events, "stale_runs": stale_runs, "rate": rate, "rate_upper_95": bound,
                     "min_collapses": MIN_COLLAPSES, "stale_runs_needed": runs_needed,
                     "needed_is_lower_bound": events == 0, "cpu_hours": cost(runs_needed, 2, steps),
                     "why": "no stale arm in the pilot" if not stale_runs else ""}  # fmt: skip
    return out


def choose_lag(base: Path, lag_pilots: list[Path], min_drop: float = MARGIN) -> dict[str, Any]:
    """The lag of AREAL-1 and GAC-2 by the pocket LM's registered rule (sweeps/llm/pocket_prereg.toml
    [claims.AREAL-1] lag; the second registration's asks ``min_drop`` = 2 x `MARGIN`): the smallest eta whose mean
    paired drop (sync score - stale score, naive GRPO, by seed) is at least ``min_drop``, at the setting ``base``'s
    design.json chose (``base``: the pilot with the sync arm, whose stale arm is one lag; ``lag_pilots``: stale-only
    pilots at other lags, the same setting and seeds). Reads the baseline alone. ``eta`` None: no lag degrades naive
    GRPO by ``min_drop``."""
    import numpy as np
    import pandas as pd

    chosen = json.loads((base / "design.json").read_text())
    cell, lr = chosen.get("chosen_cell") or "", chosen["chosen_lr"]
    frames = [_with_cell(pd.read_csv(d / "runs.csv")) for d in [base, *lag_pilots]]
    runs = pd.concat(frames, ignore_index=True)
    at = runs[(runs["cell"].fillna("") == cell) & (runs["lr"] == lr) & runs["finished"].astype(bool)]
    sync = at[at["arm"] == "sync"].groupby("seed")["accuracy"].mean()
    per_eta = {}
    for eta, g in at[at["arm"] == "stale"].groupby("eta"):
        stale = g.groupby("seed")["accuracy"].mean()
        seeds = sorted(set(stale.index) & set(sync.index))
        drops = [float(sync[s] - stale[s]) for s in seeds]
        per_eta[int(eta)] = {"seeds": seeds, "drops": drops, "mean_drop": sum(drops) / len(drops) if drops else math.nan}
    eta = next((e for e in sorted(per_eta) if per_eta[e]["mean_drop"] >= min_drop), None)
    power: dict[str, Any] = {}
    if eta is not None:  # AREAL-1 / GAC-2's registered power at that lag (as `design`'s, from these drops)
        from testbed.util.stats import seeds_needed

        drops, p = per_eta[eta]["drops"], float(sync.mean())
        pilot_sd = float(np.std(drops, ddof=1)) if len(drops) > 1 else math.nan
        problems = int(json.loads((base / "study.json").read_text()).get("eval_problems", 512))
        floor = binomial_diff_sd(p, p, problems)
        sd = max(pilot_sd, floor) if math.isfinite(pilot_sd) else floor
        power = {"pilot_sd": pilot_sd, "binomial_floor_sd": floor, "sd": sd, "seeds": seeds_needed(sd, MARGIN),
                 "arms": "sync, stale, stale + decoupled_ppo, stale + gac"}
    return {"setting": {"cell": cell, "lr": lr}, "margin": MARGIN, "min_drop": min_drop, "per_eta": per_eta, "eta": eta,
            "power": power,
            "reading": (f"naive GRPO degrades by at least {min_drop:g} at eta = {eta}" if eta is not None else
                        f"not testable on the pocket LM: naive GRPO does not degrade by {min_drop:g} at any lag tried "
                        f"({', '.join(str(e) for e in sorted(per_eta))})"),
            "pilots": [str(base), *map(str, lag_pilots)]}


def gac1_seeds(mean: float, sd: float, arm: str, low: int = 3, cap: int = 10) -> int | None:
    """Seeds per arm for GAC-1 by the pocket LM's registered rule (sweeps/llm/pocket_prereg.toml [claims.GAC-1]):
    min(cap, max(low, seeds_needed(sd, |mean - edge|))), the edge that of the arm's part nearest its mean (sync: the
    band's -`BAND` or +`BAND`; stale: +`BAND`), so that the part is decided either way at the pilot's distance; at the
    cap when the distance needs more (or the mean sits on the edge); None when the mean or spread is undefined."""
    from testbed.util.stats import seeds_needed

    if not (math.isfinite(mean) and math.isfinite(sd)):
        return None
    edge = BAND if arm == "stale" or mean >= 0 else -BAND
    n = seeds_needed(sd, abs(mean - edge)) if mean != edge else None
    return cap if n is None else min(cap, max(low, n))
