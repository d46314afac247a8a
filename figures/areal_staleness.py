"""Naive PPO vs AReaL's decoupled PPO across the maximum staleness eta (AREAL-1).

Actors run ahead of the learner under AReaL's admission rule (``bounded:eta``, actors twice as fast
as the learner, so the lag sits at eta). Naive ``ppo`` clips the ratio to the behaviour policy;
``decoupled_ppo`` clips against the proximal (current) policy and corrects with the capped
behaviour weight pi_prox / mu.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, final_values, seed_matrix

NAME = "areal_staleness"
CLAIMS = ("AREAL-1",)
CHANCE = 0.9


def configs(quick: bool) -> list:
    return suites.areal(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    etas = list(s.areal_etas)
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    ev: dict = {"etas": etas, "error": {}}
    for r in ("ppo", "decoupled_ppo"):
        vals = [final_values(table, "test_error", CHANCE, recipe=r, delay=f"bounded:{e}") for e in etas]
        arr = seed_matrix(vals)
        style.band(ax, etas, arr, name=r, marker="o")
        for j, e in enumerate(etas):
            ev["error"][f"{r}|{e}"] = arr[:, j].tolist()
        x, ys = curves(table, "test_error", recipe=r, delay=f"bounded:{etas[-1]}")
        if len(x):
            style.band(ax2, x, ys, name=r)
        x, ys = curves(table, "clip_frac", recipe=r, delay=f"bounded:{etas[-1]}")
        if len(x):
            ev[f"clip_frac|{r}"] = np.nanmean(ys, axis=1).tolist()
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(etas)
    ax.set_xticklabels([str(e) for e in etas])
    ax.set_xlabel("maximum staleness eta (versions)")
    ax.set_ylabel("final MNIST test error")
    ax.set_title("AReaL admission rule")
    ax.legend()
    ax2.set_xlabel("learner step")
    ax2.set_ylabel("test error (fraction)")
    ax2.set_ylim(0, 1)
    ax2.set_title(f"learning curves at eta = {etas[-1]}")
    cap = style.caption_text(CLAIMS, f"MNIST bandit, bounded:eta (speed 2); mean +- s.e. over {len(s.seeds)} seed(s)",
                             ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"AREAL-1": ev}
