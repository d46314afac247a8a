"""VCPO ablation: the full recipe against removing either of its two parts (VCPO-3).

``vcpo`` = OPOB baseline + sequence-level truncated IS (c = 8) + ESS-scaled learning rate;
``no ess_lr`` keeps OPOB and the truncated IS; ``no opob`` keeps ess_lr and the truncated IS with the
default batch-mean baseline. MNIST bandit at large delays.
"""

from __future__ import annotations

import numpy as np

from figures import style, suites
from figures.common import Context, curves, final_values

NAME = "vcpo_ablation"
CLAIMS = ("VCPO-3",)
CHANCE = 0.9


def configs(quick: bool) -> list:
    return suites.vcpo_ablation(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    delays = s.ablation_delays
    fig, axes = style.subplots(len(delays) + 1, width=3.5, height=2.9)
    ev: dict = {"delays": list(delays), "error": {}}
    colors = dict(zip(suites.VCPO_ABLATIONS, (style.COLORS["vcpo"], "#bcbd22", "#e377c2"), strict=True))
    for ax, d in zip(axes[:-1], delays, strict=True):
        for name, spec in suites.VCPO_ABLATIONS.items():
            x, ys = curves(table, "test_error", recipe=spec, delay=d)
            if len(x):
                style.band(ax, x, ys, color_=colors[name], label_=name)
        ax.set_xlabel("learner step")
        ax.set_ylabel("test error (fraction)")
        ax.set_ylim(0, 1)
        ax.set_title(f"MNIST, D = {suites.lag_of(d)}")
        ax.legend()
    ax = axes[-1]
    width = 0.25
    for i, (name, spec) in enumerate(suites.VCPO_ABLATIONS.items()):
        for j, d in enumerate(delays):
            v = final_values(table, "test_error", CHANCE, recipe=spec, delay=d)
            ev["error"][f"{name}|{d}"] = v.tolist()
            ax.bar(j + (i - 1) * width, v.mean(), width, color=colors[name], label=name if j == 0 else None,
                   yerr=v.std(ddof=1) / np.sqrt(len(v)) if len(v) > 1 else None, capsize=2)
            ax.plot(np.full(len(v), j + (i - 1) * width), v, "k.", markersize=3)
    ax.set_xticks(range(len(delays)))
    ax.set_xticklabels([f"D = {suites.lag_of(d)}" for d in delays])
    ax.set_ylabel("final test error (fraction)")
    ax.set_title("ablation (dots: seeds)")
    ax.legend()
    cap = style.caption_text(CLAIMS, f"{len(s.seeds)} seed(s); bars: mean +- s.e.", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"VCPO-3": ev}
