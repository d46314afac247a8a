"""The three kinds of stabilizer component and the batch statistics passed between them.

* `Advantage`: rewards (+ group ids, sequence log-ratios, score norms) -> advantages [B].
* `Surrogate`: `PolicyTerms` -> per-token loss matrix, the mask actually used, metrics.
* `GradientTransform`: parameters' gradients (modified in place) + `BatchStats` -> lr scale, metrics.

Components are dataclasses: their fields are their parameters, which is what the spec parser
(`registry.build`) fills in and validates. Each subclass states its formula and paper.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from .aggregation import aggregate
from .numerics import effective_sample_size, sequence_log_ratio
from .terms import LossOutput, PolicyTerms


def component_params(obj_or_cls: Any) -> dict[str, Any]:
    """The parameter names (dataclass fields) of a component, with their current or default values."""
    out = {}
    for f in fields(obj_or_cls):
        if not f.init or f.name.startswith("_"):
            continue
        out[f.name] = getattr(obj_or_cls, f.name, f.default)
    return out


def check(condition: bool, message: str) -> None:
    """Raise a ValueError with ``message`` unless ``condition`` holds (for parameter validation)."""
    if not condition:
        raise ValueError(message)


@dataclass
class Advantage(ABC):
    """Turns per-sequence rewards into per-sequence advantages (constants for the loss)."""

    name: ClassVar[str]
    # True when the estimator needs ||grad log pi(tau_i)||^2 per sequence (OPOB).
    needs_score_norms: ClassVar[bool] = False
    # True when it uses the sequences' log importance ratios (off-policy baselines).
    needs_log_ratio: ClassVar[bool] = False

    @abstractmethod
    def __call__(
        self,
        rewards: Tensor,
        *,
        group_ids: Tensor | None = None,
        seq_log_ratio: Tensor | None = None,
        score_sq_norms: Tensor | None = None,
    ) -> Tensor:
        """Advantages [B] (float32, detached)."""


@dataclass
class Surrogate(ABC):
    """A policy-gradient objective; the loss is minus the aggregated per-token objective."""

    name: ClassVar[str]

    @abstractmethod
    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor | float]]:
        """Return (loss matrix [B, T] in float32, mask actually used [B, T] bool, metrics)."""

    def __call__(self, terms: PolicyTerms, agg: str = "token-mean", **agg_kwargs: Any) -> LossOutput:
        loss_mat, mask, metrics = self.per_token(terms)
        return LossOutput(aggregate(loss_mat, mask, agg, **agg_kwargs), metrics)

    def state_dict(self) -> dict[str, Any]:
        """Internal state needed for an exact resume (e.g. a random stream); most surrogates have none."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state


@dataclass
class BatchStats:
    """Statistics of the minibatch that gradient transforms may use.

    ``seq_log_ratio`` is log R_seq = sum_t (logp_t - behavior_logp_t) per sequence [B], detached.
    ``seq_mask`` marks the sequences that hold at least one token (None: all of them).
    """

    seq_log_ratio: Tensor | None = None
    extra: dict[str, Tensor] = field(default_factory=dict)
    seq_mask: Tensor | None = None

    @classmethod
    def from_terms(cls, terms: PolicyTerms | None) -> BatchStats:
        if terms is None:
            return cls()
        with torch.no_grad():
            return cls(
                seq_log_ratio=sequence_log_ratio(terms.logp, terms.behavior_logp, terms.mask),
                seq_mask=terms.mask.to(torch.bool).any(dim=-1),
            )

    @property
    def ess(self) -> float | None:
        """Normalised effective sample size of the sequence weights, or None if unknown."""
        if self.seq_log_ratio is None:
            return None
        return float(effective_sample_size(self.seq_log_ratio, self.seq_mask))


@dataclass
class TransformResult:
    """What a gradient transform did: a multiplicative learning-rate scale for this step, and metrics."""

    lr_scale: float = 1.0
    metrics: dict[str, Tensor | float] = field(default_factory=dict)  # 0-d tensors or floats


@dataclass
class GradientTransform(ABC):
    """Acts after backward and before ``optimizer.step()``: edits ``.grad`` in place and/or scales lr."""

    name: ClassVar[str]

    @abstractmethod
    def __call__(self, params: list[torch.nn.Parameter], stats: BatchStats) -> TransformResult:
        """Modify ``p.grad`` of ``params`` in place; return the lr scale and metrics."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        del state
