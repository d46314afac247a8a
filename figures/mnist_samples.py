"""MNIST on-policy: test error vs samples per image for PG and DG, against the cross-entropy oracle
(DG-1).

Batches of 100 images, each sampled k times (batch-mean baseline for every k, so only the number of
samples changes); k = infinity is the exact expected update (figures/oracle_runs.py). The supervised
cross-entropy run is the oracle line. DG-1: DG closes about half of PG's gap to CE, and at one sample
per image DG beats PG's infinite-sample floor.
"""

from __future__ import annotations

import numpy as np

from figures import oracle_runs, style, suites
from figures.common import Context, final_values, seed_matrix

NAME = "mnist_samples"
CLAIMS = ("DG-1",)
CHANCE = 0.9


def configs(quick: bool) -> list:
    return suites.mnist_samples(quick)


def _oracle(ctx: Context, kind: str) -> np.ndarray:
    s = suites.scale(ctx.quick)
    vals = []
    for seed in s.seeds:
        df = oracle_runs.cached(ctx.cache, kind, seed, s.mnist_steps, s.mnist_log)
        vals.append(float(df["test_error"].iloc[-1]))
    return np.asarray(vals)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    ks = list(s.samples_k)
    x_inf = ks[-1] * 4
    fig, (ax,) = style.subplots(1, width=4.6, height=3.3)
    ev: dict = {"k": ks, "error": {}}
    for r in ("pg", "dg"):
        vals = [final_values(table, "test_error", CHANCE, recipe=f"{r}+mean", delay="sync", group_size=k) for k in ks]
        arr = seed_matrix(vals)
        style.band(ax, ks, arr, name=r, marker="o")
        exact = _oracle(ctx, f"{r}_exact")
        ax.errorbar([x_inf], [exact.mean()], yerr=[exact.std(ddof=1) / np.sqrt(len(exact)) if len(exact) > 1 else 0],
                    fmt="s", color=style.color(r), markersize=5, capsize=2)
        ax.plot([ks[-1], x_inf], [arr.mean(0)[-1], exact.mean()], ":", color=style.color(r), lw=1)
        for j, k in enumerate(ks):
            ev["error"][f"{r}|{k}"] = arr[:, j].tolist()
        ev["error"][f"{r}|inf"] = exact.tolist()
    ce = _oracle(ctx, "ce")
    ev["error"]["ce"] = ce.tolist()
    ax.axhline(ce.mean(), color=style.COLORS["ce"], ls="--", lw=1.2, label=style.label("ce"))
    ax.axhspan(ce.mean() - ce.std(ddof=1) if len(ce) > 1 else ce.mean(), ce.mean() + (ce.std(ddof=1) if len(ce) > 1 else 0),
               color="k", alpha=0.08)
    ax.set_xscale("log", base=2)
    ax.set_xticks([*ks, x_inf])
    ax.set_xticklabels([str(k) for k in ks] + ["inf (exact)"])
    ax.set_xlabel("samples per image k (batch of 100 images)")
    ax.set_ylabel("final test error (fraction)")
    ax.set_title(f"MNIST bandit, on-policy, {s.mnist_steps} steps")
    ax.legend()
    cap = style.caption_text(CLAIMS, f"mean +- s.e. over {len(s.seeds)} seed(s); squares: exact expected update "
                             "(infinitely many samples); dashed: supervised cross-entropy", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"DG-1": ev}
