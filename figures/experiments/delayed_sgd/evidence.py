"""The delayed_sgd experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.delayed_sgd.settings import A_STEP, FRACS, QUAD_TAUS, TAUS, describe
from theory.delayed_optimization import critical_step, lag1_autocorrelation, sample_lag1, simulate_applied_gradients


def autocorr(a: float, tau: int) -> float:
    """Exact stationary lag-1 autocorrelation of the applied gradients; NaN outside the stable range."""
    if not 0.0 < a < critical_step(tau):
        return float("nan")
    return float(lag1_autocorrelation(a, tau))


def simulated(a: float, tau: int, steps: int, seed: int, chains: int = 64) -> float:
    """Mean over ``chains`` simulated runs of the sample lag-1 autocorrelation (theory's simulator)."""
    g = simulate_applied_gradients(a, tau, chains, steps, 200, np.random.default_rng(seed))
    return float(sample_lag1(g).mean())


def simulate_gac(tau: int, use_gac: bool, steps: int, seed: int, dims: int = 100, sigma: float = 1.0,
             x0: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """SGD with step `A_STEP` on f(x) = lambda/2 ||x||^2 in ``dims`` dimensions with gradient noise ``sigma``, the
    gradient applied ``tau`` steps late, through the testbed's ``gac_projection`` (``use_gac``) or no transform,
    as the runner applies a recipe (``Recipe.step``): (cosine between consecutive applied raw gradients [steps],
    f(x_t) [steps])."""
    from testbed.stabilizers import build

    gen = torch.Generator().manual_seed(seed)
    lam = 1.0
    x = torch.full((dims,), x0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([x], lr=A_STEP / lam)
    recipe = build("gac_projection") if use_gac else build("pg")
    history = [x.detach().clone()]
    cos = np.full(steps, np.nan)
    loss = np.empty(steps)
    prev = None
    for t in range(steps):
        stale = history[max(0, len(history) - 1 - tau)]
        g = lam * stale + sigma * torch.randn(dims, generator=gen, dtype=torch.float64)
        if prev is not None:
            cos[t] = float(torch.dot(g, prev) / (g.norm() * prev.norm()))
        prev = g.clone()
        x.grad = g.clone()
        recipe.step([x], opt, None)
        history.append(x.detach().clone())
        if len(history) > tau + 2:
            history.pop(0)
        loss[t] = float(0.5 * lam * (x.detach() ** 2).sum())
    return cos, loss


def quadratic_name(tau: int, use_gac: bool) -> str:
    return f"{'gac' if use_gac else 'sgd'}, tau={tau}"


@functools.lru_cache(maxsize=4)
def quadratic_runs(steps: int, seeds: tuple[int, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`quadratic_name` -> (cosines [seeds, steps], objective [seeds, steps]) of `simulate_gac` at every tau of
    `QUAD_TAUS`, with and without the projection (computed once per process)."""
    out = {}
    for tau in QUAD_TAUS:
        for use_gac in (False, True):
            runs = [simulate_gac(tau, use_gac, steps, s) for s in seeds]
            out[quadratic_name(tau, use_gac)] = (np.stack([c for c, _ in runs]), np.stack([f for _, f in runs]))
    return out


@dataclass
class Evidence(ExperimentEvidence):
    """Per delay tau (``rows``, keyed by str(tau)): the critical step ``a_crit`` and, at the step fractions
    ``fracs`` of it, the exact (``theory``) and simulated (``sim``) lag-1 autocorrelations. The GAC runs on the
    quadratic, per `quadratic_name`, one value per seed: the mean cosine of consecutive raw gradients over the
    second half (``quadratic_cos``) and the mean objective over the last tenth (``quadratic_loss``)."""

    fracs: list[float] = field(default_factory=list)
    taus: list[int] = field(default_factory=list)
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    quadratic_cos: dict[str, list[float | None]] = field(default_factory=dict)
    quadratic_loss: dict[str, list[float | None]] = field(default_factory=dict)


def measure(ctx: Any) -> Evidence:
    b = ctx.budget
    rows = {}
    for i, tau in enumerate(TAUS):
        ac = critical_step(tau)
        rows[str(tau)] = {"a_crit": ac, "theory": [autocorr(f * ac, tau) for f in FRACS],
                          "sim": [simulated(f * ac, tau, b.stability_steps, 100 * i + j) for j, f in enumerate(FRACS)]}
    steps = b.quadratic_steps
    runs = quadratic_runs(steps, tuple(b.quadratic_seeds))
    return Evidence(grid=describe(b), fracs=list(FRACS), taus=list(TAUS), rows=rows,
                    quadratic_cos={k: np.nanmean(c[:, steps // 2:], axis=1).tolist() for k, (c, _) in runs.items()},
                    quadratic_loss={k: f[:, -max(1, steps // 10):].mean(axis=1).tolist() for k, (_, f) in runs.items()})
