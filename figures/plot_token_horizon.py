"""Token reversal with all four frictions: final error vs sequence length H and the longest solved H
per method (DDG-3).

A method *solves* length H when its final sampled sequence error is at most 10% within the fixed
budget of learner steps; its longest solved H (per seed) is the largest H of the grid solved.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, arr, experiment_configs
from figures.experiments import token_horizon as exp

NAME = "token_horizon"
CLAIMS = ("DDG-3",)
PAPER = {"dg": 13.0, "pmpo": 8.0, "ppo": 5.0, "pg": 3.5}  # DDG-3's longest solved H (s)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    hs = ev.H
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    per_seed = {}
    for i, r in enumerate(exp.METHODS):
        style.band(ax, hs, np.stack([arr(ev.error[f"{r}|{h}"]) for h in hs], axis=1), name=r, marker="o")
        lg = per_seed[r] = arr(ev.longest[r])  # seeds not trained (a later look's) are NaN
        mean, se = style.mean_se(lg)
        ax2.bar(i, mean, color=style.color(r), yerr=se, capsize=2)
        style.seed_dots(ax2, [i], lg[:, None], color_="k")
        if r in PAPER:
            style.paper_star(ax2, i, PAPER[r], name=r)
    ax.axhline(exp.SOLVED, color="k", ls=":", lw=0.8)
    ax.set_xticks(hs)
    ax.tick_params(axis="x", labelsize=6)
    ax.set_xlabel("sequence length H")
    ax.set_ylabel("final sampled sequence error")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("all four frictions")
    ax.legend()
    ax2.set_xticks(range(len(exp.METHODS)))
    ax2.set_xticklabels(exp.METHODS)
    ax2.set_ylabel(f"longest H solved (error <= {exp.SOLVED:.0%})")
    ax2.set_title("longest solved length (dots: seeds; stars: paper)")
    cap = style.caption_text(CLAIMS, f"token reversal M={b.tr_M}, {b.tr_steps} steps x {b.tr_episodes} episodes per H, "
                             f"{style.seed_note(len(b.tr_seeds), per_seed)}; H grid {min(hs)}..{max(hs)}", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
