"""Token reversal: sequence error vs episodes with each friction alone and all four together (DDG-2).

Frictions (figures/suites.py): staleness (fixed actor delay), actor bugs (20% of actor chunks sample
uniformly random tokens while recording the clean log-probs), reward corruption (10% of rewards
flipped), rare discovery (the initial policy is warm-started toward a decoy answer, so the rewarded
exact sequence starts at probability about 0.3^H). The reward is the exact-sequence reward throughout.
Metric: the fraction of sampled test sequences that are not exactly right (the paper's metric).
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, final_values

NAME = "token_frictions"
CLAIMS = ("DDG-2",)


def configs(quick: bool) -> list:
    return suites.token_frictions(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    settings = suites.token_settings(ctx.quick)
    fig, axes = style.subplots(len(settings) + 1, ncols=4, width=3.0, height=2.6)
    ev: dict = {"settings": list(settings), "error": {}, "H": s.tr_H}
    batch = 100
    for ax, (name, (delay, fr, extra)) in zip(axes, settings.items(), strict=False):
        for r in suites.TOKEN_METHODS:
            match = {"recipe": r, **suites.token_match(delay, fr, extra)}
            x, ys = curves(table, "test_error", **match)
            if len(x):
                style.band(ax, x * batch, ys, name=r)
            ev["error"][f"{r}|{name}"] = final_values(table, "test_error", 1.0, **match).tolist()
        ax.set_title(name)
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("episodes")
        ax.set_ylabel("sampled sequence error")
    axes[0].legend()
    ax = axes[len(settings)]
    width = 0.8 / len(suites.TOKEN_METHODS)
    for i, r in enumerate(suites.TOKEN_METHODS):
        means = [np.mean(ev["error"][f"{r}|{n}"]) if ev["error"][f"{r}|{n}"] else np.nan for n in settings]
        ax.bar(np.arange(len(settings)) + (i - 1) * width, means, width, color=style.color(r), label=r)
    ax.set_xticks(range(len(settings)))
    ax.set_xticklabels(list(settings), fontsize=6, rotation=35, ha="right")
    ax.set_ylabel("final sequence error")
    ax.set_title("final error per setting")
    cap = style.caption_text(CLAIMS, f"token reversal M=2, H={s.tr_H} (paper: H=10), {s.tr_steps} steps x 100 episodes, "
                             f"mean +- s.e. over {len(s.tr_seeds)} seed(s); without staleness PPO coincides with PG (one update "
                             "per batch: every ratio is 1); PMPO is not implemented here", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"DDG-2": ev}
