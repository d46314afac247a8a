"""ESS and gradient-norm traces before a collapse, and VCPO's learning-rate scale at growing lag
(VCPO-1, VCPO-2).

From the MNIST delay sweep. ``ess`` is the normalised effective sample size of the behaviour ratios
pi_theta / mu of the batch; ``grad_norm`` the raw surrogate gradient norm; ``lr_scale`` the factor
VCPO's ess_lr applied. A run *collapses* when its test error rises more than 0.2 above its running
minimum (or it diverges); the collapse step is the first logged step where that happens.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, final_values, runs_of, seed_matrix

NAME = "vcpo_traces"
CLAIMS = ("VCPO-1", "VCPO-2")
CHANCE = 0.9
RISE = 0.2
WINDOW = 3  # logged steps before the collapse examined for the precursors


def configs(quick: bool) -> list:
    return suites.mnist_delay(quick)


def collapse_step(run) -> int | None:
    """Index (into the run's logged rows) of the collapse, or None."""
    if run["status"].iloc[0] == "diverged":
        return len(run) - 1
    err = run["test_error"].to_numpy(dtype=float)
    best = np.fmin.accumulate(np.where(np.isfinite(err), err, np.inf))
    hit = np.flatnonzero(err > best + RISE)
    return int(hit[0]) if len(hit) else None


def precursors(run, idx: int) -> dict:
    """Did ESS drop (< half its earlier median) and the grad norm spike (> twice its earlier median)
    within the WINDOW logged steps up to ``idx``?"""
    ess = run["ess"].to_numpy(dtype=float)
    gn = run["grad_norm"].to_numpy(dtype=float)
    lo = max(0, idx - WINDOW)
    before_e, before_g = ess[:lo], gn[:lo]
    win_e, win_g = ess[lo: idx + 1], gn[lo: idx + 1]
    win_e, win_g = win_e[np.isfinite(win_e)], win_g[np.isfinite(win_g)]
    if lo < 2 or not len(win_e) or not len(win_g):
        return {"ess_drop": False, "grad_spike": False, "enough_history": False}
    return {"ess_drop": bool(win_e.min() < 0.5 * np.nanmedian(before_e)),
            "grad_spike": bool(win_g.max() > 2.0 * np.nanmedian(before_g)), "enough_history": True}


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    fig, axes = style.subplots(4, ncols=4, width=3.2, height=2.9)
    delays = s.mnist_delays
    for j, d in enumerate(delays):
        c = style._EXTRA[j] if d != "sync" else "#000000"
        lab = f"D = {suites.lag_of(d)}"
        for ax, (metric, recipe) in zip(axes[:3], (("ess", "is"), ("grad_norm", "is"), ("lr_scale", "vcpo")), strict=True):
            x, ys = curves(table, metric, recipe=recipe, delay=d)
            if len(x):
                style.band(ax, x, ys, color_=c, label_=lab)
    axes[0].set_ylabel("ESS / B of behaviour ratios")
    axes[0].set_title("exact IS: effective sample size")
    axes[1].set_ylabel("raw gradient norm")
    axes[1].set_yscale("log")
    axes[1].set_title("exact IS: gradient norm")
    axes[2].set_ylabel("lr scale applied by ess_lr")
    axes[2].set_title("VCPO: learning-rate scale")
    for ax in axes[:3]:
        ax.set_xlabel("learner step")
        ax.legend()
    # collapses across the whole sweep (every recipe and delay)
    events, quiet = [], []
    for (recipe, delay, seed), run in table.groupby(["recipe", "delay", "seed"], sort=False):
        run = run.sort_values("step")
        idx = collapse_step(run)
        if idx is not None:
            p = precursors(run, idx)
            events.append({"recipe": recipe, "delay": delay, "seed": int(seed), "step": float(run["step"].iloc[idx]), **p})
            axes[0].plot([run["step"].iloc[idx]], [0.02], "v", color=style.color(recipe), markersize=4)
        elif len(run) > WINDOW + 3:
            # base rate: the same test at the last logged step of runs that did not collapse
            quiet.append({"recipe": recipe, "delay": delay, "seed": int(seed), **precursors(run, len(run) - 1)})
    ax = axes[3]
    lags = [suites.lag_of(d) for d in delays]
    ev2: dict = {"delays": list(delays), "error": {}}
    for r in ("vcpo", "pg", "is"):
        vals = [final_values(table, "test_error", CHANCE, recipe=r, delay=d) for d in delays]
        arr = seed_matrix(vals)
        style.band(ax, lags, arr, name=r, marker="o")
        for j, d in enumerate(delays):
            ev2["error"][f"{r}|{d}"] = arr[:, j].tolist()
            sub = runs_of(table, recipe=r, delay=d)
            ev2.setdefault("diverged", {})[f"{r}|{d}"] = int((sub.groupby("seed")["status"].first() == "diverged").sum()) if len(sub) else 0
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels([str(v) for v in lags])
    ax.set_xlabel("actor delay D (learner steps)")
    ax.set_ylabel("final MNIST test error")
    ax.set_title("VCPO across lag")
    ax.legend()
    cap = style.caption_text(CLAIMS, f"MNIST delay sweep; triangles on the ESS panel: collapse steps of any run "
                             f"(error > running min + {RISE}, or divergence); mean +- s.e. over seeds", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"VCPO-1": {"events": events, "quiet": quiet}, "VCPO-2": ev2}
