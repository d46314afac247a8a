"""Token reversal: sequence error over training with each friction alone and all four together (DDG-2).

Frictions as in figures/experiments/token_frictions/settings.py (staleness, actor bugs, reward corruption,
rare discovery = exact-sequence reward only). Metric: the fraction of sampled held-out sequences that
are not exactly right (the paper's metric).
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from figures import style
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import token_frictions as exp
from figures.experiments.token_frictions.settings import METHODS, cell

NAME = "token_frictions"
CLAIMS = ("DDG-2",)
PAPER = {"pg": 0.60, "pmpo": 0.15, "ppo": 0.10, "dg": 0.003}  # DDG-2, all four frictions (s)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    names = ev.settings
    fig, axes = style.subplots(len(names) + 1, ncols=4, width=3.0, height=2.6)
    for ax, name in zip(axes, names, strict=False):
        style.curve_panel(ax, {r: curves(table, cell(b, r, name), "test_error") for r in METHODS},
                          x_scale=b.tr_episodes, title=name, xlabel="episodes", ylabel="sampled sequence error",
                          ylim=(-0.02, 1.02))
    axes[0].legend()
    for r, v in PAPER.items():  # the paper's values (all four frictions), on the "all four" panel
        axes[names.index("all four")].axhline(v, color=style.color(r), ls=":", lw=0.8)
    ax = axes[len(names)]
    height = 0.8 / len(METHODS)
    per_seed = {}
    for i, r in enumerate(METHODS):
        ys = np.arange(len(names)) + (i - (len(METHODS) - 1) / 2) * height
        vals = [arr(ev.error[r, n]) for n in names]
        per_seed[r] = np.stack(vals, axis=1)
        ax.barh(ys, [np.nanmean(v) for v in vals], height, color=style.color(r), label=r, zorder=1)
        for y0, v in zip(ys, vals, strict=True):  # per-seed dots
            ax.plot(v, np.full(len(v), y0), "k.", markersize=2.5, zorder=3)
        if r in PAPER:
            style.paper_star(ax, PAPER[r], ys[names.index("all four")], name=r)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{100 * x:g}%"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("final sequence error (log)")
    ax.set_title("final error per setting (stars: paper)")
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), framealpha=0.95).set_zorder(10)
    cap = style.caption_text(CLAIMS, f"token reversal M={b.tr_M}, H={b.tr_H}, {b.tr_actors} actors, {b.tr_steps} steps x "
                             f"{b.tr_episodes} episodes; curves: mean +- s.e. over the first look's {len(b.tr_seeds)} seeds; bars: mean over "
                             f"{style.seed_note(len(b.tr_seeds), per_seed)}; dots: seeds; dotted "
                             "lines and stars: the paper's values with all four frictions", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
