"""Delayed SGD on a noisy quadratic: the closed-form background of GAC-1 (no claim is judged on it).

theory/delayed_optimization.py (results 1 and 2): the delayed recurrence x_{t+1} = x_t - a x_{t-tau}
is stable iff a < a_crit(tau) = 2 sin(pi / (2 (2 tau + 1))), and the stationary lag-1 autocorrelation
of the applied gradients is exactly -a/2 without delay and positive with delay. The figures
stability_map and quadratic_gac draw these numbers, a simulation of the same recurrence
(`simulate_applied_gradients`), and the testbed's gac_projection on the delayed quadratic.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.experiments.delayed_sgd.evidence import Evidence, measure
from figures.experiments.delayed_sgd.judges import CLAIMS
from figures.experiments.delayed_sgd.settings import NAME, configs, describe

__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure"]
