"""ESS and gradient-norm traces before a collapse, and VCPO's learning-rate scale and error across lag
(VCPO-1, VCPO-2).

From the MNIST delay sweep (figures/experiments/mnist_delay/evidence.py). ``ess`` is the normalised effective
sample size of the behaviour ratios pi_theta / mu of the batch; ``grad_norm`` the raw surrogate
gradient norm; ``lr_scale`` the factor VCPO's ess_lr applied. A run *collapses* when its test error
rises more than 0.2 above its running minimum (or it diverges); triangles mark collapse steps.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.budgets import lag_of
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import mnist_delay as exp
from figures.experiments.mnist_delay.evidence import RISE
from figures.experiments.mnist_delay.settings import cell

NAME = "vcpo_traces"
CLAIMS = ("VCPO-1", "VCPO-2")


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    fig, axes = style.subplots(4, ncols=4, width=3.2, height=2.9)
    delays = ev.delays
    for j, d in enumerate(delays):
        c = style.level_color(j - 1, sync=d == "sync")
        for ax, (metric, recipe) in zip(axes[:3], (("ess", "is"), ("grad_norm", "is"), ("lr_scale", "vcpo")),
                                        strict=True):
            x, ys = curves(table, cell(b, recipe, d), metric)
            if len(x):
                style.band(ax, x, ys, color_=c, label_=f"D = {lag_of(d)}")
    for e in ev.events:
        axes[0].plot([e["step"]], [0.02], "v", color=style.color(e["recipe"]), markersize=4)
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
    ax = axes[3]
    lags = [lag_of(d) for d in delays]
    per_seed = {}
    for r in ("vcpo", "pg", "is"):
        vals = per_seed[r] = np.stack([arr(ev.error[r, d]) for d in delays], axis=1)
        style.band(ax, lags, vals, name=r, marker="o")
        style.seed_dots(ax, lags, vals, name=r)
    sync = np.nanmean(arr(ev.error["vcpo", "sync"]))  # VCPO-2: MATH-500 72.0 sync vs 71.6 stale, as an error ratio
    style.paper_star(ax, lags[1], sync * (100 - 71.6) / (100 - 72.0), name="vcpo")
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels([str(v) for v in lags])
    ax.set_xlabel("actor delay D (learner steps)")
    ax.set_ylabel("final MNIST test error")
    ax.set_title("VCPO across lag")
    ax.legend()
    cap = style.caption_text(CLAIMS, f"MNIST delay sweep; triangles on the ESS panel: collapse steps of any run "
                             f"(error > running min + {RISE}, or divergence); mean +- s.e. over "
                             f"{style.seed_note(len(b.mnist_seeds), per_seed)}; dots: seeds; star: VCPO's "
                             "MATH-500 72.0 sync vs 71.6 stale as an error ratio, times vcpo's sync error here", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
