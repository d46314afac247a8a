"""Token reversal with all four frictions over the sequence length H: DDG-3.

Setting: as token_frictions' "all four" (figures/experiments/token_frictions/settings.py), at every H of the
grid (H = 2, 4, .., 16, figures/budgets.py), 1,000 learner steps, 3 seeds, methods pg, pmpo, ppo, dg. A
method *solves* H when its final sampled sequence error is at most SOLVED; its longest solved H (per
seed) is the largest H of the grid it solves. The grid is fixed; the rule checks that it reaches two
past the longest solved length of every run, and asks for a longer grid when it does not.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.common import Context
from figures.experiments.token_horizon.evidence import Evidence, build
from figures.experiments.token_horizon.judges import CLAIMS
from figures.experiments.token_horizon.settings import NAME, configs, describe, staged_runs
from figures.staging import staged_evidence


def measure(ctx: Context) -> Evidence:
    """The experiment's evidence, look by look of its sequential design (`figures.staging.staged_evidence`)."""
    return staged_evidence(ctx, CLAIMS, "horizon", configs, staged_runs, build)


__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure", "staged_runs"]
