"""Consecutive-gradient cosine on a noisy quadratic, sync vs delays, with and without the GAC projection
(GAC-1, GAC-2, background).

f(x) = lambda/2 ||x||^2 in d dimensions, gradient lambda x + sigma n, SGD with step a = eta lambda;
with delay tau the learner applies the gradient computed at x_{t-tau} (the recurrence of
theory/delayed_optimization.py, result 2, whose exact stationary values are the dotted lines). The
transform is the testbed's own ``gac_projection`` object applied through ``Recipe.step`` as the
runner does (the simulation: figures/experiments/delayed_sgd/evidence.py, `simulate_gac`). Panel 1: cosine between consecutive raw gradients (GAC's signal); panel 2: f(x_t).
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, smooth_rows
from figures.experiments import delayed_sgd as exp
from figures.experiments.delayed_sgd.evidence import autocorr, quadratic_name, quadratic_runs
from figures.experiments.delayed_sgd.settings import A_STEP, QUAD_TAUS

NAME = "quadratic_gac"
CLAIMS = ("GAC-1", "GAC-2")


def configs(quick: bool) -> list:
    return []


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    steps = b.quadratic_steps
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    x = np.arange(1, steps + 1)
    runs = quadratic_runs(steps, tuple(b.quadratic_seeds))
    for i, tau in enumerate(QUAD_TAUS):
        for use_gac in (False, True):
            raw, loss = runs[quadratic_name(tau, use_gac)]
            c = style.level_color(i, sync=tau == 0)
            ls = "--" if use_gac else "-"
            name = quadratic_name(tau, use_gac)
            style.band(ax, x, smooth_rows(raw, 9), color_=c, label_=name, linestyle=ls)
            style.band(ax2, x, loss, color_=c, label_=name, linestyle=ls)
    for tau in QUAD_TAUS:
        ax.axhline(autocorr(A_STEP, tau), color="#999999", lw=0.6, ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel("cos(g_t, g_{t-1}) of raw gradients")
    ax.set_title(f"quadratic, a = {A_STEP}; dotted: exact stationary value")
    ax.legend(ncol=2, fontsize=6, loc="upper right")
    ax2.set_yscale("log")
    ax2.set_xlabel("step")
    ax2.set_ylabel("f(x_t) = lambda ||x||^2 / 2")
    ax2.set_title("objective")
    cap = style.caption_text(CLAIMS, f"d=100 quadratic, SGD a={A_STEP}, gradient applied tau steps late; gac = the "
                             "testbed's gac_projection (defaults); mean +- s.e. over seeds", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
