"""Advantage estimators (hook 1): per-sequence rewards -> per-sequence advantages.

All return float32 tensors of shape [B] and are called under ``torch.no_grad()`` by the recipe.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Advantage, check
from .registry import register


def group_stats(values: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Per-element mean and (population) std of its group: ([B], [B])."""
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n_groups = int(inverse.max()) + 1 if inverse.numel() else 0
    count = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, torch.ones_like(values))
    total = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, values)
    mean = (total / count)[inverse]
    sq = torch.zeros(n_groups, dtype=values.dtype, device=values.device).index_add_(0, inverse, (values - mean) ** 2)
    std = torch.sqrt(sq / count)[inverse]
    return mean, std


def _groups(rewards: Tensor, group_ids: Tensor | None) -> Tensor:
    """The group ids, or one group holding the whole batch."""
    return torch.zeros_like(rewards, dtype=torch.long) if group_ids is None else group_ids


@register
@dataclass
class Raw(Advantage):
    """A_i = R_i (no baseline)."""

    name = "raw"

    def __call__(self, rewards: Tensor, **_: object) -> Tensor:
        return rewards.to(torch.float32)


@register
@dataclass
class BatchMean(Advantage):
    """A_i = R_i - mean_j R_j (batch-mean baseline; the plain REINFORCE-with-baseline estimator)."""

    name = "mean"

    def __call__(self, rewards: Tensor, **_: object) -> Tensor:
        r = rewards.to(torch.float32)
        return r - r.mean() if r.numel() else r


@register
@dataclass
class Group(Advantage):
    """GRPO (Shao et al. 2024, arXiv 2402.03300): A_i = (R_i - mean_g) / (std_g + eps) within prompt group g.

    Without ``group_ids`` the whole batch is one group.
    """

    name = "group"
    eps: float = 1e-6

    def __post_init__(self) -> None:
        check(self.eps > 0, f"group: eps must be > 0, got {self.eps}")

    def __call__(self, rewards: Tensor, *, group_ids: Tensor | None = None, **_: object) -> Tensor:
        r = rewards.to(torch.float32)
        mean, std = group_stats(r, _groups(r, group_ids))
        return (r - mean) / (std + self.eps)


@register
@dataclass
class Auto(Advantage):
    """The default: GRPO group z-score when ``group_ids`` are given, else the batch-mean baseline."""

    name = "auto"

    def __call__(self, rewards: Tensor, *, group_ids: Tensor | None = None, **_: object) -> Tensor:
        if group_ids is None:
            return BatchMean()(rewards)
        return Group()(rewards, group_ids=group_ids)


@register
@dataclass
class DrGRPO(Advantage):
    """Dr. GRPO (Liu et al., arXiv 2503.20783): A_i = R_i - mean_g, the group mean without the std division.

    Without ``group_ids`` the whole batch is one group.
    """

    name = "dr_grpo"

    def __call__(self, rewards: Tensor, *, group_ids: Tensor | None = None, **_: object) -> Tensor:
        r = rewards.to(torch.float32)
        mean, _ = group_stats(r, _groups(r, group_ids))
        return r - mean


def _check_finite(name: str, x: Tensor | None) -> None:
    if x is not None and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf; weights must be finite")


def group_softmax_mean(values: Tensor, log_weights: Tensor, group_ids: Tensor) -> Tensor:
    """Per-element weighted mean of its group, sum_j w_j v_j / sum_j w_j with w = exp(log_weights).

    Computed in log space (weights normalised by the group's largest log-weight), so weights up to
    exp(+-1e4) are exact. A group whose weights are all 0 (log-weight -inf) falls back to the plain
    group mean. Returns [B].
    """
    _, inverse = torch.unique(group_ids, return_inverse=True)
    n = int(inverse.max()) + 1 if inverse.numel() else 0
    lw = log_weights.to(torch.float64)
    top = torch.full((n,), float("-inf"), dtype=lw.dtype, device=lw.device).scatter_reduce(
        0, inverse, lw, reduce="amax", include_self=True
    )
    empty = torch.isinf(top) & (top < 0)
    shifted = torch.where(empty[inverse], torch.zeros_like(lw), lw - torch.where(empty, 0.0, top)[inverse])
    w = torch.exp(shifted)
    num = torch.zeros(n, dtype=lw.dtype, device=lw.device).index_add_(0, inverse, w * values.to(lw.dtype))
    den = torch.zeros(n, dtype=lw.dtype, device=lw.device).index_add_(0, inverse, w)
    return (num / den)[inverse].to(torch.float32)


