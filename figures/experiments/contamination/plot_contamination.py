"""Exact theory: alignment with the true gradient vs the learner's error delta under contamination rho
(DDG-4, theory).

The contamination model of theory/delight.py (result 7): K = 5 actions, learner pi(y*) = 1 - delta, a
fraction rho of samples from an actor that always plays one wrong action, advantages +-1/2. Methods:
pg (no correction), exact importance sampling with each actor's own behaviour probabilities (``is``)
and against the true mixture sampler (``mix_is``), dg (eta = 1), all through the real surrogates.
Panels: (1) cosine of the *expected* update to the true gradient (the claim's quantity,
`contamination_gradients`); (2) the true-gradient share |expected clean part| / |expected
contaminated part| (the O(delta / rho) quantity); (3) the alignment E<g_1, d> / sqrt(E||g_1||^2) of
single samples, which includes the per-sample second moment (`contamination_alignment`).
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context, experiment_configs
from figures.experiments import contamination as exp
from figures.experiments.contamination.settings import METHODS, RHOS

NAME = "contamination"
CLAIMS = ("DDG-4",)
LABELS = {"pg": "PG", "is": "exact IS (own probs)", "mix_is": "exact IS (mixture)", "dg": "DG (eta=1)"}
COLORS = {"pg": style.COLORS["pg"], "is": style.COLORS["is"], "mix_is": style.COLORS["tis"], "dg": style.COLORS["dg"]}


configs = experiment_configs(exp)


def make(ctx: Context) -> dict:
    ev = ctx.evidence(exp)
    th = ev.theory
    deltas = np.asarray(th["deltas"])
    cases = th["cases"]
    fig, axes = style.subplots(3, width=3.6, height=3.0)
    for rho, ls in zip(RHOS, ("-", "--"), strict=True):
        for m in METHODS:
            axes[0].plot(deltas, cases["cos", f"rho={rho}", m], color=COLORS[m], ls=ls, label=f"{LABELS[m]}, rho={rho}")
            axes[2].plot(deltas, cases["align_1", f"rho={rho}", m], color=COLORS[m], ls=ls)
            if m in ("pg", "dg"):
                axes[1].plot(deltas, cases["share", f"rho={rho}", m], color=COLORS[m], ls=ls)
        ratio = np.array(cases["share", f"rho={rho}", "dg"]) / np.array(cases["share", f"rho={rho}", "pg"])
        axes[1].plot(deltas, ratio, color="#9467bd", ls=ls, label="DG share / PG share" if rho == RHOS[0] else None)
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xlabel("learner error delta = 1 - pi(y*)")
    axes[0].set_ylabel("cosine of expected update to true gradient")
    axes[0].set_ylim(0.5, 1.02)
    axes[0].set_title("expected update")
    axes[0].legend(fontsize=5.5, loc="lower right", ncol=2)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("|clean part| / |contaminated part|")
    axes[1].set_title("true-gradient share (grey PG, red DG)")
    axes[1].legend(fontsize=6)
    axes[2].set_ylabel("alignment of one sample, E<g,d>/sqrt(E|g|^2)")
    axes[2].set_ylim(0, 1)
    axes[2].set_title("single-sample alignment")
    cap = style.caption_text(CLAIMS, "exact tabular computation through the real surrogates (K=5, point contaminating "
                             "actor, adv +-1/2; solid rho=0.1, dashed rho=0.3): theory.delight.contamination_gradients "
                             "and contamination_alignment", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
