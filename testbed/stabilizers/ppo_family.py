"""Trust-region surrogates: ppo (with dual clip), decoupled_ppo, cispo, gspo, m2po.

Ratios that carry gradients are ``safe_exp`` of a log-ratio: exact inside |log r| <= 20 and
saturated (with zero gradient) beyond, which is far outside every clip range in use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .aggregation import AGG_MODES
from .base import Surrogate, check
from .numerics import masked_max, masked_mean, safe_exp
from .registry import register
from .surrogates import base_metrics, fraction, prepare
from .terms import LossOutput, PolicyTerms


def clipped_objective(
    log_u: Tensor, adv: Tensor, eps_low: float, eps_high: float, dual_clip: float | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """PPO's per-token objective min(u A, clip(u, 1 - eps_low, 1 + eps_high) A), optionally dual-clipped.

    With ``dual_clip = c`` the objective of a token with A < 0 is raised to at least c * A (the
    loss is bounded by -c A; Ye et al. 2020, arXiv 1912.09729). Returns (objective, clipped,
    dual_clipped): ``clipped`` marks tokens where the clipped branch is strictly smaller (its
    gradient is zero), as verl counts ``pg_clipfrac``; ``dual_clipped`` where the dual bound binds.
    """
    u = safe_exp(log_u)
    unclipped = u * adv
    clipped_term = torch.clamp(u, 1.0 - eps_low, 1.0 + eps_high) * adv
    obj = torch.minimum(unclipped, clipped_term)
    clipped = clipped_term < unclipped
    dual = torch.zeros_like(clipped)
    if dual_clip is not None:
        bound = dual_clip * adv
        dual = (adv < 0) & (bound > obj)
        obj = torch.where(dual, bound, obj)
    return obj, clipped, dual


def _check_clip(name: str, eps_low: float, eps_high: float, dual_clip: float | None) -> None:
    check(0.0 <= eps_low <= 1.0, f"{name}: eps_low must be in [0, 1], got {eps_low}")
    check(eps_high >= 0.0, f"{name}: eps_high must be >= 0, got {eps_high}")
    if dual_clip is not None:
        check(dual_clip > 1.0, f"{name}: dual_clip must be > 1 (3 is typical) or None, got {dual_clip}")


@register
@dataclass
class PPO(Surrogate):
    """PPO clip (Schulman et al. 2017, arXiv 1707.06347) relative to the behaviour policy.

    objective_t = min(r_t A, clip(r_t, 1 - eps_low, 1 + eps_high) A), r_t = pi_theta / mu;
    ``eps_low`` / ``eps_high`` default to ``eps`` (asymmetric "clip-higher" as in DAPO, arXiv
    2503.14476). ``dual_clip = c`` bounds the loss of A < 0 tokens by -c A (arXiv 1912.09729).
    Metrics: ``clip_frac`` (clipped branch active), ``dual_clip_frac``.
    """

    name = "ppo"
    eps: float = 0.2
    eps_low: float | None = None
    eps_high: float | None = None
    dual_clip: float | None = None

    def __post_init__(self) -> None:
        check(self.eps > 0, f"{self.name}: eps must be > 0, got {self.eps}")
        if self.dual_clip is not None:
            self.dual_clip = float(self.dual_clip)
        _check_clip(self.name, self.lo_eps, self.hi_eps, self.dual_clip)

    @property
    def lo_eps(self) -> float:
        return self.eps if self.eps_low is None else self.eps_low

    @property
    def hi_eps(self) -> float:
        return self.eps if self.eps_high is None else self.eps_high

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        obj, clipped, dual = clipped_objective(p.log_ratio, p.advantages, self.lo_eps, self.hi_eps, self.dual_clip)
        metrics = base_metrics(p)
        metrics.defer("clip_frac", lambda: fraction(clipped, p.mask))
        metrics.defer("dual_clip_frac", lambda: fraction(dual, p.mask))
        return -obj, p.mask, metrics


@register
@dataclass
class DecoupledPPO(PPO):
    """AReaL's decoupled PPO (Fu et al., arXiv 2505.24298).

    objective_t = sg(pi_prox / mu) * min(u_t A, clip(u_t, 1 - eps_low, 1 + eps_high) A),
    u_t = pi_theta / pi_prox. Clipping is centred on the recent proximal policy; the behaviour
    weight pi_prox / mu corrects the staleness. Tokens whose behaviour weight exceeds ``cap``
    (None: no cap) are masked out (metric ``mask_frac``). Without ``proximal_logp`` in the terms
    the proximal policy is the behaviour policy and this is exactly `PPO`.
    """

    name = "decoupled_ppo"
    cap: float | None = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cap is not None:
            check(self.cap >= 1.0, f"decoupled_ppo: cap must be >= 1 or None, got {self.cap}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        prox = p.behavior_logp if p.proximal_logp is None else p.proximal_logp
        log_bw = prox - p.behavior_logp
        obj, clipped, dual = clipped_objective(p.logp - prox, p.advantages, self.lo_eps, self.hi_eps, self.dual_clip)
        rejected = torch.zeros_like(p.mask) if self.cap is None else log_bw > math.log(self.cap)
        weight = safe_exp(log_bw).masked_fill(rejected, 0.0)
        metrics = base_metrics(p)
        metrics.defer("clip_frac", lambda: fraction(clipped, p.mask))
        metrics.defer("dual_clip_frac", lambda: fraction(dual, p.mask))
        metrics.defer("mask_frac", lambda: fraction(rejected, p.mask))
        metrics.defer("behav_weight_max", lambda: masked_max(safe_exp(log_bw), p.mask))
        return -weight * obj, p.mask, metrics


@register
@dataclass
class CISPO(Surrogate):
    """CISPO (MiniMax-M1, arXiv 2506.13585): objective sg(clip(r_t, 1 - eps_low, 1 + eps_high)) * A * log pi_theta.

    Every token keeps its gradient; only the (detached) weight is bounded. MiniMax-M1 sets no lower
    bound (``eps_low = 1``, our default) and tunes ``eps_high``; 0.28 is our default (DAPO's
    clip-higher value). Metric ``clip_frac``: fraction of tokens whose weight was clipped.
    """

    name = "cispo"
    eps_low: float = 1.0
    eps_high: float = 0.28

    def __post_init__(self) -> None:
        _check_clip(self.name, self.eps_low, self.eps_high, None)

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        r = safe_exp(p.log_ratio.detach())
        w = torch.clamp(r, 1.0 - self.eps_low, 1.0 + self.eps_high)
        metrics = base_metrics(p)
        metrics.defer("clip_frac", lambda: fraction(w != r, p.mask))
        return -w * p.advantages * p.logp, p.mask, metrics


@register
@dataclass
class GSPO(Surrogate):
    """GSPO (Zheng et al., arXiv 2507.18071): PPO clipping on the length-normalised sequence ratio.

    s_i = exp(mean_t log r_t); objective min(s_i A, clip(s_i, 1 - eps_low, 1 + eps_high) A) per
    sequence, eps_low = 3e-4, eps_high = 4e-4 (the paper's values). As in verl, the per-token ratio
    s_it = sg(s_i) * pi_theta(t) / sg(pi_theta(t)) has the value s_i and the gradient s_i grad log pi_t,
    so that, aggregated with ``seq-mean-token-mean``, the gradient is exactly GSPO's
    mean_i s_i A_i (1/|y_i|) sum_t grad log pi_t. ``agg`` fixes that aggregation (GSPO is defined
    with it); ``agg=None`` uses the one the caller passes. Metric ``clip_frac`` over tokens.
    """

    name = "gspo"
    eps_low: float = 3e-4
    eps_high: float = 4e-4
    agg: str | None = "seq-mean-token-mean"

    def __post_init__(self) -> None:
        _check_clip(self.name, self.eps_low, self.eps_high, None)
        check(self.agg is None or self.agg in AGG_MODES, f"gspo: agg must be None or one of {', '.join(AGG_MODES)}; got {self.agg!r}")

    def __call__(self, terms: PolicyTerms, agg: str = "token-mean", **agg_kwargs: Any) -> LossOutput:
        return super().__call__(terms, self.agg or agg, **agg_kwargs)

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        n_tok = p.mask.sum(dim=-1).clamp(min=1).to(torch.float32)
        mean_lr = p.seq_log_ratio / n_tok
        log_s = mean_lr[:, None] + p.logp - p.logp.detach()
        obj, clipped, _ = clipped_objective(log_s, p.advantages, self.eps_low, self.eps_high)
        metrics = base_metrics(p)
        metrics.defer("clip_frac", lambda: fraction(clipped, p.mask))
        return -obj, p.mask, metrics


def m2po_mask(sq: Tensor, eligible: Tensor, threshold: float) -> Tensor:
    """M2PO's rejection mask: among ``eligible`` entries, the largest ``sq`` values to drop so that
    the mean of the kept ones is at most ``threshold`` (fewest possible; ties broken by position).

    Sorting ascending, the kept set is the longest prefix whose running mean is <= threshold
    (running means of a sorted sequence only grow). Returns a bool tensor shaped like ``sq``.
    """
    flat_sq, flat_ok = sq.reshape(-1), eligible.reshape(-1)
    idx = torch.nonzero(flat_ok, as_tuple=False).squeeze(-1)
    rejected = torch.zeros_like(flat_ok)
    if idx.numel() == 0:
        return rejected.view_as(eligible)
    values, order = torch.sort(flat_sq[idx], stable=True)
    running_mean = torch.cumsum(values.double(), 0) / torch.arange(1, values.numel() + 1, device=values.device)
    n_keep = int((running_mean <= threshold).sum())
    rejected[idx[order[n_keep:]]] = True
    return rejected.view_as(eligible)


@register
@dataclass
class M2PO(Surrogate):
    """M2PO (Zheng, Zhao and Chen, arXiv 2510.01161): second-moment masking instead of clipping.

    M2 = mean over tokens of (log r_t)^2. The tokens with the largest (log r_t)^2 are masked until
    the mean over the kept tokens is at most ``threshold`` (0.04 in the paper); the objective is
    M_t * r_t * A with r_t = pi_theta / mu carrying the gradient (no clipping), normalised by all
    valid tokens. ``trust_region_only=True`` restricts the masking (and the mean) to tokens where
    PPO's clip would act (A > 0 and r > 1, or A < 0 and r < 1), as one secondary implementation
    reads the final paper's Algorithm 1; the default follows ALGORITHMS.md. Metrics: ``mask_frac``,
    ``m2_before`` and ``m2_after`` (mean (log r)^2 over the considered tokens before/after masking).
    """

    name = "m2po"
    threshold: float = 0.04
    trust_region_only: bool = False

    def __post_init__(self) -> None:
        check(self.threshold >= 0, f"m2po: threshold must be >= 0, got {self.threshold}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        lr = p.log_ratio.detach()
        sq = lr.square()
        eligible = p.mask
        if self.trust_region_only:
            eligible = p.mask & (((p.advantages > 0) & (lr > 0)) | ((p.advantages < 0) & (lr < 0)))
        rejected = m2po_mask(sq, eligible, self.threshold)
        r = safe_exp(p.log_ratio).masked_fill(rejected, 0.0)
        metrics = base_metrics(p)
        metrics.defer("mask_frac", lambda: fraction(rejected, p.mask))
        metrics.defer("m2_before", lambda: masked_mean(sq, eligible))
        metrics.defer("m2_after", lambda: masked_mean(sq, eligible & ~rejected))
        return -r * p.advantages, p.mask, metrics
