"""The data every stabilizer consumes (`PolicyTerms`) and what a surrogate returns (`LossOutput`).

All per-token tensors have shape ``[B, T]`` (``T = 1`` for bandits). ``advantages`` may also be
given per sequence (``[B]``) and is then broadcast over tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch
from torch import Tensor

NanPolicy = Literal["raise", "mask", "ignore"]


class Metrics(MutableMapping):
    """A component's metrics by name, each computed on first read.

    ``m.defer(name, fn)`` registers a metric whose value is ``fn()``; ``m.defer((a, b), fn)`` a group
    computed together (``fn`` returns a dict with those keys); ``m[name] = value`` stores a value as
    it is. Reading a deferred name runs its function once. A training loop that logs every k-th step
    therefore pays for the metrics on those steps only, and the values are the same as if they had
    been computed eagerly (the functions read detached tensors of this step). Values are 0-d tensors
    or floats: read them with ``float(v)``.
    """

    def __init__(self, values: dict[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = dict(values or {})
        self._deferred: dict[str, tuple[tuple[str, ...], Callable[[], Any]]] = {}
        self._order: list[str] = list(self._values)

    def defer(self, names: str | tuple[str, ...], fn: Callable[[], Any]) -> None:
        group = (names,) if isinstance(names, str) else tuple(names)
        for name in group:
            self._values.pop(name, None)
            self._deferred[name] = (group, fn)
            if name not in self._order:
                self._order.append(name)

    def __getitem__(self, name: str) -> Any:
        if name in self._deferred:
            group, fn = self._deferred[name]
            result = fn()
            values = {group[0]: result} if len(group) == 1 and not isinstance(result, dict) else result
            for key in group:
                self._deferred.pop(key, None)
                self._values[key] = values[key]
        return self._values[name]

    def __setitem__(self, name: str, value: Any) -> None:
        self._deferred.pop(name, None)
        self._values[name] = value
        if name not in self._order:
            self._order.append(name)

    def __delitem__(self, name: str) -> None:
        if name not in self._values and name not in self._deferred:
            raise KeyError(name)
        self._values.pop(name, None)
        self._deferred.pop(name, None)
        self._order.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._order))

    def __len__(self) -> int:
        return len(self._order)

    def __repr__(self) -> str:
        return f"Metrics({', '.join(self._order)})"


@dataclass(frozen=True)
class LossOutput:
    """A scalar loss with its gradient graph, and metrics with stable names.

    Metric values are 0-d tensors (or floats): computing them needs no host synchronisation, so a
    training loop reads them with ``float(v)`` only on the steps it logs."""

    loss: Tensor
    metrics: MutableMapping = field(default_factory=Metrics)


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
        mask at those tokens (and replaces the values by 0 so that no ``0 * inf`` appears);
        ``"ignore"`` checks nothing (for a caller that checks its inputs itself, once per batch).
        """
        if nan_policy not in ("raise", "mask", "ignore"):
            raise ValueError(f"nan_policy must be 'raise', 'mask' or 'ignore', got {nan_policy!r}")
        if nan_policy == "ignore":
            return self, 0
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
