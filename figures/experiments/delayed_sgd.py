"""Delayed SGD on a noisy quadratic: the closed-form background of GAC-1 (no claim is judged on it).

theory/delayed_optimization.py (results 1 and 2): the delayed recurrence x_{t+1} = x_t - a x_{t-tau}
is stable iff a < a_crit(tau) = 2 sin(pi / (2 (2 tau + 1))), and the stationary lag-1 autocorrelation
of the applied gradients is exactly -a/2 without delay and positive with delay. The figures
stability_map and quadratic_gac draw these numbers, a simulation of the same recurrence
(`simulate_applied_gradients`), and the testbed's gac_projection on the delayed quadratic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from figures.budgets import Budget
from testbed.runner import RunConfig
from theory.delayed_optimization import critical_step, lag1_autocorrelation, sample_lag1, simulate_applied_gradients

NAME = "delayed_sgd"
TAUS = (0, 1, 2, 4, 8)
FRACS = (0.1, 0.3, 0.5, 0.7, 0.9)
CLAIMS: tuple = ()


def configs(b: Budget) -> list[RunConfig]:
    return []


def describe(b: Budget) -> str:
    return f"exact stationary autocorrelations (tau in {TAUS}) and simulations of {b.stability_steps:,} steps"


def autocorr(a: float, tau: int) -> float:
    """Exact stationary lag-1 autocorrelation of the applied gradients; NaN outside the stable range."""
    if not 0.0 < a < critical_step(tau):
        return float("nan")
    return float(lag1_autocorrelation(a, tau))


def simulated(a: float, tau: int, steps: int, seed: int, chains: int = 64) -> float:
    """Mean over ``chains`` simulated runs of the sample lag-1 autocorrelation (theory's simulator)."""
    g = simulate_applied_gradients(a, tau, chains, steps, 200, np.random.default_rng(seed))
    return float(sample_lag1(g).mean())


def evidence(ctx: Any) -> dict[str, Any]:
    b = ctx.budget
    rows = {}
    for i, tau in enumerate(TAUS):
        ac = critical_step(tau)
        rows[str(tau)] = {"a_crit": ac, "theory": [autocorr(f * ac, tau) for f in FRACS],
                          "sim": [simulated(f * ac, tau, b.stability_steps, 100 * i + j) for j, f in enumerate(FRACS)]}
    return {"grid": describe(b), "fracs": list(FRACS), "taus": list(TAUS), "rows": rows}
