"""Stability map of delayed SGD: lag-1 autocorrelation of the applied gradients vs a / a_crit(tau).

Delayed SGD on the noisy quadratic f = lambda x^2 / 2 (gradient lambda x + noise, step a = eta lambda,
gradient applied tau steps late). Lines: the exact stationary autocorrelation (theory_bridge /
theory); markers: a simulation of the same recurrence (pooled over independent coordinates). With no
delay the autocorrelation is exactly -a/2 (near orthogonal, negative); with delay it turns positive
and grows with tau and with a / a_crit(tau): the closed-form version of GAC's "stale-aligned"
signature (GAC-1).
"""

from __future__ import annotations

import numpy as np

from figures import style
from figures import theory_bridge as tb
from figures.common import Context

NAME = "stability_map"
CLAIMS = ("GAC-1",)
TITLE = "Delayed SGD: lag-1 gradient autocorrelation vs a / a_crit"
TAUS = (0, 1, 2, 4, 8)


def configs(quick: bool) -> list:
    return []


def make(ctx: Context) -> dict:
    fracs_line = np.linspace(0.02, 0.98, 60)
    fracs_sim = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    steps = 400 if ctx.quick else 6000
    rng = np.random.default_rng(0)
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    rows = {}
    for i, tau in enumerate(TAUS):
        ac = tb.a_crit(tau)
        theory = np.array([tb.grad_autocorr(f * ac, tau) for f in fracs_line])
        sim = np.array([tb.simulate_autocorr(f * ac, tau, steps, rng, dims=32 if ctx.quick else 64) for f in fracs_sim])
        c = style._EXTRA[i] if tau else "#000000"
        ax.plot(fracs_line, theory, color=c, label=f"tau = {tau} (a_crit = {ac:.3f})")
        ax.plot(fracs_sim, sim, "o", color=c, markersize=3.5, markerfacecolor="none")
        rows[tau] = {"a_crit": ac, "theory_at_half": float(tb.grad_autocorr(0.5 * ac, tau)),
                     "sim": sim.tolist(), "theory_at_sim": [tb.grad_autocorr(f * ac, tau) for f in fracs_sim]}
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("step size relative to the stability edge, a / a_crit(tau)")
    ax.set_ylabel("lag-1 autocorrelation of applied gradients")
    ax.set_title("exact (lines) and simulated (circles)")
    ax.legend(loc="lower left", fontsize=6.5)
    # panel 2: the same at a fixed absolute step a = 0.1, against tau
    a = 0.1
    taus = np.arange(0, 13)
    ax2.plot(taus, [tb.grad_autocorr(a, int(t)) for t in taus], "o-", color=style.COLORS["gac"],
             label=f"a = {a} (exact)")
    ax2.axhline(-a / 2, color="#7f7f7f", ls=":", lw=1, label="-a/2 (sync)")
    ax2.set_xlabel("delay tau (learner steps)")
    ax2.set_ylabel("lag-1 autocorrelation")
    ax2.set_title("fixed step: correlation grows with the delay")
    ax2.legend()
    cap = style.caption_text(CLAIMS, "delayed SGD on a noisy quadratic; sync autocorrelation is -a/2, "
                             f"delays make it positive (closed form: {tb.source('grad_autocorr')})", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    sync_vals = [tb.grad_autocorr(f * 2.0, 0) for f in fracs_sim]
    delayed_vals = [tb.grad_autocorr(0.5 * tb.a_crit(t), t) for t in TAUS[1:]]
    sim_err = max(abs(s - t) for r in rows.values() for s, t in zip(r["sim"], r["theory_at_sim"]) if np.isfinite(s))
    return {"GAC-1": {"quadratic_theory": {"sync_autocorr": sync_vals, "delayed_autocorr_at_half_crit": delayed_vals,
                                           "taus": list(TAUS[1:]), "max_sim_minus_theory": sim_err}}}
