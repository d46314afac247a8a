"""Gradient transforms (hook 3): act on ``.grad`` after backward and before ``optimizer.step()``."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import BatchStats, GradientTransform, TransformResult, check
from .registry import register


@register
@dataclass
class ClipNorm(GradientTransform):
    """Global gradient-norm clipping: g <- g * min(1, max_norm / ||g||) (Pascanu et al. 2013)."""

    name = "clip_norm"
    max_norm: float = 1.0

    def __post_init__(self) -> None:
        check(self.max_norm > 0, f"clip_norm: max_norm must be > 0, got {self.max_norm}")

    def __call__(self, params: list[torch.nn.Parameter], stats: BatchStats) -> TransformResult:
        norm = torch.nn.utils.clip_grad_norm_(params, self.max_norm) if params else torch.zeros(())
        return TransformResult(1.0, {"grad_norm": float(norm), "clipped": float(norm > self.max_norm)})
