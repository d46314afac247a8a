"""MNIST on-policy: test error vs samples per image for PG and DG, against the cross-entropy oracle
(DG-1).

Batches of 100 images, each sampled k times (batch-mean baseline for every k, so only the number of
samples changes); k = infinity is the exact expected update (figures/oracle_runs.py). The supervised
cross-entropy run is the oracle line. DG-1: DG closes about half of PG's gap to CE, and at one sample
per image DG beats PG's infinite-sample floor.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, arr, curves, experiment_configs
from figures.evidence import cell_key
from figures.experiments import mnist_samples as exp
from figures.experiments.mnist_samples.evidence import CE
from figures.experiments.mnist_samples.settings import METHODS, cell
from testbed.util.stats import mean_se_finite

NAME = "mnist_samples"
CLAIMS = ("DG-1",)


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    b = ctx.budget
    ev = ctx.evidence(exp)
    ks = ev.k
    x_inf = ks[-1] * 4
    table = ctx.table(exp.configs(b))
    fig, (ax, ax2) = style.subplots(2, width=4.6, height=3.3)
    per_seed = {}
    for r in METHODS:
        vals = np.stack([arr(ev.error[cell_key(r, k)]) for k in ks], axis=1)
        style.band(ax, ks, vals, name=r, marker="o")
        style.seed_dots(ax, ks, vals, name=r)
        x, ys = curves(table, cell(b, r, ks[0]), "test_error")
        if len(x):
            style.band(ax2, x, ys, name=r)
        ex = arr(ev.error[r, "inf"])
        per_seed[r], per_seed[f"{r} exact"] = vals, ex
        mean_ex, se = mean_se_finite(ex)
        ax.errorbar([x_inf], [mean_ex], yerr=[se], fmt="s", color=style.color(r), markersize=5, capsize=2)
        ax.plot([ks[-1], x_inf], [np.nanmean(vals[:, -1]), mean_ex], ":", color=style.color(r), lw=1)
    ce = arr(ev.error[CE])
    ce_mean, ce_se = mean_se_finite(ce)  # the band is mean +- s.e., like every series the caption describes
    ax.axhline(ce_mean, color=style.COLORS["ce"], ls="--", lw=1.2, label=style.label("ce"))
    ax.axhspan(ce_mean - ce_se, ce_mean + ce_se, color="k", alpha=0.08)
    half = (np.nanmean(arr(ev.error[cell_key("pg", ks[0])])) + ce_mean) / 2  # DG-1: DG closes half of PG's gap to CE
    style.paper_star(ax, ks[0], half, name="dg")
    style.paper_star(ax2, b.mnist_steps, half, name="dg")
    ax2.axhline(ce_mean, color=style.COLORS["ce"], ls="--", lw=1.2)
    ax.set_xscale("log", base=2)
    ax.set_xticks([*ks, x_inf])
    ax.set_xticklabels([str(k) for k in ks] + ["inf (exact)"])
    ax.set_xlabel("samples per image k (batch of 100 images)")
    ax.set_ylabel("final test error (fraction)")
    ax.set_title(f"MNIST bandit, on-policy, {b.mnist_steps:,} steps")
    ax.legend()
    ax2.set_xlabel("learner step")
    ax2.set_ylabel("test error (fraction)")
    ax2.set_title(f"learning curves at k = {ks[0]}")
    note = style.seed_note(len(b.mnist_seeds), {**per_seed, "ce": ce})
    cap = style.caption_text(CLAIMS, f"mean +- s.e. over {note}; dots: seeds; learning curves: the first look's "
                             "seeds; squares: exact expected update (infinitely many samples); dashed: supervised cross-entropy; stars: the "
                             f"paper's DG at k = {ks[0]}, half of PG's gap to cross-entropy closed", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
