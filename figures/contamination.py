"""Exact theory: alignment with the true gradient vs the learner's error delta under contamination rho
(DDG-4, theory).

The contamination model of ALGORITHMS.md (analytic result 7), as theory.delight sets it up: K = 5
actions, learner pi(y*) = 1 - delta, a fraction rho of samples from an actor that always plays one
wrong action, advantages +-1/2. Methods: pg (no correction), exact importance sampling with each
actor's own behaviour probabilities (``is``) and against the true mixture sampler (``mix_is``), dg
(eta = 1). Panels: (1) cosine of the *expected* update to the true gradient (the claim's quantity);
(2) the true-gradient share |expected clean part| / |expected contaminated part| (the O(delta / rho)
quantity); (3) the finite-batch alignment E<g_1, d> / sqrt(E||g_1||^2) of single samples, which
includes the per-sample second moment.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures import theory_bridge as tb
from figures.common import Context

NAME = "contamination"
CLAIMS = ("DDG-4",)
RHOS = (0.1, 0.3)
METHODS = ("pg", "is", "mix_is", "dg")
LABELS = {"pg": "PG", "is": "exact IS (own probs)", "mix_is": "exact IS (mixture)", "dg": "DG (eta=1)"}
COLORS = {"pg": style.COLORS["pg"], "is": style.COLORS["is"], "mix_is": style.COLORS["tis"], "dg": style.COLORS["dg"]}


def configs(quick: bool) -> list:
    return []


def make(ctx: Context) -> dict:
    deltas = np.logspace(-4, np.log10(0.5), 12 if ctx.quick else 40)
    fig, axes = style.subplots(3, width=3.6, height=3.0)
    ev: dict = {"deltas": deltas.tolist(), "cases": {}}
    for rho, ls in zip(RHOS, ("-", "--"), strict=True):
        res = [tb.contamination(float(d), rho) for d in deltas]
        for m in METHODS:
            for key in ("cos", "share", "align_1"):
                ev["cases"][f"{key}|rho={rho}|{m}"] = [r[m][key] for r in res]
            lab = f"{LABELS[m]}, rho={rho}"
            axes[0].plot(deltas, ev["cases"][f"cos|rho={rho}|{m}"], color=COLORS[m], ls=ls, label=lab)
            axes[2].plot(deltas, ev["cases"][f"align_1|rho={rho}|{m}"], color=COLORS[m], ls=ls)
            if m in ("pg", "dg"):
                axes[1].plot(deltas, ev["cases"][f"share|rho={rho}|{m}"], color=COLORS[m], ls=ls)
        ratio = np.array(ev["cases"][f"share|rho={rho}|dg"]) / np.array(ev["cases"][f"share|rho={rho}|pg"])
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
    cap = style.caption_text(CLAIMS, "exact tabular computation (K=5, point contaminating actor, adv +-1/2; solid "
                             f"rho=0.1, dashed rho=0.3); cos and share from {tb.source('contamination')}",
                             ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"DDG-4": {"theory": ev}}
