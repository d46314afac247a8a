"""MNIST bandit: final test error vs actor delay D for every stabilizer, and learning curves at the
largest D (DDG-1).

Each learner batch of 100 images was sampled by the policy D versions old (``fixed:D``). A diverged
run counts as chance-level error (0.9) and is marked with an x.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.budgets import lag_of
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import mnist_delay as exp
from figures.experiments.mnist_delay.settings import CHANCE, RECIPES, cell

NAME = "mnist_delay"
CLAIMS = ("DDG-1",)
PAPER = {"dg": 0.02, "is": 0.08}  # DDG-1 at D = 1000 (s); "REINFORCE fails" has no number


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    delays = ev.delays
    lags = [lag_of(d) for d in delays]
    fig, (ax, ax2) = style.subplots(2, width=4.0, height=3.2)
    per_seed = {}
    for r in RECIPES:
        vals = per_seed[r] = np.stack([arr(ev.error[r, d]) for d in delays], axis=1)  # [seeds, delays]
        style.band(ax, lags, vals, name=r, marker="o")
        for j, d in enumerate(delays):
            if ev.diverged[r, d]:
                ax.plot([lags[j]], [CHANCE], "x", color=style.color(r), markersize=6)
        x, ys = curves(table, cell(b, r, delays[-1]), "test_error")
        if len(x):
            style.band(ax2, x, ys, name=r)
        if r in PAPER:  # the paper's value at D = 1000 (DDG-1)
            ax2.axhline(PAPER[r], color=style.color(r), ls=":", lw=0.9)
            style.paper_star(ax, lags[-1], PAPER[r], name=r)
        style.seed_dots(ax, lags, vals, name=r)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels([str(v) for v in lags])
    ax.set_xlabel("actor delay D (learner steps)")
    ax.set_ylabel("final test error (fraction)")
    ax.set_ylim(0, 1)
    ax.set_title(f"MNIST bandit, {b.mnist_steps:,} steps")
    ax.legend(fontsize=6, ncol=2)
    ax2.set_xlabel("learner step")
    ax2.set_ylabel("test error (fraction)")
    ax2.set_ylim(0, 1)
    ax2.set_title(f"learning curves at D = {lags[-1]}")
    cap = style.caption_text(CLAIMS, f"mean +- s.e. over {style.seed_note(len(b.mnist_seeds), per_seed)}; learning "
                             "curves: the first look's seeds; small dots: seeds; stars and dotted lines: the paper's "
                             "values at D = 1000; x = diverged (counted as chance, 0.9)", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
