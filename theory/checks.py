"""What every theory check returns, and the tolerances they share.

A `Check` is one row of ``python -m theory report``: a predicted value (closed form, bound, exact
expectation), a measured value (simulation, Monte Carlo, the real stabilizer through autograd),
the tolerance within which they must agree, and the comparison that decides pass or fail. The
tests in tests/theory call the same ``check_*`` functions and assert ``passed``.

Tolerances are derived, never tuned:

* Monte Carlo: ``z`` standard errors computed from the sample, with ``z`` the two-sided normal
  quantile for a false-alarm probability `ALPHA` split (Bonferroni) over the comparisons made
  (`z_quantile`).
* Exact computations in float64: a few ulps of the quantities involved (`f64_tol`).
* Quantities that pass through the stabilizers' float32 arithmetic: the float32 rounding bound
  gamma_n * sum |terms| (`f32_tol`, Higham, Accuracy and Stability of Numerical Algorithms, 3.1).
* Asymptotic slopes: the Richardson estimate |slope(coarse grid) - slope(fine grid)|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

# Probability that a correct implementation fails one check under a fresh seed (per check,
# shared over its comparisons by Bonferroni). The seeds are fixed, so results do not vary.
ALPHA = 1e-4

F32_U = 2.0**-24  # unit roundoff of float32
F64_U = 2.0**-53  # unit roundoff of float64

# Upper bound on the float32 operations applied to one per-sample scalar inside a stabilizer
# (cast, log-ratio, clamp, exp, gate, products with A and with the weight, the aggregation's
# division): each adds a relative error of at most F32_U.
F32_OPS_PER_TERM = 16

COMPARISONS = ("abs", "upper", "lower")


@dataclass(frozen=True)
class Check:
    """One predicted-versus-measured comparison.

    ``comparison``: ``"abs"`` passes when |measured - predicted| <= tolerance; ``"upper"`` when
    measured <= predicted + tolerance (predicted is a bound the measurement must stay under);
    ``"lower"`` when measured >= predicted - tolerance. ``note`` says what is being pinned,
    e.g. that a published statement fails as we read it.
    """

    item: int
    result: str
    predicted: float
    measured: float
    tolerance: float
    comparison: str = "abs"
    source: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if self.comparison not in COMPARISONS:
            raise ValueError(f"comparison must be one of {COMPARISONS}, got {self.comparison!r}")
        if not (self.tolerance >= 0):
            raise ValueError(f"tolerance must be >= 0, got {self.tolerance} for {self.result!r}")

    @property
    def margin(self) -> float:
        """How far inside the tolerance the measurement is (negative: failed)."""
        if self.comparison == "abs":
            return self.tolerance - abs(self.measured - self.predicted)
        if self.comparison == "upper":
            return self.predicted + self.tolerance - self.measured
        return self.measured - (self.predicted - self.tolerance)

    @property
    def passed(self) -> bool:
        return bool(np.isfinite(self.measured)) and self.margin >= 0

    def describe(self) -> str:
        op = {"abs": "|measured - predicted| <=", "upper": "measured <= predicted +", "lower": "measured >= predicted -"}
        return (
            f"[{self.item}] {self.result}: predicted {self.predicted:.6g}, measured {self.measured:.6g}, "
            f"{op[self.comparison]} {self.tolerance:.3g}; margin {self.margin:.3g} ({self.source})"
        )


def failures(rows: list[Check]) -> list[str]:
    """`Check.describe` of every row that did not pass (empty when all passed)."""
    return [r.describe() for r in rows if not r.passed]


def find(rows: list[Check], text: str) -> Check:
    """The single row whose ``result`` contains ``text`` (ValueError if none or several)."""
    hits = [r for r in rows if text in r.result]
    if len(hits) != 1:
        raise ValueError(f"{len(hits)} rows match {text!r}; results: {[r.result for r in rows]}")
    return hits[0]


def z_quantile(n_comparisons: int = 1, alpha: float = ALPHA) -> float:
    """Two-sided normal quantile so that n comparisons all pass with probability >= 1 - alpha."""
    if n_comparisons < 1:
        raise ValueError(f"n_comparisons must be >= 1, got {n_comparisons}")
    return float(norm.isf(alpha / (2.0 * n_comparisons)))


def mean_se(samples: np.ndarray, axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sample mean and its standard error (sample std with ddof=1, over sqrt(n))."""
    x = np.asarray(samples, dtype=np.float64)
    n = x.shape[axis]
    return x.mean(axis=axis), x.std(axis=axis, ddof=1) / math.sqrt(n)


