"""Token reversal with all four frictions: final error vs sequence length H and the longest solved H
per method (DDG-3).

A method *solves* length H when its final sampled sequence error is at most SOLVED (10%) within the
fixed budget of learner steps; its longest solved H (per seed) is the largest H of the grid solved.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, final_values, seed_matrix

NAME = "token_horizon"
CLAIMS = ("DDG-3",)
SOLVED = 0.10


def configs(quick: bool) -> list:
    return suites.token_horizons(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    delay, fr, extra = suites.token_settings(ctx.quick)["all four"]
    hs = list(s.tr_horizons)
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    ev: dict = {"H": hs, "error": {}, "longest": {}, "threshold": SOLVED}
    for i, r in enumerate(suites.TOKEN_METHODS):
        vals = [final_values(table, "test_error", 1.0, recipe=r, H=h,
                             **suites.token_match(delay, fr, extra))
                for h in hs]
        arr = seed_matrix(vals)  # [seeds, H]
        style.band(ax, hs, arr, name=r, marker="o")
        longest = [max([0] + [h for h, e in zip(hs, row, strict=True) if e <= SOLVED]) for row in arr]
        ev["longest"][r] = longest
        for j, h in enumerate(hs):
            ev["error"][f"{r}|{h}"] = arr[:, j].tolist()
        ax2.bar(i, np.mean(longest), color=style.color(r), yerr=np.std(longest, ddof=1) / np.sqrt(len(longest))
                if len(longest) > 1 else None, capsize=2)
        ax2.plot(np.full(len(longest), i), longest, "k.", markersize=4)
    ax.axhline(SOLVED, color="k", ls=":", lw=0.8)
    ax.set_xticks(hs)
    ax.set_xlabel("sequence length H")
    ax.set_ylabel("final sampled sequence error")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("all four frictions")
    ax.legend()
    ax2.set_xticks(range(len(suites.TOKEN_METHODS)))
    ax2.set_xticklabels(suites.TOKEN_METHODS)
    ax2.set_ylabel(f"longest H solved (error <= {SOLVED:.0%})")
    ax2.set_title("longest solved length (dots: seeds)")
    cap = style.caption_text(CLAIMS, f"token reversal M=2, {s.tr_steps} steps x 100 episodes per H, "
                             f"{len(s.tr_seeds)} seed(s); H grid {hs}", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"DDG-3": ev}
