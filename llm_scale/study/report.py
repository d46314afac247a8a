"""The study's state and tables: what has finished and what the rules read from it (`collect`), the tables and
figure (`write_report`), the terminal summary (`format_report`) and the cost of a planned study (`plan_cost`)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import testbed.util.stats as stats
from testbed.util.files import atomic_write_text

from ..config import TrainConfig, UsageError
from .rules import degrades, holm_cells, promotion
from .runs import UPDATE_COLUMNS, run_result, run_updates
from .sweep import STALE, SYNC, Run, Sweep, compare_runs, load_sweep, make_run, search_runs


@dataclass
class Report:
    search: list[dict[str, Any]] = field(default_factory=list)
    compare: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    cell: list[dict[str, Any]] = field(default_factory=list)  # the chosen cell's comparison runs, one per arm and seed
    updates: list[dict[str, Any]] = field(default_factory=list)  # per finished run and policy version (`run_updates`)
    chosen: dict[str, Any] | None = None
    forced: bool = False


def collect(sweep: Sweep, root: Path, force: tuple[int, float] | None = None) -> Report:
    """Read every finished run and apply the fixed rules."""
    rep = Report()
    results: dict[str, dict[str, Any] | None] = {}

    def result(run: Run) -> dict[str, Any] | None:
        if run.key not in results:
            results[run.key] = run_result(root / run.key, sweep.last_evals, run.recipe)
        return results[run.key]

    complete = True
    for eta in sweep.etas:
        for lr in sweep.lrs:
            accs: dict[str, dict[int, float]] = {SYNC: {}, STALE: {}}
            for seed in sweep.search_seeds:
                for arm in (SYNC, STALE):
                    r = result(make_run(sweep, "search", arm, eta, lr, seed))
                    if r is not None:
                        accs[arm][seed] = r["accuracy"]
            row = {"eta": eta, "lr": lr, **degrades(accs[SYNC], accs[STALE], sweep.min_drop, sweep.min_se,
                                                     sweep.eval_problems, sweep.alpha)}
            row["complete"] = row["n_sync"] == row["n_stale"] == len(sweep.search_seeds)
            complete &= row["complete"]
            rep.search.append(row)
    if sweep.alpha is not None:
        holm_cells(rep.search, sweep.alpha)
    first = next((r for r in rep.search if r["degrades"] and r["complete"]), None)
    if first is not None:
        rep.chosen = {"eta": first["eta"], "lr": first["lr"]}
    if first is not None and not complete:  # the first passing cell in order must not depend on unfinished ones
        earlier = rep.search[: rep.search.index(first)]
        if not all(r["complete"] for r in earlier):
            rep.chosen = None
    if rep.chosen is None and force is not None:
        rep.chosen, rep.forced = {"eta": force[0], "lr": force[1]}, True
    if rep.chosen is not None:
        eta, lr = rep.chosen["eta"], rep.chosen["lr"]
        per_arm: dict[str, list[float]] = {}
        fresh: dict[str, dict[int, float]] = {}  # the decision's accuracies: fresh seeds, a diverged run = 0
        for run in compare_runs(sweep, eta, lr):
            r = result(run)
            if r is not None:
                per_arm.setdefault(run.arm, []).append(r["accuracy"])
                if run.seed in sweep.fresh_seeds:
                    fresh.setdefault(run.arm, {})[run.seed] = 0.0 if r["diverged"] else r["accuracy"]
            rep.cell.append({"arm": run.arm, "seed": run.seed, "finished": r is not None,
                             "diverged": bool(r and r["diverged"]),
                             "accuracy": r["accuracy"] if r and math.isfinite(r["accuracy"]) else None})  # fmt: skip
        for arm in (SYNC, STALE, *sweep.recipes):
            m, se, n = stats.mean_se(per_arm.get(arm, []))
            row = {"arm": arm, "accuracy": m, "se": se, "n": n, "of": len(sweep.compare_seeds)}
            if arm not in (SYNC, STALE):
                row.update(promotion(fresh.get(SYNC, {}), fresh.get(STALE, {}), fresh.get(arm, {}),
                                     threshold=sweep.threshold, alpha=sweep.promote_alpha, min_seeds=sweep.min_seeds,
                                     gap_tol=sweep.gap_tol))  # fmt: skip
            rep.compare.append(row)
    runs = search_runs(sweep) + (compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"]) if rep.chosen else [])
    seen = set()
    for run in runs:
        if run.key in seen:
            continue
        seen.add(run.key)
        r = result(run)
        rep.runs.append({"key": run.key, "stage": run.stage, "arm": run.arm, "eta": run.eta, "lr": run.lr,
                         "seed": run.seed, "finished": r is not None, **(r or {})})  # fmt: skip
        if r is not None:
            rep.updates += [{"key": run.key, "arm": run.arm, "eta": run.eta, "lr": run.lr, "seed": run.seed,
                             "diverged": r["diverged"], **row} for row in run_updates(root / run.key)]  # fmt: skip
    return rep


def write_report(sweep: Sweep, rep: Report, out: Path, command: str) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rep.search).to_csv(out / "search.csv", index=False)
    pd.DataFrame(rep.compare).to_csv(out / "compare.csv", index=False)
    pd.DataFrame(rep.runs).to_csv(out / "runs.csv", index=False)
    pd.DataFrame(rep.updates, columns=["key", "arm", "eta", "lr", "seed", "diverged", "version", "eval_reward",
                                       *UPDATE_COLUMNS]).to_csv(out / "updates.csv", index=False)  # fmt: skip
    done = sum(r["finished"] for r in rep.runs)
    if rep.chosen is None:
        verdict = ("not testable in this grid: no cell degrades by the rule" if all(r["complete"] for r in rep.search)
                   else "search incomplete")  # fmt: skip
    else:
        verdict = ("comparison at a FORCED cell (the rule chose none): not a valid regime" if rep.forced
                   else "comparison at the first degrading cell")  # fmt: skip
    record = {
        "sweep": sweep.source, "rule": {"min_drop": sweep.min_drop, "min_se": sweep.min_se, "last_evals": sweep.last_evals,
                                        "alpha": sweep.alpha, "multiplicity": (f"Holm over the {len(rep.search)} cells" if sweep.alpha is not None
                                                                 else "none (the file fixes no [search] alpha)"),
                                        "order": "eta then lr, as listed; the first degrading cell"},
        "promotion_rule": {"statistic": "mean(recipe - stale) / mean(sync - stale), paired by seed",
                           "interval": "Fieller", "level": 1.0 - 2.0 * sweep.promote_alpha,
                           "threshold": sweep.threshold, "alpha": sweep.promote_alpha, "min_seeds": sweep.min_seeds,
                           "gap_tol": sweep.gap_tol, "seeds": list(sweep.fresh_seeds),
                           "promote": "lower end > threshold", "do not promote": "upper end < threshold",
                           "diverged run": "accuracy 0"},
        "promotions": {r["arm"]: {k: r[k] for k in ("verdict", "fraction_closed", "fraction_lo", "fraction_hi", "gap", "pairs")}
                       for r in rep.compare if "verdict" in r},
        "base": sweep.base, "recipes": list(sweep.recipes), "eval_problems": sweep.eval_problems,
        "chosen": rep.chosen, "forced": rep.forced, "verdict": verdict, "runs_finished": done, "runs_planned": len(rep.runs),
        "cell_runs": rep.cell, "command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    atomic_write_text(out / "study.json", json.dumps(record, indent=2, default=float))
    _figure(rep, out)


def _figure(rep: Report, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax = axes[0]
    labels = [f"eta {r['eta']}\nlr {r['lr']:g}" for r in rep.search]
    x = range(len(rep.search))
    for shift, arm, fmt, label in ((-0.1, "sync", "o", "sync"), (0.1, "stale", "s", "stale naive GRPO")):
        bars = ax.errorbar([i + shift for i in x], [r[f"{arm}_acc"] for r in rep.search], fmt=fmt, label=label,
                           capsize=3, yerr=[_finite(r[f"{arm}_se"]) for r in rep.search])  # fmt: skip
        for i, cell in enumerate(rep.search):  # each seed's run, so that a stalled seed shows as itself
            seeds = [r["accuracy"] for r in rep.runs if r["stage"] == "search" and r["arm"] == arm
                     and r["eta"] == cell["eta"] and r["lr"] == cell["lr"] and r["finished"]]  # fmt: skip
            ax.plot([i + 2 * shift] * len(seeds), seeds, fmt, color=bars[0].get_color(), alpha=0.4, markersize=4)
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_xlim(-0.5, len(rep.search) - 0.5)
    ax.set_ylabel("greedy accuracy\n(mean +- SE; faint: each seed)")
    ax.set_title("regime search")
    ax.legend(fontsize=8)
    ax = axes[1]
    if rep.compare:
        arms = [r["arm"] for r in rep.compare]
        ax.bar(range(len(arms)), [r["accuracy"] for r in rep.compare],
               yerr=[_finite(r["se"]) for r in rep.compare], capsize=3, color="tab:gray")  # fmt: skip
        ticks = [f"{r['arm']}\n(n={r['n']}/{r['of']})" for r in rep.compare]
        ax.set_xticks(range(len(arms)), ticks, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("greedy accuracy (mean +- SE over seeds)")
        ax.set_title("comparison" + (" (FORCED cell)" if rep.forced else ""))
    else:
        ax.text(0.5, 0.5, "no comparison: no cell chosen", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"study.{ext}", dpi=120)
    plt.close(fig)


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def format_report(rep: Report) -> str:
    lines = ["regime search (sync vs stale naive GRPO):"]
    for r in rep.search:
        level = "" if math.isnan(r["level"]) else f" (Holm level {r['level']:.3g})"
        lines.append(f"  eta {r['eta']:<3} lr {r['lr']:<8g} sync {r['sync_acc']:.3f} (n={r['n_sync']})  stale "
                     f"{r['stale_acc']:.3f} (n={r['n_stale']})  drop {r['drop']:+.3f} +- {r['drop_se']:.3f}  "
                     f"p {r['p_value']:.3g}{level}  "
                     f"{'DEGRADES' if r['degrades'] else 'no'}{'' if r['complete'] else ' (incomplete)'}")  # fmt: skip
    if rep.compare:
        lines.append("comparison" + (" at a FORCED cell (not a valid regime):" if rep.forced else ":"))
        for r in rep.compare:
            line = f"  {r['arm']:<18} acc {r['accuracy']:.3f} +- {r['se']:.3f} (n={r['n']}/{r['of']})"
            if "verdict" in r:
                line += "  " + format_promotion(r)
            lines.append(line)
    done = sum(r["finished"] for r in rep.runs)
    lines.append(f"runs finished: {done} of {len(rep.runs)} planned so far")
    return "\n".join(lines)


def plan_cost(sweep: Sweep, reference: str | Path, parallel: int) -> str:
    """The study's size and its device time estimated from another study's finished runs (``reference``: a runs.csv):
    every planned run (the whole search and one cell's comparison) takes the median wall time of the reference's
    finished runs, scaled by the ratio of updates (this sweep's ``steps`` over the reference sweep's, read from the
    reference's study.json), ``parallel`` at a time. One line; the reference's device is named."""
    import pandas as pd

    reference = Path(reference)
    try:
        table = pd.read_csv(reference)
        record = json.loads((reference.parent / "study.json").read_text())
        ref_steps = int(load_sweep(record["sweep"]).train.get("steps", TrainConfig.steps))
    except (OSError, ValueError, KeyError, UsageError) as exc:
        raise UsageError(f"study: --cost-from {str(reference)!r}: not a study's runs.csv beside its study.json ({exc})") from None
    done = table[table["finished"].astype(bool) & (table["wall_seconds"] > 0)]
    if done.empty:
        raise UsageError(f"study: --cost-from {str(reference)!r}: no finished run with a wall time")
    n_search = len({r.key for r in search_runs(sweep)})
    n_compare = len({r.key for r in compare_runs(sweep, sweep.etas[0], sweep.lrs[0])})
    steps = int(sweep.train.get("steps", TrainConfig.steps))
    per_run = float(done["wall_seconds"].median()) * steps / ref_steps
    hours = math.ceil((n_search + n_compare) / parallel) * per_run / 3600.0
    devices = ", ".join(sorted({str(d) for d in done.get("device_name", pd.Series(["?"])).dropna()}))
    return (f"planned runs: {n_search} search + {n_compare} comparison = {n_search + n_compare}; at {per_run:.0f} s per run "
            f"({len(done)} finished runs of {reference} on {devices}: median {done['wall_seconds'].median():.0f} s for "
            f"{ref_steps} updates, scaled to {steps}), {parallel} at a time: about {hours:.1f} device hours")  # fmt: skip


def format_promotion(r: dict[str, Any]) -> str:
    """One recipe's promotion as printed: the fraction of the gap closed, its interval and rule, and the verdict."""
    if r["verdict"] == "no gap to close":
        return (f"fraction closed nan: no gap to close (gap sync - stale {r['gap']:+.3f} over {r['pairs']} fresh seeds, "
                f"below {r['gap_tol']:g})")  # fmt: skip
    return (f"fraction closed {r['fraction_closed']:.2f} [{r['level']:.0%}: {r['fraction_lo']:.2f}, {r['fraction_hi']:.2f}] "
            f"of gap {r['gap']:+.3f} over {r['pairs']} fresh seeds -> {r['verdict'].upper()} (promote when the lower end "
            f"> {r['threshold']:g} with >= {r['min_seeds']} seeds)")  # fmt: skip
