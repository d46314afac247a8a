"""Surrogate objectives (hook 2). Each returns a per-token loss matrix, the mask it used, metrics.

The loss is minus the objective; advantages and every importance weight are constants (detached).

Conventions shared by every surrogate (here and in `importance`, `ppo_family`, `dg`):

* Inputs are upcast to float32 and the values at masked positions are replaced by 0 with
  ``torch.where`` (`prepare`), so padding that holds NaN or inf can neither reach the loss nor
  its gradient (``where`` routes an exact 0 gradient to the unselected branch).
* A token or sequence that a surrogate *rejects* (mis, m2po, decoupled_ppo's behaviour cap, the
  Kondo gate) gets weight 0 but keeps its place in the aggregation's denominator, as AReaL and
  M2PO normalise (by all valid tokens), so the loss scale does not jump with the rejection rate.
  The mask returned is therefore the input mask; the rejected fraction is the ``mask_frac`` metric.
* Fractions (``clip_frac``, ``mask_frac``) count units at the level the surrogate acts on: tokens
  for token-level weights, sequences (with at least one token) for sequence-level ones.
* Every surrogate reports ``ratio_max`` / ``ratio_mean`` / ``ratio_min`` of the token ratio
  pi_theta / mu and ``ess``, the normalised effective sample size of the sequence ratios.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor

from .base import Surrogate, check
from .numerics import effective_sample_size, f32, masked_sum, ratio_metrics
from .registry import register
from .terms import Metrics, PolicyTerms

LEVELS = ("token", "sequence")


class Prepared:
    """float32 views of `PolicyTerms` with masked positions zeroed; ``logp`` keeps its graph.

    ``log_ratio`` is logp - behavior_logp (behaviour detached); ``seq_log_ratio`` its masked sum per
    sequence [B] (detached) and ``seq_valid`` the sequences with at least one token are computed
    when first used (token-level surrogates need them only for their metrics).
    """

    def __init__(self, logp: Tensor, behavior_logp: Tensor, advantages: Tensor, mask: Tensor,
                 proximal_logp: Tensor | None, log_ratio: Tensor) -> None:
        self.logp, self.behavior_logp, self.advantages, self.mask = logp, behavior_logp, advantages, mask
        self.proximal_logp, self.log_ratio = proximal_logp, log_ratio

    @functools.cached_property
    def seq_log_ratio(self) -> Tensor:
        return masked_sum(self.log_ratio.detach(), self.mask, dim=-1)

    @functools.cached_property
    def seq_valid(self) -> Tensor:
        return self.mask.any(dim=-1)


def _clean(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask, f32(x), torch.zeros((), dtype=torch.float32, device=x.device))


def prepare(terms: PolicyTerms) -> Prepared:
    """Upcast to float32 and zero the masked positions (see the module docstring)."""
    mask = terms.mask.to(torch.bool)
    logp = _clean(terms.logp, mask)
    blogp = _clean(terms.behavior_logp, mask).detach()
    adv = _clean(terms.advantages, mask).detach()
    prox = None if terms.proximal_logp is None else _clean(terms.proximal_logp, mask).detach()
    return Prepared(logp, blogp, adv, mask, prox, logp - blogp)


def base_metrics(p: Prepared) -> Metrics:
    """Token-ratio statistics and the normalised ESS of the sequence ratios (computed when read)."""
    metrics = Metrics()
    log_r = p.log_ratio.detach()
    metrics.defer(("ratio_max", "ratio_mean", "ratio_min"), lambda: ratio_metrics(log_r, p.mask))
    metrics.defer("ess", lambda: effective_sample_size(p.seq_log_ratio, p.seq_valid))
    return metrics


def fraction(flag: Tensor, valid: Tensor) -> Tensor:
    """Fraction of ``valid`` entries where ``flag`` holds (0 when nothing is valid), a 0-d tensor."""
    return (flag & valid).sum() / valid.sum().clamp(min=1)


def unit_log_weight(p: Prepared, level: str) -> tuple[Tensor, Tensor]:
    """Detached log importance weight per unit, and the units' validity.

    ``level="token"``: log r_t = logp_t - blogp_t, shape [B, T], valid = mask.
    ``level="sequence"``: log R_seq = sum_t m_t log r_t, shape [B, 1] (broadcasts over tokens),
    valid = sequences with at least one token.
    """
    if level == "token":
        return p.log_ratio.detach(), p.mask
    return p.seq_log_ratio[:, None], p.seq_valid[:, None]


def check_level(name: str, level: str) -> None:
    check(level in LEVELS, f"{name}: level must be one of {', '.join(LEVELS)}; got {level!r}")


@register
@dataclass
class PG(Surrogate):
    """REINFORCE (Williams 1992): objective A * log pi_theta(a|h). No off-policy correction."""

    name = "pg"

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        return -p.advantages * p.logp, p.mask, base_metrics(p)
