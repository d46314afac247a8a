"""Gradient alignment over training on MNIST: the cosine of each update to the exact policy gradient
and to the supervised cross-entropy gradient, under staleness and under contamination (DDG-4,
measured).

``cos_true_pg``: cosine between the learner's surrogate gradient and the exact expected-reward
gradient on the same images (enumerating the 10 actions); ``cos_ce``: the same against the
supervised cross-entropy gradient (testbed/diagnostics.py). Top row: the largest actor delay of the
MNIST sweep; bottom row: contamination, 20% of actor chunks sampling uniformly random labels while
recording the clean policy's log-probabilities.
"""

from __future__ import annotations

from figures import style
from figures.common import Context, curves, experiment_configs, smooth_rows
from figures.experiments import contamination as exp
from figures.experiments.contamination.settings import MEASURED, cell, conditions

NAME = "mnist_alignment"
CLAIMS = ("DDG-4",)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    fig, axes = style.subplots(4, ncols=2, width=3.9, height=2.7)
    i = 0
    for cname, (delay, fr) in conditions(b).items():
        for metric, what in (("cos_true_pg", "cos to exact PG gradient"), ("cos_ce", "cos to cross-entropy gradient")):
            ax = axes[i]
            i += 1
            for r in MEASURED:
                x, ys = curves(table, cell(b, r, delay, fr), metric)
                if len(x):
                    style.band(ax, x, smooth_rows(ys), name=r)
            ax.axhline(0, color="k", lw=0.5)
            ax.set_xlabel("learner step")
            ax.set_ylabel(what)
            ax.set_title(cname)
    axes[0].legend()
    cap = style.caption_text(CLAIMS, f"MNIST bandit; cosine of one batch's gradient on logged steps (3-point "
                             f"smoothing); mean +- s.e. over {len(b.mnist_seeds)} seeds. Under contamination PG and exact "
                             "IS coincide: the buggy actors record the clean log-probs, so every ratio is 1", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
