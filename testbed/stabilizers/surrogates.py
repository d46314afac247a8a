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


@register
@dataclass
class PMPO(Surrogate):
    """PMPO (Abdolmaleki et al. 2024, "Preference optimization as probabilistic inference", arXiv 2410.04166):
    maximum likelihood on accepted samples, its negative on rejected ones, and a KL term to a reference:

        J = alpha E_{y in accepted}[log pi(y)] - (1 - alpha) E_{y in rejected}[log pi(y)] - beta KL(pi_ref || pi)

    Accepted / rejected: sequences whose advantage (mean over their tokens) is > 0 / < 0 (ties are
    neither); log pi(y) = sum_t log pi(a_t | ...). The reference is the behaviour policy mu, the
    distribution the samples come from, so KL(mu || pi) = E_mu[log mu - log pi] is estimated on the
    batch without importance weights (its gradient: -E_mu[grad log pi]). Each expectation is a mean over
    its sequences, written as per-sequence weights (n valid sequences, n_a accepted, n_r rejected):

        c_i = alpha n / n_a [i accepted] - (1 - alpha) n / n_r [i rejected] + beta,

    objective c_i log pi(a_t) per token, aggregated by ``agg`` (``seq-mean-token-sum`` gives J exactly;
    the mean over sequences of c_i log pi(y_i) is J up to the constant beta E_mu[log mu]). The advantages'
    magnitudes do not enter, only their signs. Defaults: alpha = 0.5 (the paper's balanced case),
    beta = 0.1 (ours: the Delightful papers tuned PMPO as a baseline without stating the value). With
    beta too large the KL term outweighs the rejection (a rejected sequence's weight, beta - (1 - alpha)
    n / n_r, turns positive). Metrics: ``accept_frac``, ``reject_frac``, ``kl`` (mean over valid tokens of
    log mu - log pi).
    """

    name = "pmpo"
    alpha: float = 0.5
    beta: float = 0.1

    def __post_init__(self) -> None:
        check(0.0 <= self.alpha <= 1.0, f"pmpo: alpha must be in [0, 1], got {self.alpha}")
        check(self.beta >= 0.0, f"pmpo: beta must be >= 0, got {self.beta}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, Metrics]:
        p = prepare(terms)
        valid = p.seq_valid
        seq_adv = masked_sum(p.advantages, p.mask, dim=-1) / p.mask.sum(-1).clamp(min=1)
        accepted, rejected = valid & (seq_adv > 0), valid & (seq_adv < 0)
        n = valid.sum().clamp(min=1)
        c = (self.alpha * n / accepted.sum().clamp(min=1)) * accepted \
            - ((1.0 - self.alpha) * n / rejected.sum().clamp(min=1)) * rejected + self.beta
        metrics = base_metrics(p)
        metrics.defer("accept_frac", lambda: fraction(accepted, valid))
        metrics.defer("reject_frac", lambda: fraction(rejected, valid))
        metrics.defer("kl", lambda: -masked_sum(p.log_ratio.detach(), p.mask) / p.mask.sum().clamp(min=1))
        return -c.detach()[:, None] * p.logp, p.mask, metrics
