"""Closed-form quantities and bounds of ALGORITHMS.md's "Analytic results to check", each with its check.

* `delayed_optimization`: 1 delayed linear recurrence, 2 lag-1 autocorrelation of applied gradients,
  3 delayed-SGD bound (Lian et al. 2015).
* `delight`: 4 the DG gate as a maximiser, 5 Lemma 1, 6 the multi-context proposition,
  7 contamination (DG arXiv 2603.14608, 2603.20521).
* `importance`: 8 exact and truncated importance sampling, 9 the OPOB baseline and B/ESS.
* `baseline_drift`: 10 the drift b (pi - mu) of REINFORCE with a baseline under a stale sampler (ours).
* `checks`: the `Check` row and the shared tolerances; `estimators`: the real stabilizers'
  gradients on softmax policies; `report`: ``python -m theory report``.

Functions return numbers (predicted values, measured values, tolerances), never booleans.
"""

from .checks import Check

__all__ = ["Check"]
