"""Closed forms the theory figures plot, through one adapter.

The figures prefer the project's `theory` package (the quantities it is checked on by pytest). When
a function is not (yet) there, the exact computation below is used and the caption says so. Each
fallback is exact (linear algebra or finite sums), not a simulation:

* `a_crit(tau)` and `grad_autocorr(a, tau)`: straight from theory.delayed_optimization (analytic
  results 1 and 2), the functions pytest checks.
* `contamination(...)`: the tabular contamination model of analytic result 7 (ALGORITHMS.md), set up
  as theory.delight does: K = 5 actions, learner pi(y*) = 1 - delta (the rest uniform), a fraction
  rho of samples from an actor that always plays one wrong action, advantages +-1/2, per-sample
  ascent directions f(a) A(a) grad_z log pi(a) on the logits z with f = 1 (pg), the behaviour
  ratio (exact IS) or sigmoid(A l / eta) (dg, l = -log pi(a)). Returned for each: the cosine of the
  *expected* update to the true gradient, the true-gradient share (clean part / contaminated part)
  and the finite-batch alignment E<g_B, d> / sqrt(E||g_B||^2) (d the unit true gradient), which
  accounts for the per-sample second moment (the quantity the paper's v2 states its result in).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from theory.delayed_optimization import critical_step, lag1_autocorrelation

SOURCES: dict[str, str] = {}


def _theory(name: str, candidates: tuple[str, ...]) -> Callable | None:
    """The first of ``candidates`` ("module:function" under theory/) that exists, else None."""
    for cand in candidates:
        mod, _, fn = cand.partition(":")
        try:
            module = importlib.import_module(f"theory.{mod}" if mod else "theory")
        except Exception:
            continue
        f = getattr(module, fn, None)
        if callable(f):
            SOURCES[name] = f"theory.{mod}.{fn}" if mod else f"theory.{fn}"
            return f
    SOURCES.setdefault(name, "figures.theory_bridge (exact fallback)")
    return None


def source(name: str) -> str:
    return SOURCES.get(name, "figures.theory_bridge (exact fallback)")


# -- delayed recurrence and delayed SGD ---------------------------------------------------------------


def a_crit(tau: int) -> float:
    """Stability edge of x_{t+1} = x_t - a x_{t-tau} (theory.delayed_optimization.critical_step)."""
    SOURCES["a_crit"] = "theory.delayed_optimization.critical_step"
    return float(critical_step(tau))


def grad_autocorr(a: float, tau: int) -> float:
    """Stationary lag-1 autocorrelation of applied gradients (theory.delayed_optimization); NaN when unstable."""
    SOURCES["grad_autocorr"] = "theory.delayed_optimization.lag1_autocorrelation"
    if not 0.0 < a < a_crit(tau):
        return float("nan")
    return float(lag1_autocorrelation(a, tau))


def simulate_autocorr(a: float, tau: int, steps: int, rng: np.random.Generator, dims: int = 64,
                      lam: float = 1.0, sigma: float = 1.0, burn: int = 200) -> float:
    """Empirical lag-1 autocorrelation of applied gradients of delayed SGD (``dims`` independent
    coordinates simulated at once; pooled)."""
    eta = a / lam
    hist = np.zeros((tau + 1, dims))  # x_t, x_{t-1}, ..., x_{t-tau}
    gs = np.empty((steps, dims))
    for t in range(steps + burn):
        g = lam * hist[tau] + sigma * rng.standard_normal(dims)
        x_new = hist[0] - eta * g
        if not np.all(np.isfinite(x_new)) or np.abs(x_new).max() > 1e12:
            return float("nan")
        hist = np.roll(hist, 1, axis=0)
        hist[0] = x_new
        if t >= burn:
            gs[t - burn] = g
    g0, g1 = gs[:-1], gs[1:]
    g0 = g0 - gs.mean(0)
    g1 = g1 - gs.mean(0)
    return float((g0 * g1).sum() / np.sqrt((g0 * g0).sum() * (g1 * g1).sum()))


# -- contamination (DG) ---------------------------------------------------------------------------------

CONTAMINATION_METHODS = ("pg", "is", "mix_is", "dg")


def _contamination_exact(delta: float, rho: float, K: int, eta: float, batches: tuple[int, ...]) -> dict:
    """Own exact computation (same setup as theory.delight.contamination_setup: point mass on the last action)."""
    pi = np.full(K, delta / (K - 1))
    pi[0] = 1.0 - delta
    nu = np.zeros(K)
    nu[K - 1] = 1.0
    mu = (1.0 - rho) * pi + rho * nu
    adv = np.where(np.arange(K) == 0, 0.5, -0.5)
    score = np.eye(K) - pi[None, :]  # row a: grad_z log pi(a) = e_a - pi
    g_true = pi[0] * (np.eye(K)[0] - pi)
    d = g_true / np.linalg.norm(g_true)
    gate = 1.0 / (1.0 + np.exp(-adv * (-np.log(pi)) / eta))
    safe_nu = np.where(nu > 0, nu, 1.0)
    weights = {  # (weight on clean samples, weight on contaminated samples)
        "pg": (np.ones(K), np.ones(K)),
        "is": (np.ones(K), np.where(nu > 0, pi / safe_nu, 0.0)),  # each actor's own behaviour probabilities
        "mix_is": (pi / mu, pi / mu),  # the true sampler (the mixture)
        "dg": (gate, gate),
    }
    out: dict[str, dict[str, float]] = {}
    for name, (wc, wn) in weights.items():
        vc, vn = (wc * adv)[:, None] * score, (wn * adv)[:, None] * score
        clean = (1.0 - rho) * (pi[:, None] * vc).sum(0)
        cont = rho * (nu[:, None] * vn).sum(0)
        mean = clean + cont
        second = float((1.0 - rho) * (pi * (vc**2).sum(1)).sum() + rho * (nu * (vn**2).sum(1)).sum())
        m2 = float(mean @ mean)
        nc = float(np.linalg.norm(cont))
        res = {"cos": float(mean @ d / math.sqrt(m2)) if m2 > 0 else float("nan"),
               "share": float(np.linalg.norm(clean) / nc) if nc > 0 else float("inf")}
        for b in batches:
            res[f"align_{b}"] = float(mean @ d / math.sqrt(m2 + (second - m2) / b))
        out[name] = res
    return out


def contamination(delta: float, rho: float, K: int = 5, eta: float = 1.0,
                  batches: tuple[int, ...] = (1, 100)) -> dict[str, dict[str, float]]:
    """Pg / exact IS (each actor's own probabilities, and against the mixture) / dg under contamination.

    Setup of theory.delight (analytic result 7): K actions, learner pi(y*) = 1 - delta, a fraction
    rho of samples from an actor that always plays one wrong action, advantages +-1/2. Per method:
    ``cos``, the cosine of the expected update to the true gradient pi(y*) (e_y* - pi); ``share``,
    |expected clean part| / |expected contaminated part| (the "true-gradient share"); ``align_B``,
    the finite-batch alignment E<g_B, d> / sqrt(E||g_B||^2). ``cos`` and ``share`` come from
    theory.delight.contamination_gradients (the real stabilizers' expected gradients) when present;
    ``align_B`` always from the exact computation here (theory has no second moments).
    """
    out = _contamination_exact(delta, rho, K, eta, batches)
    f = _theory("contamination", ("delight:contamination_gradients",))
    if f is not None:
        try:
            g = f(float(delta), float(rho), float(eta), K)
            true = np.asarray(g["true"])
            for m in CONTAMINATION_METHODS:
                v = np.asarray(g[m])
                out[m]["cos"] = float(v @ true / (np.linalg.norm(v) * np.linalg.norm(true)))
                if m + "_cont" in g:
                    nc = float(np.linalg.norm(g[m + "_cont"]))
                    out[m]["share"] = float(np.linalg.norm(g[m + "_clean"]) / nc) if nc > 0 else float("inf")
        except Exception:
            SOURCES["contamination"] = "figures.theory_bridge (exact fallback)"
    return out


def describe_sources() -> dict[str, Any]:
    return dict(SOURCES)
