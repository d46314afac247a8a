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
import sys
from pathlib import Path
from typing import Any

from testbed.util.endpoints import last_mean, second_half_mean
from testbed.util.files import atomic_write_frame, atomic_write_text
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


def _late_cos(directory: Path, column: str = "grad_cos_within") -> float:
    """The second-half mean (`testbed.util.endpoints.second_half_mean`, the study's window) of ``column``
    (``grad_cos_within``: the study's quantity; ``grad_cos_across``: consecutive updates') in a run's metrics.csv;
    NaN when the file or the column is missing."""
    import pandas as pd

    try:
        table = pd.read_csv(directory / "metrics.csv")
    except (OSError, ValueError):
        return math.nan
    return second_half_mean(table[column]) if column in table else math.nan


def load_pilot(sweep_file: str) -> tuple[Any, list[dict[str, Any]], str]:
    """(the study's sweep, the pilot's cells, its choice rule) of a pilot file: a study sweep file (`study.load_sweep`)
    with an optional ``[pilot]`` table: ``cells``, each a ``name``, its learning rates ``lr`` and the [train]
    settings it overrides, and ``choose`` (`choose_lr`). Without one: one cell named "" at the sweep's learning
    rates, chosen by "largest_lr". A bad file: `UsageError`, one line."""
    from .config import TrainConfig, UsageError
    from .study import load_sweep, read_tables

    raw = read_tables(sweep_file)
    pilot = raw.pop("pilot", None)
    sweep = load_sweep(sweep_file, raw)
    if pilot is None:
        return sweep, [{"name": "", "lr": list(sweep.lrs)}], "largest_lr"
    if not isinstance(pilot, dict):
        raise UsageError(f"pocket pilot: {sweep_file}: [pilot] must be a table, got {pilot!r}")
    cells, choose = list(pilot.get("cells", [])), str(pilot.get("choose", "largest_gain"))
    fields = set(TrainConfig.__dataclass_fields__)
    for cell in cells:
        bad = sorted(set(cell) - {"name", "lr"} - fields)
        if bad or not cell.get("name") or not cell.get("lr"):
            raise UsageError(f"pocket pilot: {sweep_file}: a [pilot] cell needs a name, lr and TrainConfig settings, got {cell}")
    if not cells or choose not in ("largest_lr", "largest_gain"):
        raise UsageError(f"pocket pilot: {sweep_file}: [pilot] needs cells and choose in largest_lr, largest_gain")
    return sweep, cells, choose


def pilot_plan(sweep: Any, cells: list[dict[str, Any]], arms: tuple[str, ...], only: tuple[str, float] | None = None
               ) -> list[tuple[Any, Any, dict[str, Any], float, bool]]:
    """The pilot's runs, seed-major (seed, cell, learning rate, arm: an interrupted pilot has its arms balanced by
    seed), each as (run, the cell's sweep, cell, lr, chosen): the study's run (`study.make_run`, at the sweep's first
    eta) of the sweep with the cell's [train] overrides; ``chosen`` False where ``only`` (cell, lr) names another
    setting."""
    import dataclasses

    from .study import make_run

    planned = []
    for seed in sweep.search_seeds:
        for cell in cells:
            settings = {k: v for k, v in cell.items() if k not in ("name", "lr")}
            at = dataclasses.replace(sweep, train={**sweep.train, **settings})
            for lr in cell["lr"]:
                chosen = only is None or (cell["name"], float(lr)) == (only[0], float(only[1]))
                planned += [(make_run(at, "search", arm, sweep.etas[0], float(lr), seed), at, cell, float(lr), chosen)
                            for arm in arms]  # fmt: skip
    return planned


