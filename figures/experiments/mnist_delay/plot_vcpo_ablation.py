"""VCPO ablation: the full recipe against removing either of its two parts (VCPO-3).

``vcpo`` = OPOB baseline + sequence-level truncated IS (c = 8) + ESS-scaled learning rate;
``no ess_lr`` keeps OPOB and the truncated IS; ``no opob`` keeps ess_lr and the truncated IS with the
default batch-mean baseline. MNIST bandit at the ablation delays (figures/experiments/mnist_delay/settings.py).
"""

from __future__ import annotations

from figures import style
from figures.budgets import lag_of
from figures.common import Context, arr, curves, experiment_configs
from figures.experiments import mnist_delay as exp
from figures.experiments.mnist_delay.settings import ABLATIONS, cell
from testbed.util.stats import mean_se_finite

NAME = "vcpo_ablation"
CLAIMS = ("VCPO-3",)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    delays = ev.ablation_delays
    fig, axes = style.subplots(len(delays) + 1, width=3.5, height=2.9)
    colors = dict(zip(ABLATIONS, (style.COLORS["vcpo"], "#bcbd22", "#e377c2"), strict=True))
    for ax, d in zip(axes[:-1], delays, strict=True):
        for name, spec in ABLATIONS.items():
            x, ys = curves(table, cell(b, spec, d), "test_error")
            if len(x):
                style.band(ax, x, ys, color_=colors[name], label_=name)
        ax.set_xlabel("learner step")
        ax.set_ylabel("test error (fraction)")
        ax.set_ylim(0, 1)
        ax.set_title(f"MNIST, D = {lag_of(d)}")
        ax.legend()
    ax = axes[-1]
    width = 0.25
    per_seed = {}
    for i, name in enumerate(ABLATIONS):
        for j, d in enumerate(delays):
            v = arr(ev.error[name, d])
            per_seed[f"{name} at D = {lag_of(d)}"] = v
            mean, se = mean_se_finite(v)
            ax.bar(j + (i - 1) * width, mean, width, color=colors[name], label=name if j == 0 else None, yerr=se,
                   capsize=2)
            style.seed_dots(ax, [j + (i - 1) * width], v[:, None], color_="k")
    ax.set_xticks(range(len(delays)))
    ax.set_xticklabels([f"D = {lag_of(d)}" for d in delays])
    ax.set_ylabel("final test error (fraction)")
    ax.set_title("ablation (dots: seeds)")
    ax.legend()
    cap = style.caption_text(CLAIMS, f"{style.seed_note(len(b.mnist_seeds), per_seed)}; bars: mean +- s.e. "
                             "(learning curves: the first look's seeds)", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
