"""Rescuing a degraded GRPO base in the async-GRPO regime: GAC (GAC-2) and AReaL's decoupled PPO (AREAL-1).

Final MNIST test error of naive grpo, gac (grpo + the projection) and decoupled_ppo at sync and at the
regime's staleness levels (testbed/regimes.py), with grpo's synchronous error as the reference the
claims name, and the learning curves at the largest staleness level.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.budgets import lag_of
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import async_grpo as exp
from figures.experiments.async_grpo.settings import cell

NAME = "async_grpo"
CLAIMS = ("GAC-2", "AREAL-1")
SHOWN = ("grpo", "gac", "decoupled_ppo")
# AREAL-1 (AIME24 accuracy, eta = 4): sync 42.0, naive 23.3, decoupled 42.2, as error ratios to sync's error 58.0
PAPER_RATIO = {"grpo": (100 - 23.3) / (100 - 42.0), "decoupled_ppo": (100 - 42.2) / (100 - 42.0)}


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    levels = ev.levels
    lags = [lag_of(d) for d in levels]
    fig, (ax, ax2) = style.subplots(2, width=4.0, height=3.2)
    per_seed = {}
    for r in SHOWN:
        vals = per_seed[r] = np.stack([arr(ev.error[(r, d)]) for d in levels], axis=1)
        style.band(ax, lags, vals, name=r, marker="o")
        style.seed_dots(ax, lags, vals, name=r)
        x, ys = curves(table, cell(b, r, levels[-1]), "test_error")
        if len(x):
            style.band(ax2, x, ys, name=r)
    sync = np.nanmean(arr(ev.error[("grpo", "sync")]))
    for r, ratio in PAPER_RATIO.items():  # AREAL-1's numbers as error ratios to sync, at the largest level
        style.paper_star(ax, lags[-1], sync * ratio, name=r)
    for a in (ax, ax2):
        a.axhline(sync, color="k", ls=":", lw=0.8, label="grpo sync" if a is ax else None)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels(["sync" if d == "sync" else d.split(":")[1] for d in levels], fontsize=6)
    ax.set_xlabel("staleness (bounded:eta,speed)")
    ax.set_ylabel("final MNIST test error")
    ax.set_title("async-GRPO regime")
    ax.legend(fontsize=6)
    ax2.set_xlabel("learner batch")
    ax2.set_ylabel("test error (fraction)")
    ax2.set_title(f"learning curves at {levels[-1]}")
    tag = "" if ev.registered else " [provisional regime settings]"
    settings = ", ".join(f"{k}={v}" for k, v in ev.regime.items())
    cap = style.caption_text(CLAIMS, f"MNIST bandit, async-GRPO regime ({settings}){tag}; mean +- s.e. over "
                             f"{style.seed_note(len(b.async_seeds), per_seed)}; dots: seeds; learning curves: the first "
                             "look's seeds; dotted: grpo at sync; stars: AReaL's AIME24 numbers at eta = 4 as "
                             "error ratios to sync, times grpo's sync error here", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
