"""Surrogate objectives (hook 2). Each returns a per-token loss matrix, the mask it used, metrics.

The loss is minus the objective; advantages and every importance weight are constants (detached).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Surrogate
from .numerics import f32, log_ratio, ratio_metrics
from .registry import register
from .terms import PolicyTerms


@register
@dataclass
class PG(Surrogate):
    """REINFORCE (Williams 1992): objective A * log pi_theta(a|h). No off-policy correction."""

    name = "pg"

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, float]]:
        mask = terms.mask.to(torch.bool)
        adv = f32(terms.advantages).detach()
        loss = -adv * f32(terms.logp)
        metrics = ratio_metrics(log_ratio(terms.logp, terms.behavior_logp).detach(), mask)
        return loss, mask, metrics
