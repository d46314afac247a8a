"""Advantage estimators (hook 1): per-sequence rewards -> per-sequence advantages.

All return float32 tensors of shape [B] and are called under ``torch.no_grad()`` by the recipe.
"""

from __future__ import annotations

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
        gid = torch.zeros_like(r, dtype=torch.long) if group_ids is None else group_ids
        mean, std = group_stats(r, gid)
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
