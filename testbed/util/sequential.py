"""Seeds where they decide: a group-sequential design per claim, its error budget fixed before the runs.

A claim is first judged after n0 seeds. A claim still undecided ("inconclusive") gets more seeds, in
stages of ``step``, and is judged again, up to ``cap`` seeds; a claim stops at the first look where it
is decided (any verdict but "inconclusive"), and its verdict is the one of that look. Looking again and
again at growing data with a fixed 90% interval would inflate the chance of a false verdict (each look
is another chance to cross a boundary by luck), so every look reads its interval at a stricter nominal
level allotted by an alpha-spending function (Lan and DeMets 1983, Biometrika 70:659):

* the information fraction of a look after n seeds is t = n / cap;
* alpha(t) is the one-sided error spent by fraction t; alpha(1) = the design's alpha (below);
* the boundary c_k of look k solves P(Z_1 < c_1, .., Z_{k-1} < c_{k-1}, Z_k >= c_k) = alpha(t_k) -
  alpha(t_{k-1}) for the look statistics of a Brownian motion, Z_k standard normal with
  corr(Z_i, Z_j) = sqrt(t_i / t_j) (i <= j) (Jennison and Turnbull 2000, "Group Sequential Methods",
  ch. 7), computed with scipy's multivariate normal distribution function;
* look k reads the two-sided interval at level 1 - 2 (1 - Phi(c_k)) (each of a decision's two
  one-sided tests, e.g. "above delta" and "below delta", at the nominal level 1 - Phi(c_k)), with
  the interval of testbed/util/stats.py (Student / Yuen t quantiles at that nominal level: the usual
  small-sample approximation of the normal-theory boundaries; `false_verdict_rate` checks its error on
  simulated null data).

The error budget: every claim's one-sided false-verdict rate at most ALPHA = 0.05 over all its looks.
The designs spend DESIGN_ALPHA = 0.04 of it, not 0.05, because the interval every decision reads (the
20% trimmed mean with Yuen's interval, testbed/util/stats.py) is liberal with few seeds: measured on 400,000
normal samples, its one-sided test at nominal 0.05 rejects a true null 5.9% of the time at n = 5, 5.5%
at n = 10 and 5.3% at n = 15 (at nominal 0.0226: 2.8%, 2.7%, 2.5%), the small-sample excess Wilcox
(2012, 4.5) reports for Yuen's method. Spending 0.04 keeps the realised rate within 0.05; the test
suite checks it on simulated null data (tests/unit/test_sequential.py).

Spending functions (`SPENDING`): ``pocock`` (Lan-DeMets Pocock type, alpha ln(1 + (e - 1) t)) spends
the error nearly evenly over the looks; ``obf`` (Lan-DeMets O'Brien-Fleming type,
2 - 2 Phi(z_{1-alpha/2} / sqrt(t))) spends almost nothing early. The report's designs use ``pocock``,
chosen before any run for what the looks are for: the first look at n0 = 5 seeds is where most claims
here are settled (large effects, small spreads), and with ``obf`` its nominal level (below 0.001
one-sided at t = 1/3) would be out of reach of a 5-seed trimmed interval (3 degrees of freedom), so
every claim would run to the cap and the full run would no longer fit its two hours. ``obf`` is kept
for designs with many looks.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats as st
from scipy.optimize import brentq

from testbed.util.stats import ALPHA, decide_equivalence, one_sample, using_level

SPENDING = ("pocock", "obf")
DESIGN_ALPHA = 0.04  # error spent by the designs, so that the realised rate stays within ALPHA (docstring)


def spent(t: float, alpha: float = ALPHA, kind: str = "pocock") -> float:
    """One-sided error spent by information fraction t in [0, 1] (module docstring)."""
    if kind not in SPENDING:
        raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got {kind!r}")
    if t <= 0:
        return 0.0
    t = min(t, 1.0)
    if kind == "pocock":
        return alpha * math.log1p((math.e - 1.0) * t)
    return float(2.0 - 2.0 * st.norm.cdf(st.norm.ppf(1.0 - alpha / 2.0) / math.sqrt(t)))


def _below(c: list[float], t: list[float]) -> float:
    """P(Z_1 < c_1, .., Z_k < c_k) for the look statistics at fractions t."""
    k = len(c)
    if k == 1:
        return float(st.norm.cdf(c[0]))
    cov = np.array([[math.sqrt(min(a, b) / max(a, b)) for b in t] for a in t])
    mvn = st.multivariate_normal(mean=np.zeros(k), cov=cov, seed=0, abseps=1e-6, releps=1e-6)
    return float(mvn.cdf(np.asarray(c)))


@functools.lru_cache(maxsize=64)
def boundaries(fractions: tuple[float, ...], alpha: float = ALPHA, kind: str = "pocock") -> tuple[float, ...]:
    """The z boundaries c_k of looks at the given increasing information fractions (module docstring)."""
    if not fractions or any(b <= a for a, b in itertools.pairwise(fractions)) or fractions[-1] > 1.0:
        raise ValueError(f"information fractions must increase within (0, 1], got {fractions!r}")
    cs: list[float] = []
    prev = 0.0
    for k, t in enumerate(fractions):
        inc = spent(t, alpha, kind) - prev
        prev += inc
        if k == 0:
            cs.append(float(st.norm.ppf(1.0 - inc)))
            continue
        stay = _below(cs, list(fractions[:k]))  # P(no crossing before look k)

        def f(c: float, k: int = k, stay: float = stay, inc: float = inc) -> float:
            return stay - _below([*cs, c], list(fractions[: k + 1])) - inc

        cs.append(float(brentq(f, -1.0, 12.0, xtol=1e-6)))
    return tuple(cs)


@dataclass(frozen=True)
class Design:
    """Looks after n0, n0 + step, .., cap seeds; alpha spent by ``spending`` (module docstring)."""

    n0: int
    step: int
    cap: int
    alpha: float = DESIGN_ALPHA
    spending: str = "pocock"

    def __post_init__(self) -> None:
        if not (1 <= self.n0 <= self.cap) or self.step < 1:
            raise ValueError(f"a design needs 1 <= n0 <= cap and step >= 1, got n0={self.n0}, step={self.step}, "
                             f"cap={self.cap}")
        if self.spending not in SPENDING:
            raise ValueError(f"spending must be one of {', '.join(SPENDING)}, got {self.spending!r}")

    @property
    def looks(self) -> tuple[int, ...]:
        ns = list(range(self.n0, self.cap + 1, self.step))
        if ns[-1] != self.cap:
            ns.append(self.cap)
        return tuple(ns)

    def nominal(self) -> tuple[float, ...]:
        """One-sided nominal level of each look, 1 - Phi(c_k); one look: ALPHA."""
        if len(self.looks) == 1:
            return (self.alpha,)
        cs = boundaries(tuple(n / self.cap for n in self.looks), self.alpha, self.spending)
        return tuple(float(st.norm.sf(c)) for c in cs)

    def level(self, look: int) -> float:
        """The two-sided interval level decisions read at look ``look`` (0-based)."""
        return 1.0 - 2.0 * self.nominal()[look]

    def seeds_shown(self) -> str:
        """The seeds an experiment under this design trains, for its grid line: "5 seeds at the first look, up to
        15 where a claim's design adds seeds" ("5 seeds" for a single look)."""
        if len(self.looks) == 1:
            return f"{self.n0} seeds"
        return f"{self.n0} seeds at the first look, up to {self.cap} where a claim's design adds seeds"

    def to_dict(self) -> dict[str, Any]:
        return {"n0": self.n0, "step": self.step, "cap": self.cap, "alpha": self.alpha, "spending": self.spending,
                "looks": list(self.looks), "levels": [self.level(k) for k in range(len(self.looks))]}


