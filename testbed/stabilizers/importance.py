"""Importance-sampling surrogates: exact (is), truncated (tis) and masked / rejection (mis).

All three have the objective sg(w) * A * log pi_theta with a detached weight w at token level
(w_t = r_t = pi_theta / mu) or sequence level (w = R_seq = prod_t r_t, the same for every token
of the sequence). Weights are formed and compared in log space and saturated (`safe_exp`) only
for the final multiplication, so log-ratios of +-100 give finite losses and gradients.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch import Tensor

from .base import Surrogate, check
from .numerics import safe_exp
from .registry import register
from .surrogates import base_metrics, check_level, fraction, prepare, unit_log_weight
from .terms import PolicyTerms


@register
@dataclass
class IS(Surrogate):
    """Exact importance sampling: objective sg(w) * A * log pi_theta, w = r_t or R_seq.

    Unbiased for E_pi[A grad log pi] when mu is the true sampler (Precup et al. 2000; see
    ALGORITHMS.md). ``level``: "token" (w_t = r_t) or "sequence" (w = R_seq for every token).
    """

    name = "is"
    level: str = "token"

    def __post_init__(self) -> None:
        check_level(self.name, self.level)

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        log_w, _ = unit_log_weight(p, self.level)
        loss = -safe_exp(log_w) * p.advantages * p.logp
        return loss, p.mask, base_metrics(p)


@register
@dataclass
class TIS(Surrogate):
    """Truncated importance sampling: objective sg(clip(w, lo, c)) * A * log pi_theta.

    w = r_t (``level="token"``) or R_seq (``"sequence"``). c = 2 is verl's default; VCPO
    (arXiv 2602.17616) uses sequence level with c = 8. ``lo`` is an optional lower bound (0: none).
    ``c = inf`` gives exact `IS`. Metric ``clip_frac``: fraction of units whose weight was truncated.
    """

    name = "tis"
    c: float = 2.0
    level: str = "token"
    lo: float = 0.0

    def __post_init__(self) -> None:
        check_level(self.name, self.level)
        check(self.c > 0, f"tis: c must be > 0 (inf for no truncation), got {self.c}")
        check(0.0 <= self.lo <= self.c, f"tis: lo must satisfy 0 <= lo <= c = {self.c}, got {self.lo}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        log_w, valid = unit_log_weight(p, self.level)
        log_lo = math.log(self.lo) if self.lo > 0 else -math.inf
        log_c = math.log(self.c)
        clipped = (log_w > log_c) | (log_w < log_lo)
        loss = -safe_exp(log_w.clamp(log_lo, log_c)) * p.advantages * p.logp
        metrics = base_metrics(p)
        metrics.defer("clip_frac", lambda: fraction(clipped, valid))
        return loss, p.mask, metrics


@register
@dataclass
class MIS(Surrogate):
    """Masked importance sampling (rejection): objective 1{lo <= w <= hi} * sg(w) * A * log pi_theta.

    Units (tokens, or whole sequences with ``level="sequence"``) whose weight leaves [lo, hi] are
    masked out (weight 0), not clipped. AReaL's behaviour cap (arXiv 2505.24298) is
    ``mis(lo=0, hi=5)``; TRL's ``sequence_mask`` is a sequence-level instance. The defaults
    lo = 0.5, hi = 2 (symmetric in log space) are our choice. Metric ``mask_frac``: fraction of
    units rejected.
    """

    name = "mis"
    lo: float = 0.5
    hi: float = 2.0
    level: str = "token"

    def __post_init__(self) -> None:
        check_level(self.name, self.level)
        check(0.0 <= self.lo <= 1.0 <= self.hi, f"mis: need 0 <= lo <= 1 <= hi, got lo={self.lo}, hi={self.hi}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        log_w, valid = unit_log_weight(p, self.level)
        log_lo = math.log(self.lo) if self.lo > 0 else -math.inf
        rejected = (log_w > math.log(self.hi)) | (log_w < log_lo)
        weight = safe_exp(log_w).masked_fill(rejected, 0.0)
        loss = -weight * p.advantages * p.logp
        metrics = base_metrics(p)
        metrics.defer("mask_frac", lambda: fraction(rejected, valid))
        return loss, p.mask, metrics
