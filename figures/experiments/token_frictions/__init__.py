"""Token reversal with each friction alone and all four together: DDG-2.

Setting (DDG arXiv 2603.20521, from a secondary summary: M = 2, H = 10, a decoder-only transformer with
d_model 64, 2 layers, 2 heads, 10 actors, 100 episodes per step, Adam): the testbed's token reversal
(testbed/tasks/token_reversal.py), one optimizer step per batch, 1,000 learner steps, 3 seeds; methods
pg, pmpo, ppo, dg (the paper's four). How the paper simulates its frictions is not known; ours are the
frozen preset of testbed/frictions.py (`token_reversal_preset`), calibrated on the baselines alone (PG,
PPO, PMPO; DG never run) by the rule in sweeps/calibration/RULE.md, its table in TABLE.md:

* staleness: each actor chunk lagged 0 or 1 versions uniformly (``uniform:1``);
* actor bugs: 2 of the 10 actors sample at temperature 2 while recording the clean policy's log-probs;
* reward corruption: 1% of episodes get 1 - r;
* rare discovery: nothing for fewer than 7 of the H = 10 tokens right, the fraction right above that
  (graded); without it every correct token earns its share (``partial_credit``), the task's documented
  "rare discovery off". At another H (DDG-3's sweep) the threshold keeps its fraction of H, rounded up
  (`rare_threshold`).

Metric: the fraction of sampled held-out sequences not exactly right (the paper's), each held-out
context sampled several times (``n_eval`` samples per evaluation); per seed the mean over the last 5%
of the evaluations.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.common import Context
from figures.experiments.token_frictions.evidence import Evidence, build
from figures.experiments.token_frictions.judges import CLAIMS
from figures.experiments.token_frictions.settings import NAME, configs, describe, staged_runs
from figures.staging import staged_evidence


def measure(ctx: Context) -> Evidence:
    """The experiment's evidence, look by look of its sequential design (`figures.staging.staged_evidence`)."""
    return staged_evidence(ctx, CLAIMS, "tr", configs, staged_runs, build)


__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure", "staged_runs"]
