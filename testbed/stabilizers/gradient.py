"""Gradient transforms (hook 3): act on ``.grad`` after backward and before ``optimizer.step()``.

Distributed rule (gac's dot products and norms, ess_lr's sums). A transform sees the gradients a
rank holds after the data-parallel reduction:

* **DTensor gradients** (FSDP2, ``torch.distributed.tensor``): each rank computes partial sums
  over its local shard, and these are summed over exactly the mesh dimensions on which the
  tensor is ``Shard``-ed (not over ``Replicate`` dimensions). ``Partial`` gradients (not yet
  reduced) are refused.
* **Plain tensors** are taken as replicated (DDP: every rank holds the same full gradient) and
  are *not* reduced, unless the transform is told ``sharded=True`` (FSDP1 flat parameters, ZeRO:
  each rank holds a disjoint slice), in which case the partial sums are summed over the default
  process group.
* Nothing is reduced when ``torch.distributed`` is not initialised.

Either way every rank obtains the same global scalars, so every rank takes the same decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from .base import BatchStats, GradientTransform, TransformResult, check
from .numerics import effective_sample_size
from .registry import register


@register
@dataclass
class ClipNorm(GradientTransform):
    """Global gradient-norm clipping: g <- g * min(1, max_norm / ||g||) (Pascanu et al. 2013)."""

    name = "clip_norm"
    max_norm: float = 1.0

    def __post_init__(self) -> None:
        check(self.max_norm > 0, f"clip_norm: max_norm must be > 0, got {self.max_norm}")

    def __call__(self, params: list[torch.nn.Parameter], stats: BatchStats) -> TransformResult:
        norm = torch.nn.utils.clip_grad_norm_(params, self.max_norm) if params else torch.zeros(())
        return TransformResult(1.0, {"grad_norm": norm, "clipped": (norm > self.max_norm).float()})


# -- distributed reductions ----------------------------------------------------------------------


def dist_ready() -> bool:
    """True when torch.distributed is available and a process group is initialised."""
    return dist.is_available() and dist.is_initialized()


def _dtensor_type() -> type | None:
    if not dist.is_available():
        return None
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - very old torch
        return None
    return DTensor


def global_dots(pairs: list[tuple[Tensor, Tensor]], sharded: bool | None = None) -> tuple[float, float, float]:
    """(sum <a, b>, sum ||a||^2, sum ||b||^2) over the tensor pairs, reduced by the module's rule.

    Products are formed in float32 and accumulated in float64.
    """
    dtensor = _dtensor_type()
    buckets: dict[tuple[Any, ...], tuple[Any, list[Tensor]]] = {}
    for a, b in pairs:
        if dtensor is not None and isinstance(a, dtensor):
            if any(pl.is_partial() for pl in a.placements):
                raise ValueError("gac: gradients with Partial placements are not reduced yet; apply after reduction")
            shard_dims = tuple(i for i, pl in enumerate(a.placements) if pl.is_shard())
            mesh = a.device_mesh
            key: tuple[Any, ...] = ("dtensor", id(mesh), shard_dims)
            la, lb = a.to_local(), b.to_local()
        else:
            mesh, shard_dims = None, ()
            key = ("plain", bool(sharded))
            la, lb = a, b
        fa, fb = la.detach().reshape(-1).to(torch.float32), lb.detach().reshape(-1).to(torch.float32)
        vec = torch.stack([torch.dot(fa, fb), torch.dot(fa, fa), torch.dot(fb, fb)]).to(torch.float64)
        buckets.setdefault(key, (mesh, []))[1].append(vec)
    total = [0.0, 0.0, 0.0]
    for key, (mesh, vecs) in buckets.items():
        vec = torch.stack(vecs).sum(0)
        if dist_ready():
            if key[0] == "dtensor":
                for dim in key[2]:
                    dist.all_reduce(vec, group=mesh.get_group(dim))
            elif key[1]:
                dist.all_reduce(vec)
        for i, v in enumerate(vec.tolist()):
            total[i] += v
    return total[0], total[1], total[2]


def global_ess(seq_log_ratio: Tensor, valid: Tensor | None = None) -> float:
    """Normalised ESS (sum w)^2 / (B sum w^2) over the sequences of every rank (log space).

    Each rank holds different sequences, so the sums are always reduced over the default group
    when torch.distributed is initialised (two collectives: a max, then a sum).
    """
    if not dist_ready():
        return float(effective_sample_size(seq_log_ratio, valid))
    lw = seq_log_ratio.detach().to(torch.float64)
    ok = torch.ones_like(lw, dtype=torch.bool) if valid is None else valid.to(torch.bool)
    lw = torch.where(ok, lw, torch.full_like(lw, float("-inf")))
    top = lw.max() if lw.numel() else torch.tensor(float("-inf"), dtype=torch.float64, device=lw.device)
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    if math.isinf(float(top)):
        return 1.0
    sums = torch.stack([torch.exp(lw - top).sum(), torch.exp(2.0 * (lw - top)).sum(), ok.sum().to(torch.float64)])
    dist.all_reduce(sums)
    s1, s2, n = sums.tolist()
    return s1 * s1 / (n * s2)


# -- GAC -------------------------------------------------------------------------------------------

HIGH_ACTIONS = ("skip", "damp")
THRESHOLDS = ("fixed", "dynamic")


@register
@dataclass
class GAC(GradientTransform):
    """Gradient Alignment Control's projection (arXiv 2603.01501), as reconstructed in ALGORITHMS.md.

    Registered as ``gac_projection``; the recipe ``gac`` is this projection on the paper's base, GRPO
    (group-normalised advantages and a PPO-clipped ratio: testbed/stabilizers/recipes.py), and
    ``pg+gac_projection`` the projection on bare REINFORCE.

    Known from the paper: the signal is the cosine c_t between the current and the previous policy
    gradient (high under asynchronous training, near 0 under synchronous), and GAC removes progress
    along the stale-aligned direction. The thresholds, the partial projection, the reference and the
    skip rule are *not* from a primary source; they are this reconstruction's parameters:

    * reference u = g_prev / ||g_prev||, g_prev the previous step's *raw* gradient (before any
      change by this transform; keeping the last applied gradient can skip forever);
    * c_t <= t_low: g unchanged;
    * t_low < c_t <= t_high: g <- g - alpha * max(0, <g, u>) u (alpha = 1 removes the aligned
      component exactly);
    * c_t > t_high: ``high_action="skip"`` zeroes g and returns lr scale 0 (`Recipe.step` then
      skips ``optimizer.step()``, so Adam's moments are untouched); ``"damp"`` keeps g and scales
      this step's lr by ``damp``. After ``max_skips`` consecutive high-band actions the next one
      is projected instead (and the count restarts), so GAC cannot stall.

    ``thresholds="dynamic"`` (a secondary digest calls the paper's thresholds "dynamic"; the rule is not
    public, this one is ours): the bands are the running ``q_low`` and ``q_high`` quantiles of the
    cosines of the last ``window`` steps, never below ``t_low`` / ``t_high`` (the fixed values then
    act as floors). GAC then acts on the steps that are unusually aligned *for this run*, including
    when every step is aligned (persistent staleness keeps the fixed bands always crossed); until
    ``window`` cosines are seen, the fixed bands apply.

    c_t is global over all parameters; dot products and norms follow the module's distributed rule
    (``sharded``: see the module docstring). State: one gradient-sized buffer (g_prev), the
    consecutive-skip count and the cosine history, in `state_dict`. The first step has no
    reference, and a zero or non-finite gradient no direction: c = 0 then for the decision (g is
    unchanged), and the reported ``grad_cos_prev`` is NaN (undefined, never 0).
    Metrics: ``grad_cos_prev``, ``projected``, ``skipped``, ``damped``, ``gac_t_low``, ``gac_t_high``.
    """

    name = "gac_projection"
    t_low: float = 0.2
    t_high: float = 0.9
    alpha: float = 1.0
    high_action: str = "skip"
    damp: float = 0.1
    max_skips: int = 3
    thresholds: str = "fixed"
    q_low: float = 0.5
    q_high: float = 0.9
    window: int = 100
    sharded: bool | None = None
    _prev: list[Tensor] | None = field(default=None, init=False, repr=False, compare=False)
    _run: int = field(default=0, init=False, repr=False, compare=False)
    _history: list[float] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check(-1.0 <= self.t_low <= self.t_high <= 1.0, f"gac: need -1 <= t_low <= t_high <= 1, got t_low={self.t_low}, t_high={self.t_high}")
        check(0.0 <= self.alpha <= 1.0, f"gac: alpha must be in [0, 1], got {self.alpha}")
        check(self.high_action in HIGH_ACTIONS, f"gac: high_action must be one of {', '.join(HIGH_ACTIONS)}; got {self.high_action!r}")
        check(0.0 <= self.damp <= 1.0, f"gac: damp must be in [0, 1], got {self.damp}")
        check(
            isinstance(self.max_skips, int) and not isinstance(self.max_skips, bool) and self.max_skips >= 0,
            f"gac: max_skips must be an integer >= 0, got {self.max_skips!r}",
        )
        check(self.thresholds in THRESHOLDS, f"gac: thresholds must be one of {', '.join(THRESHOLDS)}; got {self.thresholds!r}")
        check(0.0 <= self.q_low <= self.q_high <= 1.0, f"gac: need 0 <= q_low <= q_high <= 1, got {self.q_low}, {self.q_high}")
        check(self.window >= 2, f"gac: window must be >= 2, got {self.window}")

    def bands(self) -> tuple[float, float]:
        """(t_low, t_high) for this step: the fixed values, or the dynamic rule (class docstring)."""
        if self.thresholds == "fixed" or len(self._history) < self.window:
            return self.t_low, self.t_high
        ordered = sorted(self._history)

        def quantile(q: float) -> float:
            pos = q * (len(ordered) - 1)
            lo = math.floor(pos)
            hi = min(lo + 1, len(ordered) - 1)
            return ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])

        return max(self.t_low, quantile(self.q_low)), max(self.t_high, quantile(self.q_high))

    def __call__(self, params: list[torch.nn.Parameter], stats: BatchStats) -> TransformResult:
        grads = [p.grad for p in params if p.grad is not None]
        prev = self._prev
        if prev is None or len(prev) != len(grads) or any(b.shape != g.shape for b, g in zip(prev, grads)):
            self._prev = [g.detach().clone() for g in grads]
            self._run = 0
            t_low, t_high = self.bands()
            return TransformResult(1.0, {"grad_cos_prev": math.nan, "projected": 0.0, "skipped": 0.0, "damped": 0.0,
                                         "gac_t_low": t_low, "gac_t_high": t_high})
        prev = [b if b.device == g.device else b.to(g.device) for b, g in zip(prev, grads)]
        self._prev = prev
        dot, g_sq, p_sq = global_dots(list(zip(grads, prev)), self.sharded)
        finite = all(map(math.isfinite, (dot, g_sq, p_sq)))  # overflowing sums: no reliable direction
        defined = finite and g_sq > 0 and p_sq > 0
        cos = dot / math.sqrt(g_sq * p_sq) if defined else 0.0

        t_low, t_high = self.bands()
        if self.thresholds == "dynamic":
            self._history = [*self._history[-(self.window - 1):], cos]
        action = "none"
        if cos > t_high and self._run < self.max_skips:
            action, self._run = self.high_action, self._run + 1
        elif cos > t_low:
            action, self._run = "project", 0
        else:
            self._run = 0
        coef = self.alpha * max(0.0, dot) / p_sq if action == "project" and p_sq > 0 else 0.0

        with torch.no_grad():
            for g, b in zip(grads, prev):
                if action == "skip":
                    b.copy_(g)
                    g.zero_()
                elif coef > 0:
                    raw = g.clone()
                    g.add_(b, alpha=-coef)
                    b.copy_(raw)
                else:
                    b.copy_(g)
        lr_scale = {"skip": 0.0, "damp": self.damp}.get(action, 1.0)
        metrics = {
            "grad_cos_prev": cos if defined else math.nan,
            "projected": float(coef > 0),
            "skipped": float(action == "skip"),
            "damped": float(action == "damp"),
            "gac_t_low": t_low,
            "gac_t_high": t_high,
        }
        return TransformResult(lr_scale, metrics)

    def state_dict(self) -> dict[str, Any]:
        prev = None if self._prev is None else [b.detach().clone() for b in self._prev]
        return {"prev": prev, "run": self._run, "history": list(self._history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        prev = state["prev"]
        self._prev = None if prev is None else [b.detach().clone() for b in prev]
        self._run = int(state["run"])
        self._history = [float(c) for c in state.get("history", [])]


# -- ESS-scaled learning rate ----------------------------------------------------------------------

ESS_RULES = ("sqrt", "linear")


@register
@dataclass
class ESSLR(GradientTransform):
    """VCPO's ESS-scaled step size (arXiv 2602.17616).

    rho = (sum_i w_i)^2 / (B sum_i w_i^2) over the minibatch's B sequences, w the unclipped sequence
    ratios (from `BatchStats`); this step's lr is multiplied by sqrt(min(1, rho / rho_base))
    (``rule="sqrt"``) or min(1, rho / rho_base) (``"linear"``). rho_base = 1.0 for math, 0.55 for
    multi-turn tool use in the paper. Only the step shrinks: `Recipe.step` scales the optimizer's lr,
    so Adam's moments see the unscaled gradient. With ``distributed`` (default) and
    torch.distributed initialised, rho is over the sequences of all ranks. Metrics: ``ess``,
    ``lr_scale``.
    """

    name = "ess_lr"
    rho_base: float = 1.0
    rule: str = "sqrt"
    distributed: bool = True

    def __post_init__(self) -> None:
        check(self.rho_base > 0, f"ess_lr: rho_base must be > 0, got {self.rho_base}")
        check(self.rule in ESS_RULES, f"ess_lr: rule must be one of {', '.join(ESS_RULES)}; got {self.rule!r}")

    def scale(self, rho: float) -> float:
        """The lr multiplier for a normalised ESS ``rho``."""
        x = min(1.0, rho / self.rho_base)
        return math.sqrt(x) if self.rule == "sqrt" else x

    def __call__(self, params: list[torch.nn.Parameter], stats: BatchStats) -> TransformResult:
        if stats.seq_log_ratio is None:
            raise ValueError(
                "ess_lr needs the minibatch's sequence log-ratios: pass the PolicyTerms (or "
                "BatchStats(seq_log_ratio=...)) to recipe.step / recipe.transform_gradients"
            )
        if self.distributed:
            rho = global_ess(stats.seq_log_ratio, stats.seq_mask)
        else:
            rho = float(effective_sample_size(stats.seq_log_ratio, stats.seq_mask))
        scale = self.scale(rho)
        return TransformResult(scale, {"ess": rho, "lr_scale": scale})
