"""Token reversal: sequence error over training with each friction alone and all four together (DDG-2).

Frictions as in figures/experiments/token_frictions.py (staleness, actor bugs, reward corruption,
rare discovery = exact-sequence reward only). Metric: the fraction of sampled held-out sequences that
are not exactly right (the paper's metric).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from figures import style
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import token_frictions as exp

NAME = "token_frictions"
CLAIMS = ("DDG-2",)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    names = ev["settings"]
    fig, axes = style.subplots(len(names) + 1, ncols=4, width=3.0, height=2.6)
    for ax, name in zip(axes, names, strict=False):
        for r in exp.METHODS:
            x, ys = curves(table, exp.cell(b, r, name), "test_error")
            if len(x):
                style.band(ax, x * b.tr_episodes, ys, name=r)
        ax.set_title(name)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("episodes")
        ax.set_ylabel("sampled sequence error")
    axes[0].legend()
    ax = axes[len(names)]
    width = 0.8 / len(exp.METHODS)
    for i, r in enumerate(exp.METHODS):
        means = [np.nanmean(arr(ev["error"][f"{r}|{n}"])) for n in names]
        ax.bar(np.arange(len(names)) + (i - (len(exp.METHODS) - 1) / 2) * width, means, width, color=style.color(r),
               label=r)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, fontsize=6, rotation=35, ha="right")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{100 * y:g}%"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel("final sequence error (log)")
    ax.set_title("final error per setting")
    cap = style.caption_text(CLAIMS, f"token reversal M={b.tr_M}, H={b.tr_H}, {b.tr_actors} actors, {b.tr_steps} steps x "
                             f"{b.tr_episodes} episodes, mean +- s.e. over {len(b.tr_seeds)} seeds", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
