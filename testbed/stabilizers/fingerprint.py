"""The staleness fingerprint: the statistics that decide whether a stabilizer has anything to fix.

Pure torch/numpy functions, computed identically on a testbed regime and on a real LLM, and one JSON
schema (`Fingerprint`) written by both sides.

Gradient noise (McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training",
arXiv 1812.06162). Let g_1..g_n be the loss gradients of n independent *prompt groups* (a GRPO group of
G samples of one prompt is the unit of independence: its advantages are normalised inside the group), with
mean G_true and per-group covariance Sigma_g. A minibatch of m = k G sequences made of k whole groups has
gradient a = (1/k) sum_{i in A} g_i, so for two disjoint minibatches A, B

    E<a, b> = |G_true|^2,   E|a|^2 = |G_true|^2 + tr(Sigma_g) / k,
    cos(a, b) ~ k / (k + B_g) = m / (m + B_noise),   B_noise = G tr(Sigma_g) / |G_true|^2  (in sequences).

Two estimates of B_noise are offered: `noise_scale_from_cosines` fits m / (m + B) to the measured mean
cosines (the one the JSON's ``noise_scale`` holds), and `noise_scale_from_gram` is the unbiased-components
estimate tr(Sigma) / |G|^2 of McCandlish et al. (appendix A) from the groups' gradients, with
|G|^2 ~ mean_{i != j} <g_i, g_j> and tr(Sigma_g) ~ mean_i |g_i|^2 - mean_{i != j} <g_i, g_j>.

Every cosine needs only inner products between group gradients, so the caller may hand a Gram matrix
K_ij = <g_i, g_j> instead of the gradients; `sign_sketch` gives an unbiased low-dimensional sketch of a
gradient (random signs, then folding into ``dim`` buckets) whose inner products estimate the true ones
with a standard deviation of about |a| |b| / sqrt(dim), for models whose per-group gradients do not fit
in memory.

Staleness (`staleness_stats`): importance weights of the learner pi against a behaviour policy mu that is
``lag`` updates old, in log space: per-sequence and per-token normalised ESS (Kong 1992; VCPO, arXiv
2602.17616), log-ratio quantiles, and the PPO clip fraction (Schulman et al. 2017, arXiv 1707.06347).

Undefined is NaN, never 0: a zero gradient gives a NaN cosine, an empty mask NaN statistics.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .numerics import f32

NAN = float("nan")

# ---------------------------------------------------------------------------------------------- cosines


def cosine(a: Tensor, b: Tensor) -> float:
    """cos(a, b) = <a, b> / (|a| |b|) in float64; NaN when either vector is zero (undefined)."""
    a, b = a.detach().reshape(-1).double(), b.detach().reshape(-1).double()
    na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    if na == 0.0 or nb == 0.0 or not (math.isfinite(na) and math.isfinite(nb)):
        return NAN
    return float((a * b).sum()) / (na * nb)


def gram_matrix(vectors: Tensor) -> Tensor:
    """K = V V^T in float64 for row vectors V [n, P]: all pairwise inner products."""
    v = vectors.detach().reshape(vectors.shape[0], -1).double()
    return v @ v.T


def sketch_signs(numel: int, seed: int = 0) -> Tensor:
    """The Rademacher signs of `sign_sketch` for vectors of length ``numel`` (bool: True = +1), fixed by ``seed``:
    compute them once and pass them to every sketch of a model's gradients (same seed, same signs)."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2, (numel,), generator=gen, dtype=torch.uint8).bool()


def sign_sketch(flat: Tensor, dim: int, seed: int = 0, signs: Tensor | None = None) -> Tensor:
    """An unbiased sketch S(x) in R^dim of a flat vector x: S(x)_j = sum_{i = j mod dim} s_i x_i with
    Rademacher signs s (``signs`` from `sketch_signs`, else drawn from ``seed``). E<S(a), S(b)> = <a, b> over the
    signs, with a standard deviation of about |a| |b| / sqrt(dim) (a count sketch with fixed buckets; Charikar,
    Chen and Farach-Colton 2002). Sketches made with the same signs are comparable. float64 [dim]."""
    if dim < 1:
        raise ValueError(f"sign_sketch: dim must be >= 1, got {dim}")
    x = flat.detach().reshape(-1).float()
    s = sketch_signs(x.numel(), seed) if signs is None else signs
    if s.numel() != x.numel():
        raise ValueError(f"sign_sketch: {s.numel()} signs for a vector of {x.numel()} entries")
    x = torch.where(s.to(x.device), x, -x)
    pad = (-x.numel()) % dim
    if pad:
        x = torch.cat([x, x.new_zeros(pad)])
    return x.reshape(-1, dim).double().sum(0)


