"""Health of a run: is the base still learning, and does its policy still explore every class?

A verdict measured on a stalled base (most gradients exactly zero because every group's rewards are
equal) or on a policy that has stopped predicting some class (a bandit policy that drives a class's
probability to ~0 never samples it again, so never learns it) is not evidence about staleness. The
runner records, for every optimizer step, the quantities below (`step_stats`), aggregates them over
each logging window (`window_summary`) and, at the end, flags the run (`run_health`).

Per optimizer step (``runs/<id>.steps.csv``):

* ``kind``: ``within`` when the previous optimizer step used the same batch (minibatch 2.. of an epoch,
  or a later epoch), ``across`` when it used the previous batch (the first step of a batch).
* ``grad_cos``: cos(g_t, g_{t-1}) of the raw surrogate gradients (before gradient transforms); NaN when
  either is exactly zero or there is no previous step (undefined, never 0).
* ``grad_norm``, ``ess`` (normalised ESS of the sequence ratios), ``ratio_max`` (largest token ratio),
  ``logratio_q95`` (95% quantile of the token log-ratios log pi - log mu): the cheap precursors of a
  collapse, at the step where they happen.
* ``zero_adv_frac``: fraction of the minibatch's samples whose advantage is exactly 0 (under GRPO, the
  members of groups whose rewards are all equal); ``zero_grad``: 1 when the raw gradient is exactly 0.
* ``entropy`` (nats per token) and ``max_prob`` (mean largest action probability per token) of the
  learner's policy on the minibatch.
* ``projected``, ``skipped``: GAC's action on this step (NaN for a recipe without GAC).

Per logging window (columns of results.csv): ``grad_cos_within`` / ``grad_cos_across`` (mean of the
defined cosines of that kind; NaN when none is defined), ``zero_adv_frac``, ``zero_grad_frac``,
``entropy``, ``max_prob``, ``gac_projected_frac``, ``gac_skipped_frac``, ``grad_cos_nan_frac`` (the
share of the window's cosines that were undefined, so no NaN is dropped unseen), and at each evaluation
``lost_classes``: the number of test-set classes the greedy policy never predicts (NaN where the task
is not a classification).

Per run (summary): ``zero_grad_frac_late`` (zero-gradient share of the optimizer steps in the second
half of training), ``stalled`` = ``zero_grad_frac_late > STALL_FRAC`` ("most gradients exactly zero"),
``lost_classes_final`` and ``health``: the first failing flag in the order stalled, lost_class, else
healthy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from testbed.stabilizers.numerics import effective_sample_size, safe_exp, sequence_log_ratio

STALL_FRAC = 0.5
HEALTH = ("healthy", "stalled", "lost_class")
NAN = float("nan")


def step_stats(logits: Tensor, logp: Tensor, behavior_logp: Tensor, advantages: Sequence[Tensor], grads: Tensor,
               prev_grads: Tensor | None) -> dict[str, Tensor]:
    """The per-optimizer-step record's numbers (module docstring) for n runs of one loop at once, one entry per
    run in each [n] tensor: ``logits`` [n, B, T, A], ``logp`` / ``behavior_logp`` [n, B, T] (the learner's and
    the behaviour's token log-probs), ``advantages`` (one tensor per run), ``grads`` / ``prev_grads`` [n, P]
    (this and the previous optimizer step's raw flat gradients; None when there is no previous step).

    * ``grad_norm`` = ||g||, ``zero_grad`` = [||g|| = 0], ``grad_cos`` = <g, g'> / (||g|| ||g'||) (NaN when
      either norm is 0 or there is no g');
    * ``ess`` = (sum_i w_i)^2 / (B sum_i w_i^2) of the sequence ratios w_i = exp(sum_t log pi - log mu)
      (`effective_sample_size`, in log space), ``ratio_max`` = max_{i,t} exp(log pi - log mu) (saturated,
      `safe_exp`), ``logratio_q95`` the 95% quantile of the token log-ratios (float64);
    * ``zero_adv_frac``: share of advantages exactly 0; ``entropy`` / ``max_prob``: mean over tokens of
      -sum_a p log p and of max_a p.

    Each run's value is computed row by row with the reductions a single run's tensors get, so it equals what
    the same run alone gives, bit for bit (tests/integration/test_one_loop.py)."""
    n = logp.shape[0]
    everywhere = torch.ones_like(logp, dtype=torch.bool)
    log_r = logp - behavior_logp
    seq_lr = sequence_log_ratio(logp, behavior_logp, everywhere)  # [n, B]
    norms = torch.linalg.vector_norm(grads, dim=1)
    if prev_grads is None:
        cos = torch.full((n,), NAN)
    else:
        prev_norms = torch.linalg.vector_norm(prev_grads, dim=1)
        defined = (norms != 0) & (prev_norms != 0)
        cos = torch.where(defined, (grads * prev_grads).sum(1) / (norms * prev_norms), NAN)
    token_logp = torch.log_softmax(logits.detach().float(), -1)
    p = token_logp.exp()
    same = len({a.shape for a in advantages}) == 1
    zero_adv = (torch.stack(advantages).flatten(1) == 0).float().mean(1) if same and advantages[0].numel() else \
        torch.tensor([zero_fraction(a) for a in advantages])
    return {"grad_cos": cos, "grad_norm": norms, "zero_grad": (norms == 0).float(),
            "ess": effective_sample_size(seq_lr),
            "ratio_max": safe_exp(log_r.detach()).flatten(1).max(1).values,
            "logratio_q95": torch.quantile(log_r.detach().flatten(1).double(), 0.95, dim=1),
            "zero_adv_frac": zero_adv,
            "entropy": (-(p * token_logp).sum(-1)).flatten(1).mean(1), "max_prob": p.max(-1).values.flatten(1).mean(1)}


def zero_fraction(x: Tensor) -> float:
    """Share of the entries of ``x`` that are exactly 0 (NaN for an empty tensor)."""
    return float((x == 0).float().mean()) if x.numel() else NAN


def _nanmean(values: Sequence[float]) -> float:
    good = [v for v in values if not math.isnan(v)]
    return sum(good) / len(good) if good else NAN


def window_summary(steps: Sequence[dict[str, Any]]) -> dict[str, float]:
    """Aggregate the optimizer steps of one logging window (module docstring); NaN where undefined."""
    if not steps:
        return {}
    cos = [s["grad_cos"] for s in steps]
    out = {
        "grad_cos_within": _nanmean([s["grad_cos"] for s in steps if s["kind"] == "within"]),
        "grad_cos_across": _nanmean([s["grad_cos"] for s in steps if s["kind"] == "across"]),
        "grad_cos_nan_frac": sum(math.isnan(c) for c in cos) / len(cos),
        "zero_grad_frac": sum(s["zero_grad"] for s in steps) / len(steps),
    }
    for key in ("zero_adv_frac", "entropy", "max_prob"):
        out[key] = _nanmean([s[key] for s in steps])
    out["gac_projected_frac"] = _nanmean([s["projected"] for s in steps])
    out["gac_skipped_frac"] = _nanmean([s["skipped"] for s in steps])
    return out


def classification_split(task: Any) -> tuple[Tensor, Tensor] | None:
    """(test contexts [N], labels [N]) of a one-step classification task (``labels``, ``n_train``,
    ``n_test``: the test split follows the training split), else None."""
    if int(getattr(task, "horizon", 0)) != 1 or not all(hasattr(task, k) for k in ("labels", "n_train", "n_test")):
        return None
    idx = torch.arange(task.n_train, task.n_train + task.n_test)
    return idx, task.labels[idx]


def lost_classes(predictions: Tensor, labels: Tensor) -> list[int]:
    """Number of classes present in ``labels`` [N] that ``predictions`` [S, N] never hit, per slot."""
    classes = torch.unique(labels)
    hit = (predictions.unsqueeze(-1) == classes).any(-2)  # [S, C]
    return (~hit).sum(-1).tolist()


@torch.no_grad()
def count_lost_classes(task: Any, policy: nn.Module | Any, n_slots: int, chunk: int = 5000) -> list[float]:
    """`lost_classes` of the greedy policy of every slot on the task's whole test split; NaN per slot
    when the task is not a classification."""
    split = classification_split(task)
    if split is None:
        return [NAN] * n_slots
    idx, labels = split
    preds = []
    for part in idx.split(chunk):
        x = part.expand(n_slots, -1)
        logits = task.logits(policy, x, torch.zeros((*x.shape, 1), dtype=torch.long))
        preds.append(logits[:, :, 0].argmax(-1))
    return [float(v) for v in lost_classes(torch.cat(preds, 1), labels)]


def run_health(steps: Sequence[dict[str, Any]], total_steps: int, lost_final: float) -> dict[str, Any]:
    """The per-run flags of the module docstring from the run's optimizer-step records."""
    late = [s["zero_grad"] for s in steps if s["step"] > total_steps / 2]
    frac = sum(late) / len(late) if late else NAN
    stalled = bool(late) and frac > STALL_FRAC
    lost = None if math.isnan(lost_final) else int(lost_final)
    health = "stalled" if stalled else "lost_class" if lost else "healthy"
    return {"zero_grad_frac_late": frac, "stalled": stalled, "lost_classes_final": lost, "health": health}