@register
@dataclass
class OPOB(Advantage):
    """VCPO's off-policy optimal baseline (arXiv 2602.17616; code mit-han-lab/vcpo).

    For the estimator (1/N) sum_i w_i (R_i - b) grad log pi(tau_i), the constant baseline of least
    variance is b* = sum_i w_i^2 ||g_i||^2 R_i / sum_i w_i^2 ||g_i||^2, g_i = grad log pi(tau_i),
    w_i = R_seq,i the unclipped sequence ratio (from ``seq_log_ratio``). It is computed per prompt
    group (whole batch without ``group_ids``) in log space, and, as the official code does, the
    advantage is (R_i - b_g) / (std_g + eps) with std_g the population std of the group's raw
    rewards (``std_normalize=False``: R_i - b_g).

    ``score_sq_norms`` (||g_i||^2 per sequence, see `score_norms.score_sq_norms`) is optional:
    without it ||g_i||^2 = 1 for all i, i.e. b = sum w^2 R / sum w^2. Without ``seq_log_ratio``
    w = 1 (on-policy), and b is the (score-norm weighted) group mean.

    ``code_variant=True`` uses the official code's weighting, in which the truncated ratio also
    sits inside the gradient norm: weight_i = w_i^2 min(w_i, trunc_c)^2 ||g_i||^2 (w^4 for w < c).
    """

    name = "opob"
    needs_log_ratio = True
    needs_score_norms = True
    eps: float = 1e-6
    std_normalize: bool = True
    code_variant: bool = False
    trunc_c: float = 8.0

    def __post_init__(self) -> None:
        check(self.eps > 0, f"opob: eps must be > 0, got {self.eps}")
        check(self.trunc_c > 0, f"opob: trunc_c must be > 0, got {self.trunc_c}")

    def __call__(
        self,
        rewards: Tensor,
        *,
        group_ids: Tensor | None = None,
        seq_log_ratio: Tensor | None = None,
        score_sq_norms: Tensor | None = None,
    ) -> Tensor:
        r = rewards.to(torch.float32)
        gid = _groups(r, group_ids)
        _check_finite("seq_log_ratio", seq_log_ratio)
        _check_finite("score_sq_norms", score_sq_norms)
        lw = torch.zeros_like(r, dtype=torch.float64) if seq_log_ratio is None else seq_log_ratio.to(torch.float64)
        log_weight = 2.0 * lw
        if self.code_variant:
            log_weight = log_weight + 2.0 * lw.clamp(max=math.log(self.trunc_c))
        if score_sq_norms is not None:
            if bool((score_sq_norms < 0).any()):
                raise ValueError("score_sq_norms must be >= 0 (squared norms)")
            log_weight = log_weight + torch.log(score_sq_norms.to(torch.float64))
        baseline = group_softmax_mean(r, log_weight, gid)
        if not self.std_normalize:
            return r - baseline
        _, std = group_stats(r, gid)
        return (r - baseline) / (std + self.eps)


@register
@dataclass
class SNISMean(Advantage):
    """Self-normalised importance-sampling mean baseline: A_i = R_i - b_g, b_g = sum_j w_j R_j / sum_j w_j.

    w = R_seq (unclipped sequence ratio), per group (whole batch without ``group_ids``), in log
    space. This is the baseline a summary of VCPO (arXiv 2602.17616) states; it is *not* VCPO's
    minimum-variance baseline (that is `OPOB`). Without ``seq_log_ratio`` it is the group mean.
    """

    name = "snis_mean"
    needs_log_ratio = True

    def __call__(
        self, rewards: Tensor, *, group_ids: Tensor | None = None, seq_log_ratio: Tensor | None = None, **_: object
    ) -> Tensor:
        r = rewards.to(torch.float32)
        _check_finite("seq_log_ratio", seq_log_ratio)
        lw = torch.zeros_like(r) if seq_log_ratio is None else seq_log_ratio
        return r - group_softmax_mean(r, lw, _groups(r, group_ids))
