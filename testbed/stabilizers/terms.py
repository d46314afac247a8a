"""The data every stabilizer consumes (`PolicyTerms`) and what a surrogate returns (`LossOutput`).

All per-token tensors have shape ``[B, T]`` (``T = 1`` for bandits). ``advantages`` may also be
given per sequence (``[B]``) and is then broadcast over tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import torch
from torch import Tensor

NanPolicy = Literal["raise", "mask"]


@dataclass(frozen=True)
class LossOutput:
    """A scalar loss with its gradient graph, and float metrics with stable names."""

    loss: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class PolicyTerms:
    """Per-token quantities of one minibatch.

    Attributes:
      logp: log pi_theta(a_t | h_t) under the learner, carrying gradients. [B, T]
      behavior_logp: log mu(a_t | h_t) recorded by the actor that sampled. Treated as a constant.
      advantages: A per token [B, T] or per sequence [B]. Treated as a constant.
      mask: 1 for tokens that count, 0 for padding. [B, T] (bool or float)
      proximal_logp: log pi_prox of a recent snapshot (AReaL's decoupled PPO), constant. Optional.
      versions: policy version that produced each token. Optional, [B, T] integer.
      group_ids: prompt group of each sequence (GRPO). Optional, [B] integer.
      rewards: scalar reward per sequence. Optional, [B].
    """

    logp: Tensor
    behavior_logp: Tensor
    advantages: Tensor
    mask: Tensor
    proximal_logp: Tensor | None = None
    versions: Tensor | None = None
    group_ids: Tensor | None = None
    rewards: Tensor | None = None

    def __post_init__(self) -> None:
        if self.logp.dim() != 2:
            raise ValueError(f"logp must have shape [B, T], got {tuple(self.logp.shape)}")
        shape = self.logp.shape
        for name in ("behavior_logp", "mask", "proximal_logp", "versions"):
            value = getattr(self, name)
            if value is not None and value.shape != shape:
                raise ValueError(f"{name} has shape {tuple(value.shape)}; expected {tuple(shape)} like logp")
        if self.advantages.dim() == 1:
            self.advantages = self.advantages[:, None].expand(shape)
        if self.advantages.shape != shape:
            raise ValueError(
                f"advantages has shape {tuple(self.advantages.shape)}; expected [B] or {tuple(shape)}"
            )
        for name in ("group_ids", "rewards"):
            value = getattr(self, name)
            if value is not None and value.shape != shape[:1]:
                raise ValueError(f"{name} has shape {tuple(value.shape)}; expected [B] = ({shape[0]},)")

    @property
    def fmask(self) -> Tensor:
        """The mask as float32 (the dtype every stabilizer computes in)."""
        return self.mask.to(torch.float32)

    def checked(self, nan_policy: NanPolicy = "raise") -> tuple[PolicyTerms, int]:
        """Return terms with non-finite inputs handled, and how many tokens were affected.

        ``nan_policy="raise"`` raises a ValueError naming the offending field; ``"mask"`` zeros the
        mask at those tokens (and replaces the values by 0 so that no ``0 * inf`` appears).
        """
        if nan_policy not in ("raise", "mask"):
            raise ValueError(f"nan_policy must be 'raise' or 'mask', got {nan_policy!r}")
        bad = torch.zeros(self.logp.shape, dtype=torch.bool, device=self.logp.device)
        names = []
        for name in ("logp", "behavior_logp", "advantages", "proximal_logp"):
            value = getattr(self, name)
            if value is None:
                continue
            nonfinite = ~torch.isfinite(value.detach())
            if bool(nonfinite.any()):
                names.append(name)
                bad |= nonfinite
        bad &= self.mask.bool()
        n_bad = int(bad.sum())
        if n_bad == 0:
            return self, 0
        if nan_policy == "raise":
            raise ValueError(
                f"non-finite values (NaN or inf) in {', '.join(names)} at {n_bad} unmasked tokens; "
                "pass nan_policy='mask' to drop those tokens instead"
            )
        keep = ~bad

        def clean(x: Tensor | None) -> Tensor | None:
            return None if x is None else torch.where(keep, x, torch.zeros_like(x))

        return (
            replace(
                self,
                logp=clean(self.logp),
                behavior_logp=clean(self.behavior_logp),
                advantages=clean(self.advantages),
                proximal_logp=clean(self.proximal_logp),
                mask=self.mask.bool() & keep,
            ),
            n_bad,
        )
