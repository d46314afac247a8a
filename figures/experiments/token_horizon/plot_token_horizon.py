"""Token reversal with all four frictions: learning curves at every length H of the grid, final error vs H
and the longest solved H per method (DDG-3).

A method *solves* length H when its final sampled sequence error is at most 10% within the fixed
budget of learner steps; its longest solved H (per seed) is the largest H of the grid solved. Each
learning-curve panel names the methods the paper reports solving that length (its longest solved H at
least H).
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, arr, curves, experiment_configs
from figures.evidence import cell_key
from figures.experiments import token_horizon as exp
from figures.experiments.token_horizon.settings import METHODS, SOLVED, cell
from testbed.util.stats import mean_se_finite

NAME = "token_horizon"
CLAIMS = ("DDG-3",)
PAPER = {"dg": 13.0, "pmpo": 8.0, "ppo": 5.0, "pg": 3.5}  # DDG-3's longest solved H (s)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    hs = ev.H
    table = ctx.table(exp.configs(b))
    fig, axes = style.subplots(len(hs) + 2, ncols=4, width=3.0, height=2.6)
    for ax, h in zip(axes, hs, strict=False):
        solvers = [r.upper() for r in METHODS if PAPER.get(r, 0.0) >= h]
        style.curve_panel(ax, {r: curves(table, cell(b, r, h), "test_error") for r in METHODS},
                          x_scale=b.tr_episodes, title=f"H = {h} (paper solves: {', '.join(solvers) or 'none'})",
                          xlabel="episodes", ylabel="sampled sequence error", ylim=(-0.02, 1.02))
        ax.title.set_fontsize(8)
        ax.axhline(SOLVED, color="k", ls=":", lw=0.8)
    axes[0].legend(fontsize=6)
    ax, ax2 = axes[len(hs)], axes[len(hs) + 1]
    per_seed = {}
    for i, r in enumerate(METHODS):
        errors = np.stack([arr(ev.error[cell_key(r, h)]) for h in hs], axis=1)
        style.band(ax, hs, errors, name=r, marker="o")
        style.seed_dots(ax, hs, errors, name=r)
        lg = per_seed[r] = arr(ev.longest[r])  # seeds not trained (a later look's) are NaN
        mean, se = mean_se_finite(lg)
        ax2.bar(i, mean, color=style.color(r), yerr=se, capsize=2)
        style.seed_dots(ax2, [i], lg[:, None], color_="k")
        if r in PAPER:
            style.paper_star(ax2, i, PAPER[r], name=r)
    ax.axhline(SOLVED, color="k", ls=":", lw=0.8)
    ax.set_xticks(hs)
    ax.tick_params(axis="x", labelsize=6)
    ax.set_xlabel("sequence length H")
    ax.set_ylabel("final sampled sequence error")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("final error by length (dots: seeds)", fontsize=8)
    ax2.set_xticks(range(len(METHODS)))
    ax2.set_xticklabels(METHODS)
    ax2.set_ylabel(f"longest H solved (error <= {SOLVED:.0%})")
    ax2.set_title("longest solved H (dots: seeds; stars: paper)", fontsize=8)
    cap = style.caption_text(CLAIMS, f"token reversal M={b.tr_M}, all four frictions, {b.tr_steps} steps x "
                             f"{b.tr_episodes} episodes per H; curves: mean +- s.e. over the first look's "
                             f"{len(b.tr_seeds)} seeds, dotted: solved (error <= {SOLVED:.0%}); final error and "
                             f"longest solved H over {style.seed_note(len(b.tr_seeds), per_seed)}; H grid "
                             f"{min(hs)}..{max(hs)}", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