def run_design(decide: Callable[[np.ndarray, float], str], draw: Callable[[np.random.Generator, int], np.ndarray],
               design: Design, rng: np.random.Generator) -> tuple[str, int]:
    """One simulated claim: draw ``cap`` per-seed values, look at n0, n0 + step, .. seeds with that look's level;
    return (status at the stop, seeds used). ``decide(values, level)`` gives a status ("undecided" goes on)."""
    values = draw(rng, design.cap)
    status = "undecided"
    for k, n in enumerate(design.looks):
        status = decide(values[:n], design.level(k))
        if status != "undecided":
            return status, n
    return status, design.cap


def simulate(decide: Callable[[np.ndarray, float], str], draw: Callable[[np.random.Generator, int], np.ndarray],
             design: Design, reps: int, seed: int = 0) -> tuple[dict[str, int], float]:
    """``reps`` simulated claims under ``design`` (`run_design`): how many ended with each status, and the mean
    number of seeds used."""
    rng = np.random.default_rng(seed)
    counts: dict[str, int] = {}
    used = 0
    for _ in range(reps):
        status, n = run_design(decide, draw, design, rng)
        counts[status] = counts.get(status, 0) + 1
        used += n
    return counts, used / reps


def false_verdict_rate(decide: Callable[[np.ndarray, float], str], draw: Callable[[np.random.Generator, int], np.ndarray],
                       design: Design, false: str, reps: int, seed: int = 0) -> tuple[float, float, float]:
    """Over ``reps`` simulated claims: (rate of the status ``false``, its Monte-Carlo standard error, the mean
    number of seeds used)."""
    counts, used = simulate(decide, draw, design, reps, seed)
    p = counts.get(false, 0) / reps
    return p, math.sqrt(max(p * (1 - p), 1e-12) / reps), used


def equivalence_power(design: Design, sd: float, effect: float, tol: float, reps: int = 4000, seed: int = 0,
                      estimator: str = "mean") -> dict[str, float]:
    """Operating characteristics of "|paired difference| < tol" (`testbed.util.stats.decide_equivalence`, TOST on
    the ``estimator`` of the differences) under ``design``, on ``reps`` simulated claims whose per-seed
    differences are normal with mean ``effect`` and spread ``sd``: the rates of "holds" and "fails" (Monte-Carlo
    standard error sqrt(p (1 - p) / reps)) and the mean number of seeds used. At ``effect`` = +-``tol`` the
    "holds" rate is the design's realised false-"holds" rate; at the effect a design is planned for, its power."""
    def decide(values: np.ndarray, level: float) -> str:
        with using_level(level):
            return decide_equivalence(one_sample(values, estimator), tol)[0]

    counts, used = simulate(decide, lambda r, k: r.normal(effect, sd, k), design, reps, seed)
    return {"holds": counts.get("holds", 0) / reps, "fails": counts.get("fails", 0) / reps, "mean_seeds": used}
