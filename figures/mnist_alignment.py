"""Gradient alignment over training on MNIST: the cosine of each update to the exact policy gradient
and to the supervised cross-entropy gradient, under staleness and under contamination (DDG-4,
measured).

``cos_true_pg``: cosine between the learner's surrogate gradient and the exact expected-reward
gradient on the same images (enumerating the 10 actions); ``cos_ce``: the same against the
supervised cross-entropy gradient (testbed/diagnostics.py). Top row: actor delay D (largest of the
sweep); bottom row: contamination, 20% of actor chunks sampling uniformly random labels while
recording the clean policy's log-probabilities.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, smooth_rows

NAME = "mnist_alignment"
CLAIMS = ("DDG-4",)
RECIPES = ("pg", "is", "dg")


def configs(quick: bool) -> list:
    s = suites.scale(quick)
    return [c for c in suites.mnist_delay(quick, RECIPES) if c.delay == s.mnist_delays[-1]] + \
        suites.mnist_contamination(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    conds = {f"delay D={suites.lag_of(s.mnist_delays[-1])}": {"delay": s.mnist_delays[-1], "frictions": "none"},
             "contamination (20% random actors)": {"delay": "sync", "frictions": suites.CONTAMINATION}}
    fig, axes = style.subplots(4, ncols=2, width=3.9, height=2.7)
    ev: dict = {}
    i = 0
    for cname, match in conds.items():
        for metric, what in (("cos_true_pg", "cos to exact PG gradient"), ("cos_ce", "cos to cross-entropy gradient")):
            ax = axes[i]
            i += 1
            for r in RECIPES:
                x, ys = curves(table, metric, recipe=r, **match)
                if not len(x):
                    continue
                style.band(ax, x, smooth_rows(ys), name=r)
                half = ys.shape[1] // 2
                with np.errstate(all="ignore"):
                    ev[f"{cname}|{metric}|{r}|late"] = np.nanmean(ys[:, half:], axis=1).tolist()
                    ev[f"{cname}|{metric}|{r}|early"] = np.nanmean(ys[:, : max(1, half)], axis=1).tolist()
            ax.axhline(0, color="k", lw=0.5)
            ax.set_xlabel("learner step")
            ax.set_ylabel(what)
            ax.set_title(cname)
    axes[0].legend()
    cap = style.caption_text(CLAIMS, f"MNIST bandit; cosine of one batch's gradient on logged steps (3-point "
                             f"smoothing); mean +- s.e. over {len(s.seeds)} seed(s). Under contamination PG and exact IS "
                             "coincide: the buggy actors record the clean log-probs, so every ratio is 1", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    ev["conditions"] = list(conds)
    return {"DDG-4": {"measured": ev}}