def run_pilot(sweep_file: str, runs: Path, out: Path, arms: tuple[str, ...], log: Any = print, start: bool = True,
              only: tuple[str, float] | None = None, parallel: int = 1) -> None:
    """Run the pilot's ``arms`` (the study's runs of ``sweep_file``'s cells, `load_pilot`; same keys and directories
    as the study's; finished ones are kept) seed by seed across the cells and learning rates, ``parallel`` at a
    time (the study's scheduler, `study.execute`: an interrupted run resumes from its last checkpoint, one begun or
    finished by code that has changed since is trained afresh), then write
    ``out``/runs.csv, updates.csv and study.json in the study's columns (and the cell's). An arm is sync, stale
    or a recipe of the file's ``[compare] recipes`` (trained stale, at the file's first eta). ``start`` False:
    tabulate what has finished, start nothing (a run not finished is a row with ``finished`` False). ``only``
    (cell, lr): start runs of that setting alone (every setting's finished runs are tabulated)."""
    import pandas as pd

    from .config import UsageError
    from .study import STALE, SYNC, execute, late_split_half_cosine, run_result, run_updates

    sweep, cells, choose = load_pilot(sweep_file)
    bad = [a for a in arms if a not in (SYNC, STALE, *sweep.recipes)]
    if bad:
        raise UsageError(f"pocket pilot: arm {bad[0]!r} is neither sync, stale nor one of {sweep_file}'s [compare] "
                         f"recipes {list(sweep.recipes)}")  # fmt: skip
    planned = pilot_plan(sweep, cells, arms, only)
    if start:
        execute([run for run, *_, chosen in planned if chosen], runs, budget_s=math.inf, parallel=parallel,
                device=None, log=sys.stdout)  # fmt: skip
    rows, ups = [], []
    for run, at, cell, lr, chosen in planned:
        d = runs / run.key
        summary = json.loads((d / "summary.json").read_text()) if (d / "summary.json").is_file() else {}
        done = run_result(d, recipe=run.recipe) is not None  # the study's test: finished by the code as it is now
        if not done and not chosen:
            continue  # a setting this invocation does not run: no row
        trajectory = run_updates(d) if done else []
        evals = [r["eval_reward"] for r in trajectory if math.isfinite(r["eval_reward"])]
        n = sweep.last_evals
        rows.append({"key": run.key, "stage": "search", "cell": cell["name"], "arm": run.arm, "eta": sweep.etas[0],
                     "lr": lr, "seed": run.seed, "sequences": at.train.get("prompts_per_step", 8) * at.train.get("group_size", 8),
                     "finished": done, "accuracy": last_mean(evals, n, min_count=n + 1),
                     "diverged": summary.get("status") == "diverged", "accuracy_v0": evals[0] if evals else math.nan,
                     "wall_seconds": summary.get("wall_seconds", math.nan), "late_grad_cos_within": _late_cos(d),
                     "late_grad_cos_across": _late_cos(d, "grad_cos_across"),
                     "late_grad_cos_split_half": late_split_half_cosine(d / "grad_steps.csv")})  # fmt: skip
        ups += [{"key": run.key, **r} for r in trajectory]
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_frame(pd.DataFrame(rows), out / "runs.csv")
    atomic_write_frame(pd.DataFrame(ups), out / "updates.csv")
    atomic_write_text(out / "study.json", json.dumps({"sweep": sweep_file, "arms": list(arms), "eval_problems": sweep.eval_problems,
                                                "rule": {"last_evals": sweep.last_evals}, "choose": choose,
                                                "cells": cells}, indent=1) + "\n")  # fmt: skip