def disjoint_pairs(n_groups: int, groups_per_minibatch: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Independent pairs of disjoint minibatches of ``groups_per_minibatch`` whole groups each: one random
    permutation of the n groups cut into consecutive minibatches, paired (1st, 2nd), (3rd, 4th), ... .
    No group appears twice, so the pairs' cosines are independent draws (when the groups are)."""
    if groups_per_minibatch < 1:
        raise ValueError(f"disjoint_pairs: groups_per_minibatch must be >= 1, got {groups_per_minibatch}")
    perm = np.random.default_rng(seed).permutation(n_groups).tolist()
    k = groups_per_minibatch
    return [(perm[2 * j * k:(2 * j + 1) * k], perm[(2 * j + 1) * k:(2 * j + 2) * k]) for j in range(n_groups // (2 * k))]


def t_quantile(p: float, df: int) -> float:
    """The p-quantile (p in (0.5, 1)) of Student's t with ``df`` degrees of freedom, by bisection on the CDF
    integrated with Simpson's rule (math/numpy only; |error| < 1e-6 for df >= 1 and p <= 0.995)."""
    if not 0.5 < p < 1.0 or df < 1:
        raise ValueError(f"t_quantile: need 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    logc = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float) -> float:
        # substitution x = tan(u) makes the heavy tail integrable on a bounded interval
        u = np.linspace(0.0, math.atan(t), 2001)
        x = np.tan(u)
        f = np.exp(logc - (df + 1) / 2 * np.log1p(x * x / df)) / np.cos(u) ** 2
        h = (u[-1] - u[0]) / 2000
        return 0.5 + h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        hi *= 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass
class CosineAtSize:
    """Cosine between the gradients of two disjoint minibatches of m sequences (whole groups)."""

    m: int
    mean: float
    ci_low: float
    ci_high: float
    pairs: int


def summarize_cosines(m: int, cosines: list[float] | np.ndarray, level: float = 0.9) -> CosineAtSize:
    """Mean of the finite cosines and its two-sided Student-t interval at ``level`` (90%):
    mean +- t_{(1+level)/2, n-1} s / sqrt(n), s the sample standard deviation, n the number of finite
    cosines (``pairs``; NaN cosines of zero gradients are left out). The interval is valid for independent
    pairs (`disjoint_pairs`). n = 0: everything NaN; n = 1: NaN interval."""
    c = np.asarray(cosines, dtype=np.float64)
    c = c[np.isfinite(c)]
    n = int(c.size)
    if n == 0:
        return CosineAtSize(m, NAN, NAN, NAN, 0)
    mean = float(c.mean())
    if n == 1:
        return CosineAtSize(m, mean, NAN, NAN, 1)
    half = t_quantile((1 + level) / 2, n - 1) * float(c.std(ddof=1)) / math.sqrt(n)
    return CosineAtSize(m, mean, mean - half, mean + half, n)


def minibatch_cosines(
    gram: Tensor, group_size: int, sizes: list[int], seed: int = 0, level: float = 0.9
) -> list[CosineAtSize]:
    """Cosines between disjoint minibatches made of whole prompt groups, for each minibatch size m in
    ``sizes`` (sequences, a multiple of ``group_size``), from the Gram matrix K [n, n] of the n groups'
    gradients. A minibatch's gradient is the mean of its groups' gradients, so
    cos(A, B) = sum_{A x B} K / sqrt(sum_{A x A} K sum_{B x B} K) (NaN when a side's gradient is zero).
    Pairs come from `disjoint_pairs` (independent), the interval from `summarize_cosines` (Student t).
    A size with fewer than 2 m sequences of groups gives 0 pairs and NaN."""
    k_mat = gram.detach().double()
    n = k_mat.shape[0]
    out = []
    for j, m in enumerate(sizes):
        if m < group_size or m % group_size:
            raise ValueError(f"minibatch size {m} is not a positive multiple of the group size {group_size}")
        values = []
        for a, b in disjoint_pairs(n, m // group_size, seed=seed + j):
            ia, ib = torch.tensor(a, device=k_mat.device), torch.tensor(b, device=k_mat.device)
            ab = float(k_mat[ia][:, ib].sum())
            aa, bb = float(k_mat[ia][:, ia].sum()), float(k_mat[ib][:, ib].sum())
            values.append(NAN if aa <= 0.0 or bb <= 0.0 else ab / math.sqrt(aa * bb))
        out.append(summarize_cosines(m, values, level))
    return out


def noise_scale_from_cosines(sizes: list[float], means: list[float], weights: list[float] | None = None) -> float:
    """B_noise fitted by weighted least squares to cos(m) = m / (m + B) (McCandlish et al. 2018) over the
    sizes with a finite mean cosine (weights: e.g. the pairs). Minimised over log B on [1e-6, 1e12] by a grid
    and golden-section refinement. Returns inf when the best fit is the upper end (cosines ~ 0 at every m:
    noise dominates at all measured sizes), NaN with no finite point."""
    m = np.asarray(sizes, dtype=np.float64)
    c = np.asarray(means, dtype=np.float64)
    w = np.ones_like(m) if weights is None else np.asarray(weights, dtype=np.float64)
    ok = np.isfinite(c) & np.isfinite(m) & (m > 0) & (w > 0)
    if not ok.any():
        return NAN
    m, c, w = m[ok], c[ok], w[ok]

    def loss(log_b: float) -> float:
        return float((w * (c - m / (m + math.exp(log_b))) ** 2).sum())

    lo_end, hi_end = math.log(1e-6), math.log(1e12)
    grid = np.linspace(lo_end, hi_end, 400)
    i = int(np.argmin([loss(x) for x in grid]))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        x1, x2 = hi - golden * (hi - lo), lo + golden * (hi - lo)
        lo, hi = (lo, x2) if loss(x1) < loss(x2) else (x1, hi)
    best = (lo + hi) / 2
    if best >= hi_end - (grid[1] - grid[0]):
        return math.inf
    return math.exp(best)


def noise_scale_from_gram(gram: Tensor, group_size: int) -> dict[str, float]:
    """McCandlish et al.'s (appendix A) unbiased components from the n group gradients' Gram matrix K:
    |G|^2 ~ mean_{i != j} K_ij, tr(Sigma_g) ~ mean_i K_ii - |G|^2, and
    B_noise = group_size tr(Sigma_g) / |G|^2 in sequences (a ratio of unbiased estimates; inf when the
    estimate of |G|^2 is <= 0, i.e. the mean gradient is not resolved above the noise). Needs n >= 2."""
    k_mat = gram.detach().double()
    n = k_mat.shape[0]
    if n < 2:
        return {"grad_sq": NAN, "trace_sigma_group": NAN, "noise_scale": NAN}
    diag = float(torch.diagonal(k_mat).mean())
    off = (float(k_mat.sum()) - float(torch.diagonal(k_mat).sum())) / (n * (n - 1))
    tr = diag - off
    b = group_size * tr / off if off > 0 else math.inf
    return {"grad_sq": off, "trace_sigma_group": tr, "noise_scale": b}


def consecutive_cosine_split_half(cross: Any, halves: Any, min_t: float = 2.0) -> float:
    """The cosine between the *mean* gradients of consecutive optimizer steps, with the minibatch noise removed.

    Step t's raw gradient is g_t = a_t + b_t, the gradients of two halves of its minibatch made of equally many
    whole prompt groups (independent given the parameters), so E a_t = E b_t = G_t / 2 and E<a_t, b_t> =
    |G_t|^2 / 4 (the unbiased-components idea of McCandlish et al. 2018, arXiv 1812.06162, appendix A, with two
    halves), while the batches of steps t and t+1 are independent draws, E<g_t, g_{t+1}> ~ <G_t, G_{t+1}>.
    Over a window of T steps (``halves`` [T] = <a_t, b_t>, ``cross`` [T-1] = <g_t, g_{t+1}>)

        cos ~ sum_t <g_t, g_{t+1}> / sqrt(sum_{t<T-1} 4 <a_t, b_t> . sum_{t>0} 4 <a_t, b_t>),

    a ratio of sums (each sum unbiased up to the term below), so it is not capped by r / (1 + r) as the cosine
    of two minibatch gradients is (r = m / B_noise). Bias: g_t's noise moves the parameters the next step's mean
    gradient is taken at, adding about -lr tr(H Sigma_t) to each cross term (H the loss's curvature, Sigma_t the
    noise covariance): second order in the step size, and nil for the exact expectation the testbed's probe
    reads (testbed/gac_signal.py). NaN with no pair of steps, a non-finite term, or a denominator the noise does not
    resolve: either sum of <a_t, b_t> below ``min_t`` standard errors of itself (t = mean / (sd / sqrt(n)) over its
    steps), where the ratio is no longer an estimate of a cosine (a near-zero denominator sends it past 1)."""
    c = np.asarray(cross, dtype=np.float64).reshape(-1)
    h = np.asarray(halves, dtype=np.float64).reshape(-1)
    if c.size == 0 or h.size != c.size + 1 or not (np.isfinite(c).all() and np.isfinite(h).all()):
        return NAN
    before, after = 4.0 * float(h[:-1].sum()), 4.0 * float(h[1:].sum())
    if before <= 0.0 or after <= 0.0:
        return NAN
    for part in (h[:-1], h[1:]):
        sd = float(part.std(ddof=1)) if part.size > 1 else NAN
        if not (part.size > 1 and (sd == 0.0 or float(part.mean()) / (sd / math.sqrt(part.size)) >= min_t)):
            return NAN
    return float(c.sum()) / math.sqrt(before * after)


# --------------------------------------------------------------------------------------------- staleness


@dataclass
class StalenessStats:
    """Importance-weight statistics of the current policy against a behaviour policy ``lag`` updates old."""

    lag: int
    ess_seq: float
    ess_token: float
    logratio_q05: float
    logratio_q50: float
    logratio_q95: float
    logratio_max: float
    clip_frac: float


def _ess(log_w: Tensor) -> float:
    """(sum w)^2 / (N sum w^2) in log space (shift-invariant; NaN when empty)."""
    if log_w.numel() == 0:
        return NAN
    lw = log_w.double() - log_w.double().max()
    return float(torch.exp(2 * torch.logsumexp(lw, 0) - math.log(lw.numel()) - torch.logsumexp(2 * lw, 0)))


def staleness_stats(
    logp: Tensor, behavior_logp: Tensor, mask: Tensor, lag: int, eps: float = 0.2, advantages: Tensor | None = None
) -> StalenessStats:
    """Statistics of the token log-ratios lr_t = log pi(a_t) - log mu(a_t) over the unmasked tokens ([B, T]).

    * ``ess_seq`` = (sum_i R_i)^2 / (B sum_i R_i^2), R_i = exp(sum_t m_t lr_t), over the B sequences that have
      at least one unmasked token (Kong 1992; VCPO, arXiv 2602.17616); in [1/B, 1], 1 iff all equal.
    * ``ess_token``: the same over the N unmasked tokens' ratios r_t = exp(lr_t).
    * ``logratio_q05/q50/q95``: quantiles of lr_t (linear interpolation); ``logratio_max`` = max_t lr_t.
    * ``clip_frac``: fraction of tokens whose ratio lies outside [1 - eps, 1 + eps] (PPO, arXiv 1707.06347);
      with ``advantages`` ([B, T] or [B]), only those where the clipped term is the active one
      (A > 0 and r > 1 + eps, or A < 0 and r < 1 - eps), as verl's ``pg_clipfrac`` counts.
    Identical policies give ESS 1, all log-ratio statistics 0 and clip fraction 0. No unmasked token: NaN.
    """
    m = mask.to(torch.bool)
    if logp.shape != behavior_logp.shape or logp.shape != m.shape:
        raise ValueError(f"staleness_stats: shapes differ: logp {tuple(logp.shape)}, behavior_logp "
                         f"{tuple(behavior_logp.shape)}, mask {tuple(m.shape)}")
    lr = (f32(logp) - f32(behavior_logp)).detach().double()
    tok = lr[m]
    if tok.numel() == 0:
        return StalenessStats(lag, NAN, NAN, NAN, NAN, NAN, NAN, NAN)
    seq = torch.where(m, lr, 0.0).sum(-1)[m.any(-1)]
    q = torch.quantile(tok, torch.tensor([0.05, 0.5, 0.95], dtype=torch.float64, device=tok.device))
    lo, hi = math.log1p(-eps), math.log1p(eps)
    if advantages is None:
        clipped = (tok < lo) | (tok > hi)
    else:
        adv = advantages.detach().double()
        adv = (adv.unsqueeze(-1) if adv.dim() == 1 else adv).expand_as(lr)[m]
        clipped = ((adv > 0) & (tok > hi)) | ((adv < 0) & (tok < lo))
    return StalenessStats(lag, _ess(seq), _ess(tok), float(q[0]), float(q[1]), float(q[2]), float(tok.max()),
                          float(clipped.double().mean()))


# ------------------------------------------------------------------------------------------- batch health


def constant_reward_groups(rewards: Tensor, group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """([G] bool: prompt group g's rewards are all equal (max == min), [B] long: each sequence's group index g),
    the G groups numbered in the sorted order of their ids. Such a group's GRPO advantages are all zero, so it
    costs a forward and backward and contributes no gradient (DAPO's dynamic sampling drops it, arXiv
    2503.14476); a group of one sample is constant, and so is a group with a NaN reward (no usable advantage)."""
    r, g = rewards.detach().reshape(-1).double(), group_ids.detach().reshape(-1)
    if r.shape != g.shape:
        raise ValueError(f"constant_reward_groups: {r.numel()} rewards but {g.numel()} group ids")
    _, inv = torch.unique(g, return_inverse=True)
    n = int(inv.max()) + 1 if inv.numel() else 0
    hi = torch.full((n,), -math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r, "amax")
    lo = torch.full((n,), math.inf, dtype=torch.float64, device=r.device).scatter_reduce(0, inv, r, "amin")
    return ~(hi > lo), inv


def zero_advantage_frac(rewards: Tensor, group_ids: Tensor) -> float:
    """Fraction of prompt groups whose rewards are all equal (`constant_reward_groups`): their GRPO advantages
    are all zero. No group: NaN."""
    constant, _ = constant_reward_groups(rewards, group_ids)
    return float(constant.double().mean()) if constant.numel() else NAN


def mean_token_entropy(logits: Tensor, mask: Tensor) -> float:
    """Mean over unmasked positions of H_t = -sum_v p_v log p_v (nats), p = softmax(logits_t) over the last
    dimension ([B, T, V] logits, [B, T] mask). No unmasked position: NaN."""
    m = mask.to(torch.bool)
    if not m.any():
        return NAN
    logp = torch.log_softmax(f32(logits.detach()[m]), dim=-1)
    h = -(logp.exp() * logp).sum(-1)
    return float(h.double().mean())


def truncated_frac(truncated: Tensor) -> float:
    """Fraction of sequences cut by the completion budget (did not end with an end token). None: NaN."""
    t = truncated.detach().reshape(-1)
    return NAN if t.numel() == 0 else float(t.to(torch.float64).mean())


# ------------------------------------------------------------------------------------------------ schema


class FingerprintError(ValueError):
    """A fingerprint file or dict that does not follow the schema (one-line message)."""


_TOP = ("model", "task", "cosine_by_minibatch", "noise_scale", "staleness", "zero_advantage_frac", "entropy",
        "truncated_frac", "command", "date", "commit", "wall_s")


def _enc(x: Any) -> Any:
    """JSON value of a float: NaN -> null, +-inf -> "inf" / "-inf" (standard JSON has neither)."""
    if isinstance(x, float):
        if math.isnan(x):
            return None
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    if isinstance(x, dict):
        return {k: _enc(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_enc(v) for v in x]
    return x


def _num(where: str, x: Any) -> float:
    if x is None:
        return NAN
    if x in ("inf", "-inf"):
        return float(x)
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise FingerprintError(f"{where} must be a number, null, 'inf' or '-inf', got {x!r}")
    return float(x)


def _int(where: str, x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise FingerprintError(f"{where} must be an integer, got {x!r}")
    return x


@dataclass
class Fingerprint:
    """One model x task (or testbed regime) fingerprint; JSON keys are the field names. Non-finite numbers are
    written as null (NaN, undefined) or "inf"/"-inf"."""

    model: str
    task: str
    cosine_by_minibatch: list[CosineAtSize]
    noise_scale: float
    staleness: list[StalenessStats]
    zero_advantage_frac: float
    entropy: float
    truncated_frac: float
    command: str
    date: str
    commit: str
    wall_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _enc(dataclasses.asdict(self))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False) + "\n"

    @classmethod
    def from_dict(cls, d: Any) -> Fingerprint:
        if not isinstance(d, dict):
            raise FingerprintError(f"a fingerprint must be a JSON object, got {type(d).__name__}")
        missing = [k for k in _TOP if k not in d]
        if missing:
            raise FingerprintError(f"fingerprint lacks the key(s) {', '.join(missing)}")
        unknown = sorted(set(d) - set(_TOP) - {"extra"})
        if unknown:
            raise FingerprintError(f"fingerprint has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_TOP)}, extra")
        for k in ("model", "task", "command", "date", "commit"):
            if not isinstance(d[k], str):
                raise FingerprintError(f"fingerprint key {k!r} must be a string, got {d[k]!r}")
        for k in ("cosine_by_minibatch", "staleness"):
            if not isinstance(d[k], list):
                raise FingerprintError(f"fingerprint key {k!r} must be a list, got {type(d[k]).__name__}")
        extra = d.get("extra", {})
        if not isinstance(extra, dict):
            raise FingerprintError(f"fingerprint key 'extra' must be an object, got {type(extra).__name__}")
        cos = [_row(CosineAtSize, f"cosine_by_minibatch[{i}]", r, ("m", "pairs")) for i, r in enumerate(d["cosine_by_minibatch"])]
        stale = [_row(StalenessStats, f"staleness[{i}]", r, ("lag",)) for i, r in enumerate(d["staleness"])]
        return cls(d["model"], d["task"], cos, _num("noise_scale", d["noise_scale"]), stale,
                   _num("zero_advantage_frac", d["zero_advantage_frac"]), _num("entropy", d["entropy"]),
                   _num("truncated_frac", d["truncated_frac"]), d["command"], d["date"], d["commit"],
                   _num("wall_s", d["wall_s"]), extra)

    @classmethod
    def from_json(cls, text: str) -> Fingerprint:
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise FingerprintError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
        return cls.from_dict(d)

    @classmethod
    def load(cls, path: str) -> Fingerprint:
        """Read a fingerprint file; any problem is one `FingerprintError` line naming the file."""
        try:
            with open(path, encoding="utf-8") as fh:
                return cls.from_json(fh.read())
        except FingerprintError as e:
            raise FingerprintError(f"{path}: {e}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise FingerprintError(f"{path}: cannot read: {e.strerror if isinstance(e, OSError) else e}") from None


def newest_files(directory: str | Path) -> list[tuple[Path, list[Path]]]:
    """The newest fingerprint file of each model and task anywhere under ``directory``, with the files of that
    model and task it supersedes: [(newest, [earlier, oldest first])], in the order of their newest files' paths.

    A fingerprint's model and task are its ``model`` and ``task`` fields, its age its ``date`` (ISO 8601, so
    text order is time order; files without one count as oldest, ties go by path). A re-measurement (fresh
    prompts, another seed, a rule fixed since) supersedes the earlier ones. Files that are not readable JSON
    objects are skipped; none when ``directory`` does not exist. Schema checks are the reader's
    (`Fingerprint.load`, or a tolerant reader of its own).
    """
    root = Path(directory)
    by_pair: dict[tuple[str, str], list[tuple[str, Path]]] = {}
    for path in sorted(root.rglob("*.json")) if root.is_dir() else []:
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            continue
        if isinstance(d, dict):
            by_pair.setdefault((str(d.get("model")), str(d.get("task"))), []).append((str(d.get("date") or ""), path))
    out = []
    for group in by_pair.values():
        group.sort(key=lambda dated: dated[0])  # stable: equal dates keep path order
        out.append((group[-1][1], [p for _, p in group[:-1]]))
    return sorted(out, key=lambda pair: pair[0])


def _row(cls: type, where: str, r: Any, ints: tuple[str, ...]) -> Any:
    names = [f.name for f in dataclasses.fields(cls)]
    if not isinstance(r, dict) or set(r) != set(names):
        got = sorted(r) if isinstance(r, dict) else type(r).__name__
        raise FingerprintError(f"{where} must have exactly the keys {', '.join(names)}, got {got}")
    return cls(**{k: _int(f"{where}.{k}", r[k]) if k in ints else _num(f"{where}.{k}", r[k]) for k in names})
