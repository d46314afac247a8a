"""The Delightful Policy Gradient (dg) and its Kondo gate (kondo), with their gates as pure functions.

`delight`, `delight_gate` and `kondo_gate` are what theory/ checks: the real gate, not a copy.
None of them needs behaviour probabilities: delight uses the learner's *current* log-probs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .base import Surrogate, check
from .numerics import f32, masked_mean, masked_sum
from .registry import register
from .surrogates import base_metrics, check_level, fraction, prepare
from .terms import PolicyTerms


def delight(
    advantages: Tensor,
    logp: Tensor,
    *,
    mask: Tensor | None = None,
    level: str = "token",
    whiten: bool = False,
    logp_clip: float | None = None,
) -> Tensor:
    """Delight chi = A * l, l = -log pi_theta(a|h) the surprisal (detached, float32).

    ``level="token"``: chi_t = A_t * l_t, shape of ``logp``. ``level="sequence"`` (``logp`` [B, T]):
    chi_i = sum_t m_t A_t l_t, shape [B, 1] (= A_i * (-log pi_theta(tau_i)) when A is per sequence).
    ``logp_clip = c`` clips log-probs to [-c, c] first (the papers use 10 for continuous-action
    log-densities). ``whiten`` standardises chi over the valid units: (chi - mean) / (std + 1e-8).
    Masked entries are 0.
    """
    logp = f32(logp).detach()
    adv = f32(advantages).detach()
    valid = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    if logp_clip is not None:
        logp = logp.clamp(-logp_clip, logp_clip)
    chi = torch.where(valid, adv * -logp, torch.zeros((), device=logp.device))
    if level == "sequence":
        chi, valid = masked_sum(chi, valid, dim=-1)[:, None], valid.any(dim=-1)[:, None]
    elif level != "token":
        raise ValueError(f"delight: level must be 'token' or 'sequence', got {level!r}")
    if whiten:
        mean = masked_mean(chi, valid)
        std = masked_mean((chi - mean).square(), valid).sqrt()
        chi = torch.where(valid, (chi - mean) / (std + 1e-8), torch.zeros((), device=chi.device))
    return chi


def gate_of(chi: Tensor, eta: float) -> Tensor:
    """sigmoid(chi / eta), with the limits eta = inf -> 1/2 and eta = 0 -> step 1{chi > 0} (1/2 at 0).

    This is the maximiser over w in [0, 1] of chi * w + eta * H(w), H the binary entropy.
    """
    if math.isinf(eta):
        return torch.full_like(chi, 0.5)
    if eta == 0:
        return (torch.sign(chi) + 1.0) / 2.0
    return torch.sigmoid(chi / eta)


def delight_gate(
    advantages: Tensor,
    logp: Tensor,
    eta: float = 1.0,
    *,
    mask: Tensor | None = None,
    level: str = "token",
    whiten: bool = False,
    logp_clip: float | None = None,
) -> Tensor:
    """DG's gate w = sigmoid(chi / eta), chi = `delight` (arXiv 2603.14608). Detached, float32.

    eta >= 0; eta = inf gives 1/2 everywhere (plain PG up to a factor), eta = 0 the hard gate.
    """
    check(eta >= 0, f"delight_gate: eta must be >= 0, got {eta}")
    chi = delight(advantages, logp, mask=mask, level=level, whiten=whiten, logp_clip=logp_clip)
    return gate_of(chi, eta)


def _quantile(values: Tensor, q: float) -> Tensor:
    """Linear-interpolation quantile of a 1-D tensor (like torch.quantile, without its size limit)."""
    v, _ = torch.sort(values.double())
    pos = q * (v.numel() - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, v.numel() - 1)
    return (v[lo] + (pos - lo) * (v[hi] - v[lo])).to(torch.float32)


def kondo_gate(
    advantages: Tensor,
    logp: Tensor,
    eta: float = 1.0,
    *,
    quantile: float | None = 0.5,
    generator: torch.Generator | None = None,
    mask: Tensor | None = None,
    level: str = "token",
    whiten: bool = False,
    logp_clip: float | None = None,
) -> tuple[Tensor, Tensor, float]:
    """The Kondo gate (arXiv 2603.20526): keep a unit with probability sigmoid((chi - lambda) / eta).

    lambda (the compute price) is the ``quantile`` of chi over the valid units of this batch
    (``quantile=None``: lambda = 0, "zero-price gating"). The Bernoulli draws use ``generator``
    (a CPU torch.Generator; same seed, same draws). Returns (keep: bool, prob: float32, lambda);
    ``keep`` and ``prob`` have the shape of `delight`'s output.
    """
    check(eta >= 0, f"kondo_gate: eta must be >= 0, got {eta}")
    chi = delight(advantages, logp, mask=mask, level=level, whiten=whiten, logp_clip=logp_clip)
    valid = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask.to(torch.bool)
    if level == "sequence":
        valid = valid.any(dim=-1)[:, None]
    price = 0.0
    if quantile is not None and bool(valid.any()):
        price = float(_quantile(chi[valid], quantile))
    prob = gate_of(chi - price, eta)
    device = generator.device if generator is not None else torch.device("cpu")
    draws = torch.rand(prob.shape, generator=generator, device=device).to(prob.device)
    return (draws < prob) & valid, prob, price


@register
@dataclass
class DG(Surrogate):
    """Delightful Policy Gradient (Osband, arXiv 2603.14608; distributed follow-up arXiv 2603.20521).

    objective_t = sg(w_t) * A_t * log pi_theta, w = sigmoid(chi / eta), chi = A * (-log pi_theta)
    under the learner's current policy (`delight_gate`); no behaviour probabilities. eta = 1 in
    the papers. Options: ``level`` (token, or sequence: chi_i = A_i * surprisal of the sequence),
    ``whiten`` chi, ``logp_clip`` (10 for continuous actions in the papers). Metric ``gate_mean``.
    """

    name = "dg"
    eta: float = 1.0
    level: str = "token"
    whiten: bool = False
    logp_clip: float | None = None

    def __post_init__(self) -> None:
        check(self.eta >= 0, f"dg: eta must be >= 0 (inf allowed), got {self.eta}")
        check_level(self.name, self.level)
        if self.logp_clip is not None:
            check(self.logp_clip > 0, f"dg: logp_clip must be > 0 or None, got {self.logp_clip}")

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        w = delight_gate(
            p.advantages, p.logp, self.eta, mask=p.mask, level=self.level, whiten=self.whiten, logp_clip=self.logp_clip
        )
        valid = p.mask if self.level == "token" else p.seq_valid[:, None]
        metrics = base_metrics(p)
        metrics.defer("gate_mean", lambda: masked_mean(w, valid))
        return -w * p.advantages * p.logp, p.mask, metrics


@register
@dataclass
class Kondo(Surrogate):
    """DG with the Kondo gate (Osband, arXiv 2603.20526): backpropagate a unit only if its gate fires.

    G ~ Bernoulli(sigmoid((chi - lambda) / eta)) with lambda the per-batch ``quantile`` of chi
    (`kondo_gate`); objective_t = G * A_t * log pi_theta. A kept unit carries its plain PG term, so
    with lambda = 0 (``quantile=None``) E[G] A grad log pi is exactly DG's gradient (our reading;
    the weighting of kept samples is not taken from the paper's text). ``seed`` makes the draws
    reproducible (same seed, same gates; `reseed` restarts the stream). Metrics: ``gate_mean``
    (mean keep probability), ``mask_frac`` (fraction of units dropped), ``kondo_price``.
    """

    name = "kondo"
    eta: float = 1.0
    quantile: float | None = 0.5
    seed: int = 0
    level: str = "token"
    whiten: bool = False
    logp_clip: float | None = None
    _generator: torch.Generator = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check(self.eta >= 0, f"kondo: eta must be >= 0 (inf allowed), got {self.eta}")
        if self.quantile is not None:
            check(0.0 <= self.quantile <= 1.0, f"kondo: quantile must be in [0, 1] or None, got {self.quantile}")
        check_level(self.name, self.level)
        self.reseed(self.seed)

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "generator": self._generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state:
            self.seed = int(state["seed"])
            self._generator.set_state(state["generator"])

    def reseed(self, seed: int) -> None:
        """Restart the gate's random stream from ``seed``."""
        self.seed = int(seed)
        self._generator = torch.Generator().manual_seed(self.seed)

    def per_token(self, terms: PolicyTerms) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
        p = prepare(terms)
        keep, prob, price = kondo_gate(
            p.advantages,
            p.logp,
            self.eta,
            quantile=self.quantile,
            generator=self._generator,
            mask=p.mask,
            level=self.level,
            whiten=self.whiten,
            logp_clip=self.logp_clip,
        )
        valid = p.mask if self.level == "token" else p.seq_valid[:, None]
        metrics = base_metrics(p)
        metrics.defer("gate_mean", lambda: masked_mean(prob, valid))
        metrics.defer("mask_frac", lambda: fraction(~keep, valid))
        metrics["kondo_price"] = price
        return -keep.to(torch.float32) * p.advantages * p.logp, p.mask, metrics