def f64_tol(*scales: float, ulps: float = 64.0) -> float:
    """Tolerance for a float64 computation: ``ulps`` unit roundoffs of the largest scale involved.

    64 ulps covers the rounding of the short chains of operations (a Lyapunov solve, a polynomial
    root, a sum of a few dozen terms) these checks compare; anything tighter is not meaningful.
    """
    return ulps * F64_U * max(1.0, *[abs(s) for s in scales])


def f32_tol(abs_sum: float, n_terms: int = 1) -> float:
    """Rounding bound gamma_n * sum_i |t_i| for a sum of ``n_terms`` terms each computed in float32.

    n = F32_OPS_PER_TERM + ceil(log2(n_terms)) + 1 counts the per-term operations and the depth of
    the (pairwise) summation; gamma_n = n u / (1 - n u) (Higham 2002, Lemma 3.1).
    """
    n = F32_OPS_PER_TERM + math.ceil(math.log2(max(n_terms, 1))) + 1
    return n * F32_U / (1.0 - n * F32_U) * float(abs_sum)


def brent_tol(x: float, xatol: float, f_value: float = 0.0, curvature: float = math.inf) -> float:
    """Accuracy of scipy's bounded Brent search (``minimize_scalar(method="bounded")``) at minimiser x.

    scipy's fminbound stops once the bracket is within 2 (sqrt(eps) |x| + xatol / 3) of x
    (sqrt(eps) = 1.49e-8), and float64 values of f cannot locate the minimiser of a function with
    curvature f'' better than sqrt(2 u |f| / f'') (u the unit roundoff); the sum bounds the error.
    """
    return xatol + 2.0 * math.sqrt(2.2e-16) * abs(x) + math.sqrt(2.0 * F64_U * max(abs(f_value), 1.0) / curvature)


def cosine(x: np.ndarray, y: np.ndarray) -> float:
    """cos(x, y) = <x, y> / (||x|| ||y||) of two flattened vectors."""
    x = np.ravel(np.asarray(x, dtype=np.float64))
    y = np.ravel(np.asarray(y, dtype=np.float64))
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def cosine_tol(x: np.ndarray, err_x: float, y: np.ndarray | None = None, err_y: float = 0.0) -> float:
    """Bound on |cos(x + e, y + f) - cos(x, y)| for ||e|| <= err_x, ||f|| <= err_y (to first order).

    The angle between x and x + e is at most asin(||e|| / ||x||) <= (pi/2) ||e|| / ||x||, and cos is
    1-Lipschitz in the angle; the same for y.
    """
    tol = 0.5 * math.pi * err_x / float(np.linalg.norm(x))
    if y is not None and err_y > 0:
        tol += 0.5 * math.pi * err_y / float(np.linalg.norm(y))
    return tol


def loglog_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log|y| against log x."""
    lx, ly = np.log(np.asarray(x, dtype=np.float64)), np.log(np.abs(np.asarray(y, dtype=np.float64)))
    return float(np.polyfit(lx, ly, 1)[0])


def richardson_slope(f, x_max: float, decades: int = 2, points: int = 9) -> tuple[float, float]:
    """Asymptotic log-log slope of f(x) as x -> 0, and the error estimate of that slope.

    Fits the slope on a fine grid (the last ``decades`` decades below x_max / 10**decades) and on a
    coarse grid (the ``decades`` decades below x_max); returns (fine slope, |fine - coarse|). For
    f(x) = C x^s (1 + O(x)) the error of the fine slope is at most the difference when the
    correction is monotone (Richardson), so the difference is the tolerance.
    """
    coarse = np.logspace(math.log10(x_max) - decades, math.log10(x_max), points)
    fine = coarse / 10.0**decades
    s_coarse = loglog_slope(coarse, [f(v) for v in coarse])
    s_fine = loglog_slope(fine, [f(v) for v in fine])
    return s_fine, abs(s_fine - s_coarse)
