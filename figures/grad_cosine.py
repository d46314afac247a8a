"""Consecutive-gradient cosine over training, sync vs delays, with and without gac, on MNIST and on
token reversal (GAC-1, GAC-2; the quadratic is in quadratic_gac).

``grad_cos_prev`` is the cosine between this step's raw surrogate gradient and the previous step's
(testbed/diagnostics.py), logged every ``log_every`` steps. Right panel: final MNIST test error of
gac against pg at each delay, with pg's synchronous error as the reference GAC-2 names.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, final_values, seed_matrix, smooth_rows

NAME = "grad_cosine"
CLAIMS = ("GAC-1", "GAC-2")
CHANCE = 0.9


def configs(quick: bool) -> list:
    return suites.mnist_delay(quick, ("pg", "gac")) + suites.token_gac(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    mn = ctx.table(suites.mnist_delay(ctx.quick, ("pg", "gac")))
    tr = ctx.table(suites.token_gac(ctx.quick))
    fig, axes = style.subplots(4, ncols=4, width=3.2, height=2.9)
    ev: dict = {"mnist": {}, "token": {}, "mnist_error": {}}
    for ax, (table, delays, key, title) in zip(axes[:3], (
            (mn, s.mnist_delays, "mnist", "MNIST, pg"),
            (mn, s.mnist_delays, "mnist", "MNIST, gac"),
            (tr, s.tr_gac_delays, "token", f"token reversal H={s.tr_H}, pg")), strict=True):
        recipe = "gac" if "gac" in title else "pg"
        for j, d in enumerate(delays):
            x, ys = curves(table, "grad_cos_prev", recipe=recipe, delay=d)
            if not len(x):
                continue
            c = style._EXTRA[j] if d != "sync" else "#000000"
            style.band(ax, x, smooth_rows(ys), color_=c, label_=f"D = {suites.lag_of(d)}")
            with np.errstate(all="ignore"):
                ev[key][f"{recipe}|{d}"] = np.nanmean(ys, axis=1).tolist()
        ax.axhline(0, color="k", lw=0.5)
        ax.set_xlabel("learner step")
        ax.set_ylabel("cos(g_t, g_{t-1})")
        ax.set_title(title)
        ax.legend()
    # token reversal: gac vs pg mean cosine, recorded for the report
    for d in s.tr_gac_delays:
        x, ys = curves(tr, "grad_cos_prev", recipe="gac", delay=d)
        if len(x):
            with np.errstate(all="ignore"):
                ev["token"][f"gac|{d}"] = np.nanmean(ys, axis=1).tolist()
        ev.setdefault("token_error", {})
        for r in ("pg", "gac"):
            ev["token_error"][f"{r}|{d}"] = final_values(tr, "test_error", 1.0, recipe=r, delay=d).tolist()
    ax = axes[3]
    lags = [suites.lag_of(d) for d in s.mnist_delays]
    for r in ("pg", "gac"):
        vals = [final_values(mn, "test_error", CHANCE, recipe=r, delay=d) for d in s.mnist_delays]
        arr = seed_matrix(vals)
        style.band(ax, lags, arr, name=r, marker="o")
        for j, d in enumerate(s.mnist_delays):
            ev["mnist_error"][f"{r}|{d}"] = arr[:, j].tolist()
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels([str(v) for v in lags])
    ax.set_xlabel("actor delay D (learner steps)")
    ax.set_ylabel("final MNIST test error")
    ax.set_title("gac vs pg under delay")
    ax.legend()
    cap = style.caption_text(CLAIMS, "raw-gradient cosine between consecutive learner steps (3-point smoothing); "
                             "mean +- s.e. over seeds; gac = testbed defaults (t_low 0.2, t_high 0.9)", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    ev["mnist_delays"] = list(s.mnist_delays)
    ev["token_delays"] = list(s.tr_gac_delays)
    return {"GAC-1": ev, "GAC-2": ev}
