"""Gradient transforms around someone else's ``optimizer.step()`` (shared by the verl and TRL plugins).

The loss calls of an accumulation window deposit their per-sequence log-ratios (`collect`);
just before the step, `before_step` applies the recipe's transforms to the optimizer's gradients
with those statistics (hence ESS) and multiplies every param group's lr by the transforms' scale;
`after_step` restores the lr, so the scale lasts for that step only (as ``Recipe.step`` does). A
scale of exactly 0 (gac's skip) makes the step a no-op, as ``Recipe.step`` skips it: the gradients
are set to None, and torch optimizers leave parameters without a gradient (and their state) alone.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from testbed.stabilizers import BatchStats, Recipe
from testbed.stabilizers.numerics import sequence_log_ratio


class TransformStep:
    def __init__(self) -> None:
        self.pending: list[tuple[Tensor, Tensor]] = []
        self.saved_lr: dict[int, list[float]] = {}
        self.history: list[dict[str, float]] = []

    def collect(self, logp: Tensor, behavior_logp: Tensor, mask: Tensor) -> None:
        """Record the sequence log-ratios of one loss call (detached)."""
        with torch.no_grad():
            self.pending.append((sequence_log_ratio(logp.detach(), behavior_logp, mask), mask.bool().any(dim=-1)))

    def batch_stats(self) -> BatchStats:
        """The statistics gathered since the last step (emptied); no ratios if no loss call recorded any."""
        stats = BatchStats()
        if self.pending:
            stats.seq_log_ratio = torch.cat([lr.reshape(-1).float() for lr, _ in self.pending])
            stats.seq_mask = torch.cat([ok.reshape(-1) for _, ok in self.pending])
        self.pending.clear()
        return stats

    def before_step(self, recipe: Recipe, optimizer: Any, params: Any = None) -> dict[str, float]:
        """Transform the gradients of ``params`` (default: the optimizer's) and scale lr; return the metrics."""
        if params is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
        scale, raw = recipe.transform_gradients(params, self.batch_stats())
        scale = float(scale)
        metrics = {key: float(value) for key, value in raw.items()}
        self.history.append(metrics)
        if scale == 0.0:
            for p in params:
                p.grad = None
        elif scale != 1.0:
            self.saved_lr[id(optimizer)] = [group["lr"] for group in optimizer.param_groups]
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * scale
        return metrics

    def after_step(self, optimizer: Any) -> None:
        saved = self.saved_lr.pop(id(optimizer), None)
        if saved is not None:
            for group, lr in zip(optimizer.param_groups, saved, strict=True):
                group["lr"] = lr