def diagnose(models: list[str], base: str = "pocket-arithmetic", problems: int = 256, sampled: int = 64,
             group: int = 8, seed: int = 0) -> dict[str, dict[str, Any]]:
    """What GRPO changed in a pocket LM: per model (``base`` itself first, then each of ``models``, e.g. a run's
    ``final`` directory), on ``problems`` held-out problems (the trainer's evaluation stream of ``seed``) at the
    trainer's completion budget:

    * greedy accuracy, overall and on the build's known / unknown operand pairs (`llm_scale.pocket.known_pairs`),
      the share of greedy completions cut by the budget and the share that write the asked equation at all
      (`llm_scale.tasks.equation_answer` not None) and of those that write it with a wrong result;
    * on the first ``sampled`` problems, ``group`` samples each at temperature 1 (the rollouts' distribution):
      accuracy (known / unknown), truncation, mean length, the share writing the asked equation, the share of
      groups whose rewards are all equal (zero advantage), the mean per-token entropy of the model and the
      mean per-token KL(model || base) on its own samples (sum over the vocabulary, exact).
    """
    import torch

    from .generation import sample_completions
    from .models import load_policy, stop_ids
    from .pocket import POCKET_MODELS, known_pairs
    from .sampler import Sampler
    from .tasks import build_task, completion_budget, equation_answer

    torch.set_num_threads(1)
    spec = POCKET_MODELS[base]
    task = build_task(spec.task)
    known = known_pairs(spec)
    ref, tok = load_policy(base)
    budget = completion_budget(task, "chat", tok, seed=seed)
    smp = Sampler(task, tok, "chat", seed, sampled, group, budget, eos_ids=stop_ids(ref, tok))
    held = smp.eval_problems(problems)

    def texts(ids: Any, mask: Any) -> list[str]:
        return tok.batch_decode([ids[i][mask[i]].tolist() for i in range(ids.shape[0])], skip_special_tokens=True)

    def share(flags: list[bool], within: list[bool] | None = None) -> float:
        sel = [f for f, w in zip(flags, within or [True] * len(flags), strict=True) if w]
        return sum(sel) / len(sel) if sel else math.nan

    def stats(probs: list[Any], outs: list[str], lengths: list[int]) -> dict[str, float]:
        right = [task.reward(p, t) > 0 for p, t in zip(probs, outs, strict=True)]
        is_known = [(p.meta["a"], p.meta["op"], p.meta["b"]) in known for p in probs]
        eq = [equation_answer(t, p.meta["a"], p.meta["op"], p.meta["b"]) is not None for p, t in zip(probs, outs, strict=True)]
        return {"accuracy": share(right), "accuracy_known": share(right, is_known),
                "accuracy_unknown": share(right, [not k for k in is_known]), "known_share": share(is_known),
                "truncated": share([n >= budget for n in lengths]), "length_mean": sum(lengths) / len(lengths),
                "writes_equation": share(eq), "equation_wrong": share([e and not r for e, r in zip(eq, right, strict=True)])}  # fmt: skip

    out: dict[str, dict[str, Any]] = {}
    for name in [base, *models]:
        model = ref if name == base else load_policy(name)[0]
        model.eval()
        chunks = smp.greedy(model, held, 64)
        outs = [t for _, ids, mask in chunks for t in texts(ids, mask)]
        lengths = [int(n) for _, _, mask in chunks for n in mask.sum(1)]
        row: dict[str, Any] = {f"greedy_{k}": v for k, v in stats(held, outs, lengths).items()}
        sub = held[:sampled]
        pid, pm = smp.encode(sub, group, torch.device("cpu"))
        with torch.no_grad():
            ids, mask, _, _ = sample_completions(model, pid, pm, max_new_tokens=budget, temperature=1.0, eos_ids=smp.eos_ids,
                                                 pad_id=smp.pad_id, generator=torch.Generator().manual_seed(seed))  # fmt: skip
            full, att = torch.cat([pid, ids], 1), torch.cat([pm, mask], 1).long()
            cut = slice(pid.shape[1] - 1, -1)
            lp = torch.log_softmax(model(full, attention_mask=att).logits[:, cut].float(), -1)
            lq = torch.log_softmax(ref(full, attention_mask=att).logits[:, cut].float(), -1)
        probs = [p for p in sub for _ in range(group)]
        row.update({f"sampled_{k}": v for k, v in stats(probs, texts(ids, mask), [int(n) for n in mask.sum(1)]).items()})
        rewards = torch.tensor([task.reward(p, t) for p, t in zip(probs, texts(ids, mask), strict=True)]).view(len(sub), group)
        m = mask.float()
        row["sampled_zero_advantage_groups"] = float((rewards.std(1) == 0).float().mean())
        row["entropy_per_token"] = float(((-(lp.exp() * lp).sum(-1)) * m).sum() / m.sum())
        row["kl_to_base_per_token"] = float((((lp.exp() * (lp - lq)).sum(-1)) * m).sum() / m.sum())
        cfg = Path(name).parent / "config.json"  # a run's final directory: the run's settings beside its numbers
        if cfg.is_file():
            run = json.loads(cfg.read_text())
            run = run.get("config", run) if isinstance(run, dict) else {}
            row["run"] = {k: run.get(k) for k in ("recipe", "mode", "lr", "prompts_per_step", "group_size", "minibatches",
                                                  "steps", "seed", "max_staleness")}  # fmt: skip
        out[name] = row
    return out


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

        from .config import UsageError

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
        if set(arms) - {"sync", "stale"}:  # recipes: a comparison, judged by figures/llm_column.py, not a pilot
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


if __name__ == "__main__":
    raise SystemExit(main())
