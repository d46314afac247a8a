"""Consecutive-gradient cosine over training in the async-GRPO regime, per base, sync vs the regime's
staleness levels (GAC-1).

``grad_cos_prev`` is the cosine between an optimizer step's raw surrogate gradient and the previous
step's (testbed/runner.py; with K epochs x N minibatches per batch, the previous minibatch's), logged
every ``log_every`` batches. One panel per base: grpo (the GAC paper's), pg, tis; then the per-seed means over
the second half of training (capped at about r / (1 + r), r = m / B_noise); the last panel what GAC-1 is judged on
where the exact-gradient probe measured (figures/gac_probe.py): per level, the mean over the learning window of
``cos_consecutive_exact`` (bars, dots: seeds), with the learner's own minibatch cosine over the same window (x).
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, arr, curves, experiment_configs, smooth_rows
from figures.experiments import async_grpo as exp
from figures.experiments.async_grpo.judges import BAND, has_exact
from figures.experiments.async_grpo.settings import BASES, cell, exact_recipe
from testbed.util.stats import mean_se_finite

NAME = "grad_cosine"
CLAIMS = ("GAC-1",)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    table = ctx.table(exp.configs(b))
    levels = ev.levels
    exact = has_exact(ev)
    fig, axes = style.subplots(len(BASES) + 1 + exact, ncols=4, width=3.2, height=2.9)
    for ax, base in zip(axes, BASES, strict=False):
        for j, d in enumerate(levels):
            x, ys = curves(table, cell(b, base, d), "grad_cos_prev")
            if len(x):
                style.band(ax, x, smooth_rows(ys), color_=style.level_color(j - 1, sync=d == "sync"), label_=d)
        ax.axhline(0, color="k", lw=0.5)
        ax.axhspan(-BAND.value, BAND.value, color="k", alpha=0.06)
        ax.set_xlabel("learner batch")
        ax.set_ylabel("cos(g_t, g_{t-1})")
        ax.set_title(f"{base}{' (GAC paper base)' if base == 'grpo' else ''}")
        ax.legend()
    ax = axes[len(BASES)]
    width = 0.8 / len(levels)
    per_seed = {base: np.stack([arr(ev.cos[(base, d)]) for d in levels], axis=1) for base in BASES}
    for j, d in enumerate(levels):
        means = [mean_se_finite(per_seed[base][:, j])[0] for base in BASES]
        xs = np.arange(len(BASES)) + (j - (len(levels) - 1) / 2) * width
        ax.bar(xs, means, width, color=style.level_color(j - 1, sync=d == "sync"), label=d, zorder=1)
        for x0, base in zip(xs, BASES, strict=True):
            style.seed_dots(ax, [x0], per_seed[base][:, j:j + 1], color_="k")
            across = arr((ev.cos_across or {}).get((base, d)))
            if np.isfinite(across).any():  # the pair across batches (previous step in the previous batch)
                ax.plot(np.full(len(across), x0), across, "kx", markersize=3, zorder=3)
    ax.axhspan(-BAND.value, BAND.value, color="k", alpha=0.06)
    ax.set_xticks(range(len(BASES)))
    ax.set_xticklabels(BASES)
    ax.set_ylabel("mean cosine, second half (dots: seeds)")
    ax.set_title("minibatch cosine (capped by r / (1 + r))" if exact else "what GAC-1 is judged on")
    # the legend goes outside the bars (it was drawn behind them)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.0, 1.0), framealpha=0.95).set_zorder(10)
    if exact:
        _exact_panel(axes[-1], ev, levels)
    tag = "" if ev.registered else " [provisional regime settings]"
    cap = style.caption_text(CLAIMS, f"MNIST, async-GRPO regime{tag}, {b.async_steps} batches; raw-gradient cosine "
                             "between consecutive optimizer steps (3-point smoothing), mean +- s.e. over the first "
                             f"look's {len(b.async_seeds)} seeds; bars: mean over "
                             f"{style.seed_note(len(b.async_seeds), per_seed)}; grey band |cos| < {BAND.value}. Pair compared: each "
                             "optimizer step's raw gradient with the previous step's, which within a batch is the "
                             "previous minibatch of the same batch (dots: per-seed means of all pairs; x: pairs "
                             "across batches only, where logged)" + (
                                 f"; last panel: GAC-1's reading, the exact expected gradients' consecutive cosine "
                                 f"(r = infinity) over the learning window, versions {ev.exact_window[0]:g}-"
                                 f"{ev.exact_window[1]:g} (x: the learner's minibatch cosine there)" if exact else ""),
                             ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}


def _exact_panel(ax, ev: exp.Evidence, levels: list[str]) -> None:
    """Per level, the learning-window mean of cos_consecutive_exact (bar: mean over seeds, dots: seeds) and the
    learner's minibatch cosine over the same window (x)."""
    recipe = exact_recipe()
    for j, d in enumerate(levels):
        v = arr(ev.cos_exact.get((recipe, d)))
        ax.bar([j], [mean_se_finite(v)[0] if v.size else np.nan], 0.6,
               color=style.level_color(j - 1, sync=d == "sync"), label=d, zorder=1)
        style.seed_dots(ax, [j], v[:, None], color_="k")
        mb = arr(ev.cos_minibatch.get((recipe, d)))
        ax.plot(np.full(len(mb), j), mb, "kx", markersize=3, zorder=3)
    ax.axhspan(-BAND.value, BAND.value, color="k", alpha=0.06)
    ax.set_xticks(range(len(levels)))
    ax.set_xticklabels(levels, fontsize=6)
    ax.set_ylabel("cos, exact consecutive updates")
    ax.set_title(f"what GAC-1 is judged on ({recipe}, exact)")
