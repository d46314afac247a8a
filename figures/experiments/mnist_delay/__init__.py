"""MNIST bandit under a fixed actor delay: DDG-1, VCPO-1, VCPO-2, VCPO-3.

Setting (the papers' MNIST setting, figures/budgets.py): one optimizer step per batch (regime
``one_step``), batch 100, Adam 1e-3, MLP width 100; every batch was sampled by the policy D versions
old (``fixed:D``), D in sync / 10 / 100 / 1000; 10,000 learner steps; 5 seeds. Recipes: pg (REINFORCE
with the batch-mean baseline), is (exact importance sampling), tis (c = 2), ppo, decoupled_ppo, vcpo,
dg (docs/ALGORITHMS.md). VCPO's ablations (VCPO-3) at D = 100 and 1000: ``vcpo`` without ess_lr
(opob + sequence tis c = 8) and without opob (sequence tis c = 8 + ess_lr, batch-mean baseline).

Seeds: the MNIST design of figures/budgets.py (first look at 5 seeds, more for undecided claims in
stages, figures/staging.py); each claim stages only the cells it compares (`CLAIM_RUNS`).

Per-seed numbers: the final test error (mean of the evaluations over the last 5% of training, 1,000
held-out images; a diverged run counts as chance, 0.9) and, for VCPO-1, each run's collapse (test
error rising more than 0.2 above its running minimum, or divergence), located to the evaluation at
which it shows, with the precursors read at per-step resolution from the run's optimizer-step records
(ESS and gradient norm of every learner step, ``runs/<id>.steps.csv``) in the window of the three
evaluation intervals up to it.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.common import Context
from figures.experiments.mnist_delay.evidence import Evidence, build
from figures.experiments.mnist_delay.judges import CLAIMS
from figures.experiments.mnist_delay.settings import NAME, configs, describe, staged_runs
from figures.staging import staged_evidence


def measure(ctx: Context) -> Evidence:
    """The experiment's evidence, look by look of its sequential design (`figures.staging.staged_evidence`)."""
    return staged_evidence(ctx, CLAIMS, "mnist", configs, staged_runs, build)


__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure", "staged_runs"]
