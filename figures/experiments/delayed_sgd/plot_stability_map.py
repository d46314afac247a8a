"""Stability map of delayed SGD: lag-1 autocorrelation of the applied gradients vs a / a_crit(tau) (GAC-1,
background).

Delayed SGD on the noisy quadratic f = lambda x^2 / 2 (gradient lambda x + noise, step a = eta lambda,
gradient applied tau steps late). Lines: the exact stationary autocorrelation; circles: theory's own
simulation of the same recurrence (both theory/delayed_optimization.py, via
figures/experiments/delayed_sgd/evidence.py). With no delay the autocorrelation is exactly -a/2 (near
orthogonal, negative); with delay it turns positive and grows with a / a_crit(tau): the closed-form
version of GAC's "stale-aligned" signature.
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures.common import Context
from figures.experiments import delayed_sgd as exp
from figures.experiments.delayed_sgd.evidence import autocorr
from figures.experiments.delayed_sgd.settings import TAUS

NAME = "stability_map"
CLAIMS = ("GAC-1",)


def configs(quick: bool) -> list:
    return []


def make(ctx: Context) -> dict:
    ev = ctx.evidence(exp)
    fracs_line = np.linspace(0.02, 0.98, 60)
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    for i, tau in enumerate(TAUS):
        row = ev.rows[str(tau)]
        ac = row["a_crit"]
        c = style.level_color(i - 1, sync=tau == 0)
        ax.plot(fracs_line, [autocorr(f * ac, tau) for f in fracs_line], color=c,
                label=f"tau = {tau} (a_crit = {ac:.3f})")
        ax.plot(ev.fracs, row["sim"], "o", color=c, markersize=3.5, markerfacecolor="none")
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("step size relative to the stability edge, a / a_crit(tau)")
    ax.set_ylabel("lag-1 autocorrelation of applied gradients")
    ax.set_title("exact (lines) and simulated (circles)")
    ax.legend(loc="lower left", fontsize=6.5)
    a = 0.1
    taus = np.arange(0, 13)
    ax2.plot(taus, [autocorr(a, int(t)) for t in taus], "o-", color=style.COLORS["gac"], label=f"a = {a} (exact)")
    ax2.axhline(-a / 2, color="#7f7f7f", ls=":", lw=1, label="-a/2 (sync)")
    ax2.set_xlabel("delay tau (learner steps)")
    ax2.set_ylabel("lag-1 autocorrelation")
    ax2.set_title("fixed step: correlation grows with the delay")
    ax2.legend()
    cap = style.caption_text(CLAIMS, "delayed SGD on a noisy quadratic; sync autocorrelation is -a/2, delays make it "
                             "positive (theory.delayed_optimization.lag1_autocorrelation; simulation: "
                             "simulate_applied_gradients)", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {exp.NAME: ev}
