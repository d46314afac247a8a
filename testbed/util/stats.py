"""Statistics of the claims report and the LLM studies: intervals over seeds and the decisions built on them.

Pure functions of per-seed numbers; every verdict of figures/claims.py is made here. The rules:

* **Data.** One value per seed and setting (a final error, a mean cosine, a longest solved length).
  Two settings run with the same seed share the initialisation and the context stream
  (testbed/runner.py), so a comparison is made seed by seed: d_i = f(b_i) - f(a_i) over the seeds
  where both values are finite (``paired``). Where fewer than two seeds pair up, Welch's unpaired
  interval is used (`welch_interval`).
* **Estimator, fixed before the runs: the 20% trimmed mean** (`trimmed_interval`). Outcomes here are
  bimodal: most seeds learn, and now and then one seed loses a class (a bandit policy that stops
  predicting a label never samples it again) or collapses, ending far from the rest. A mean and its
  t interval read such a seed as a shift of the whole cell and a wide spread, so one seed can turn
  "matches" into "inconclusive" (or, by widening the other side, the reverse) without anyone seeing
  why. The estimate every decision reads is therefore the trimmed mean of the (paired) values,
  trimming g = floor(0.2 n) values from each end, with Yuen's (1974, Biometrika 61:165)
  interval: estimate +- t_{(1+level)/2, h-1} sqrt((n-1) s_w^2 / (h (h-1))), h = n - 2g, s_w^2 the
  variance of the values winsorized at the same g (Tukey and McLaughlin 1963; Wilcox 2012,
  "Introduction to Robust Estimation", 4.4: for paired data, the trimmed mean of the differences).
  With 5 seeds one value is trimmed from each end (breakdown 20%: one wild seed cannot move the
  estimate or the interval's ends by more than the gap to its neighbour); with fewer than 5 seeds
  nothing is trimmed and it is the Student-t interval. Why not the paired Hodges-Lehmann estimate with
  its Wilcoxon interval: its exact one-sided levels are multiples of 2^-n (1/32 at n = 5), so it cannot
  reach the stricter nominal levels of a sequential design's early looks (below), and at n = 5 its 90%
  interval is the range of the differences, whose ends are single seeds. The Hodges-Lehmann estimate
  (`hodges_lehmann`) and the plain mean's status are reported beside each part.
* **Lost classes and collapses are judged as a rate, separately** (`rate`): per cell, the number of
  seeds that lost a class (or stalled, or diverged) out of n, with its exact Clopper-Pearson interval.
  Every comparison records the status the plain mean would give; where it differs from the trimmed
  mean's, the part's detail says so and names the cells' rates, so a verdict that one seed could have
  swung is never silent.
* **Interval level.** The two-sided 90% interval (one-sided tests at ALPHA = 0.05) in a fixed-size
  design. In a sequential design (testbed/util/sequential.py: a look after n0 seeds, more seeds in stages
  for undecided claims, up to a cap) each look reads the interval at the nominal level that the
  design's alpha-spending function allots to that look (`using_level`), so that the claim's error
  over all its looks stays within ALPHA.
* **Scale.** ``scale="diff"`` compares values as they are (error points, cosines, lengths);
  ``scale="log"`` compares their logarithms, i.e. ratios (an error rate twice as high is +log 2
  whatever its level). Values are floored at ``floor`` first (the evaluation's resolution, so an
  error of 0 is half a test example, not minus infinity).
* **Equivalence** ("matches", `equivalence`): the two one-sided tests of Schuirmann (1987,
  J. Pharmacokinet. Biopharm. 15:657) at ALPHA: equivalent iff the 90% interval lies inside
  (-tol, tol); *not* equivalent iff it lies entirely outside [-tol, tol]; otherwise undecided. A
  large gap measured with much noise therefore never "matches": its interval reaches past tol.
* **Superiority** with a minimum effect delta >= 0 (`superiority`; a one-sided t test of
  H0: effect <= delta): holds iff lo > delta. The effect is smaller than delta iff hi < delta: then
  "direction" when lo > 0 (the claimed sign is established, the claimed size is not reached), else
  "fails". Otherwise (lo <= delta <= hi) undecided.
* **Threshold** on one setting's mean (`at_least`, `at_most`): the same with a one-sample interval.
* **Proportions** (how many collapses had a precursor, `proportion`): the exact Clopper-Pearson 90%
  interval against a threshold, with Fisher's exact one-sided test against a base rate as the
  "direction" (scipy.stats.binomtest, fisher_exact).
* **Seeds needed** for an undecided result (`seeds_needed`): the smallest n >= 2 with
  n >= ((t_{1-ALPHA, n-1} + t_{1-BETA, n-1}) s / m)^2, ALPHA = 0.05, BETA = 0.2 (power 80%): the
  standard sample size of a one-sample (paired) t test (e.g. Julious 2004, Stat. Med. 23:1921, eq. 4),
  with s the measured standard deviation and m the distance of the measured mean from the boundary it
  has to clear (delta, or the nearer end of (-tol, tol)). It assumes the true mean and spread are the
  measured ones: a planning number, printed beside "inconclusive", not a promise.
* **Claims with several parts** are "reproduced" only when every part holds (`combine`): an
  intersection-union test (Berger 1982, Technometrics 24:295), level ALPHA without a multiplicity
  correction.

* **Plain summaries and noise floors**, for the LLM studies and the figures' error bars: `mean_se` (Python
  floats; a NaN seed makes the cell undefined), `mean_se_finite` (NaN seeds left out; no bar below two),
  `pooled_sd`, `binomial_diff_sd` (the spread evaluation noise alone gives a difference of two scores),
  `mcnemar_greater` (paired events, exact) and `bonferroni_level` (the level of each of several looks).

Statuses of one part (`Outcome.status`): ``holds``, ``direction``, ``fails``, ``undecided``,
``n/a`` (the part does not apply, e.g. a base that does not degrade). A claim whose precondition fails
or cannot be checked (figures/records.py, `Precondition`) is "not testable" whatever its parts say.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as st

ALPHA = 0.05  # one-sided level of every test
BETA = 0.20  # 1 - power, for the seeds-needed planning number
LEVEL = 1.0 - 2.0 * ALPHA  # the two-sided interval every decision reads: 90%
MAX_SEEDS = 100_000  # "seeds needed" beyond this is reported as more than MAX_SEEDS
TRIM = 0.2  # fraction trimmed from each end by the estimator every decision reads (module docstring)

STATUSES = ("holds", "direction", "fails", "undecided", "n/a")
VERDICTS = ("reproduced", "direction only", "not reproduced", "inconclusive", "not testable", "not applicable")

_LEVEL: contextvars.ContextVar[float] = contextvars.ContextVar("level", default=LEVEL)


@contextlib.contextmanager
def using_level(level: float) -> Iterator[None]:
    """Decisions inside the block read two-sided ``level`` intervals (a sequential design's look)."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"an interval level must lie in (0, 1), got {level!r}")
    token = _LEVEL.set(level)
    try:
        yield
    finally:
        _LEVEL.reset(token)


def current_level() -> float:
    """The two-sided level decisions read now (LEVEL outside `using_level`)."""
    return _LEVEL.get()


def _lv(level: float | None) -> float:
    return current_level() if level is None else level


@dataclass(frozen=True)
class Interval:
    """Mean of n values (or of n paired differences) with its two-sided ``level`` t interval."""

    estimate: float
    lo: float
    hi: float
    n: int
    sd: float
    se: float
    df: float
    paired: bool = True
    level: float = LEVEL
    estimator: str = "mean"  # "mean" (Student t / Welch) or "trimmed" (20% trimmed mean, Yuen)

    @property
    def defined(self) -> bool:
        """True when the interval has a finite width (n >= 2) or is exact (sd = 0)."""
        return math.isfinite(self.lo) and math.isfinite(self.hi)


def _finite(values: Any) -> np.ndarray:
    v = np.asarray([np.nan if x is None else x for x in np.atleast_1d(np.asarray(values, dtype=object))],
                   dtype=float)
    return v[np.isfinite(v)]


def transform(values: Any, scale: str = "diff", floor: float | None = None) -> np.ndarray:
    """Values on the comparison scale: as they are (``diff``) or log(max(v, floor)) (``log``)."""
    v = np.asarray([np.nan if x is None else x for x in np.atleast_1d(np.asarray(values, dtype=object))],
                   dtype=float)
    if scale == "diff":
        return v
    if scale != "log":
        raise ValueError(f"scale must be 'diff' or 'log', got {scale!r}")
    if floor is None or floor <= 0:
        raise ValueError(f"scale 'log' needs a floor > 0, got {floor!r}")
    with np.errstate(invalid="ignore"):
        return np.log(np.maximum(v, floor))


def t_quantile(p: float, df: float) -> float:
    return float(st.t.ppf(p, df))


def t_interval(values: Any, level: float | None = None) -> Interval:
    """Mean of the finite ``values`` +- t_{(1+level)/2, n-1} sd / sqrt(n). One value: an undefined
    (infinite) interval; no value: NaN."""
    level = _lv(level)
    v = _finite(values)
    n = int(v.size)
    if n == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, nan, nan, 0.0, level=level)
    mean = float(v.mean())
    if n == 1:
        return Interval(mean, -math.inf, math.inf, 1, float("nan"), float("inf"), 0.0, level=level)
    sd = float(v.std(ddof=1))
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + level / 2.0, n - 1) * se
    return Interval(mean, mean - half, mean + half, n, sd, se, float(n - 1), level=level)


def welch_interval(a: Any, b: Any, level: float | None = None) -> Interval:
    """mean(b) - mean(a) with Welch's interval (Welch-Satterthwaite degrees of freedom)."""
    level = _lv(level)
    a, b = _finite(a), _finite(b)
    na, nb = a.size, b.size
    if na == 0 or nb == 0:
        nan = float("nan")
        return Interval(nan, nan, nan, 0, nan, nan, 0.0, paired=False, level=level)
    est = float(b.mean() - a.mean())
    if na < 2 or nb < 2:
        return Interval(est, -math.inf, math.inf, min(na, nb), float("nan"), float("inf"), 0.0, False, level)
    va, vb = a.var(ddof=1) / na, b.var(ddof=1) / nb
    se = math.sqrt(va + vb)
    if se == 0:
        return Interval(est, est, est, min(na, nb), 0.0, 0.0, float(na + nb - 2), False, level)
    df = (va + vb) ** 2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = t_quantile(0.5 + level / 2.0, df) * se
    # sd reported as the standard deviation a paired design of the same size would need for this se
    n = min(na, nb)
    return Interval(est, est - half, est + half, n, se * math.sqrt(n), se, float(df), False, level)


def trim_count(n: int, trim: float = TRIM) -> int:
    """g = floor(trim n), kept below n / 2 - 1 so that at least two values remain."""
    g = math.floor(trim * n + 1e-9)
    return max(0, min(g, (n - 2) // 2))


def trimmed_interval(values: Any, level: float | None = None, trim: float = TRIM) -> Interval:
    """Trimmed mean of the finite ``values`` with Yuen's interval (module docstring).

    g = floor(trim n) values are dropped from each end; h = n - 2g; the standard error is
    sqrt((n - 1) s_w^2 / (h (h - 1))) with s_w^2 the (ddof 1) variance of the values winsorized at g;
    the interval is estimate +- t_{(1+level)/2, h-1} se. With g = 0 it is exactly `t_interval`."""
    level = _lv(level)
    v = np.sort(_finite(values))
    n = int(v.size)
    g = trim_count(n, trim)
    if g == 0:
        iv = t_interval(v, level)
        return Interval(iv.estimate, iv.lo, iv.hi, iv.n, iv.sd, iv.se, iv.df, iv.paired, iv.level, "trimmed")
    h = n - 2 * g
    est = float(v[g: n - g].mean())
    w = v.copy()
    w[:g], w[n - g:] = v[g], v[n - g - 1]
    sw = float(w.std(ddof=1))
    se = math.sqrt((n - 1) * sw * sw / (h * (h - 1)))
    half = t_quantile(0.5 + level / 2.0, h - 1) * se
    # sd: the spread a plain t interval of n values would need for this se (for the seeds-needed number)
    return Interval(est, est - half, est + half, n, se * math.sqrt(n), se, float(h - 1), True, level, "trimmed")


def hodges_lehmann(values: Any) -> float:
    """Median of the Walsh averages (x_i + x_j) / 2, i <= j (Hodges and Lehmann 1963): the estimate of the
    signed-rank test, reported beside the trimmed mean. NaN without values."""
    v = _finite(values)
    if not v.size:
        return float("nan")
    i, j = np.triu_indices(v.size)
    return float(np.median((v[i] + v[j]) / 2.0))


def difference(a: Any, b: Any, scale: str = "diff", floor: float | None = None, level: float | None = None,
               estimator: str = "trimmed") -> Interval:
    """b - a on ``scale``: paired by position (= by seed) over the positions where both are finite, when at
    least two pair up (the trimmed mean of the differences, or their mean with ``estimator="mean"``); else
    Welch's unpaired interval. ``a`` and ``b`` are aligned per seed."""
    if estimator not in ("trimmed", "mean"):
        raise ValueError(f"estimator must be 'trimmed' or 'mean', got {estimator!r}")
    ta, tb = transform(a, scale, floor), transform(b, scale, floor)
    if ta.shape == tb.shape:
        ok = np.isfinite(ta) & np.isfinite(tb)
        if ok.sum() >= 2:
            d = tb[ok] - ta[ok]
            return trimmed_interval(d, level) if estimator == "trimmed" else t_interval(d, level)
    return welch_interval(ta, tb, level)


def one_sample(values: Any, estimator: str = "trimmed", level: float | None = None) -> Interval:
    """The interval of one setting's values: trimmed (the default every decision reads) or plain mean."""
    return trimmed_interval(values, level) if estimator == "trimmed" else t_interval(values, level)


# -- decisions ---------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One tested part of a claim: what was compared, the interval, the rule's margin and the status."""

    name: str
    kind: str  # superiority | equivalence | at_least | at_most | proportion | exact | precondition
    status: str
    margin: float
    scale: str
    interval: Interval | None = None
    seeds_needed: int | None = None
    detail: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    unit: str = ""  # "%": a difference of rates shown in percentage points

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe numbers (infinite interval ends as the strings "inf" / "-inf", NaN as None)."""
        return _jsonable(asdict(self))


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def seeds_needed(sd: float, margin: float, alpha: float = ALPHA, beta: float = BETA) -> int | None:
    """Smallest n >= 2 with n >= ((t_{1-alpha, n-1} + t_{1-beta, n-1}) sd / margin)^2 (module docstring).

    None when it cannot be computed (spread unknown, or a zero margin: the measured mean sits on the
    boundary); MAX_SEEDS + 1 when more than MAX_SEEDS would be needed."""
    if not (math.isfinite(sd) and math.isfinite(margin)) or margin <= 0:
        return None
    if sd == 0:
        return 2
    z = float(st.norm.ppf(1 - alpha) + st.norm.ppf(1 - beta))
    start = (z * sd / margin) ** 2  # t quantiles exceed z: n* is at least the normal-theory size
    if start > MAX_SEEDS:
        return MAX_SEEDS + 1
    for n in range(max(2, math.floor(start)), MAX_SEEDS + 1):
        need = ((t_quantile(1 - alpha, n - 1) + t_quantile(1 - beta, n - 1)) * sd / margin) ** 2
        if n >= need:
            return n
    return MAX_SEEDS + 1


def _undecided(iv: Interval, boundary_distance: float) -> int | None:
    return seeds_needed(iv.sd, boundary_distance) if iv.n >= 2 else None


def decide_superiority(iv: Interval, delta: float) -> tuple[str, int | None]:
    """Status of "the effect exceeds delta" from the interval (module docstring)."""
    if iv.n == 0 or not math.isfinite(iv.estimate):
        return "undecided", None
    if iv.lo > delta:
        return "holds", None
    if iv.hi < delta:
        return ("direction" if iv.lo > 0 else "fails"), None
    return "undecided", _undecided(iv, abs(iv.estimate - delta))


def decide_equivalence(iv: Interval, tol: float) -> tuple[str, int | None]:
    """Status of "|effect| < tol" (TOST) from the interval (module docstring)."""
    if tol <= 0:
        raise ValueError(f"an equivalence tolerance must be > 0, got {tol}")
    if iv.n == 0 or not math.isfinite(iv.estimate):
        return "undecided", None
    if -tol < iv.lo and iv.hi < tol:
        return "holds", None
    if iv.lo > tol or iv.hi < -tol:
        return "fails", None
    return "undecided", _undecided(iv, abs(tol - abs(iv.estimate)))


def _with_mean(o: Outcome, mean_iv: Interval, decide: Any, hl: float) -> Outcome:
    """Record beside the trimmed decision the plain mean's interval and status and the Hodges-Lehmann estimate;
    say so in the detail where the two estimators disagree (module docstring)."""
    mean_status, _ = decide(mean_iv)
    o.extra.update({"mean_status": mean_status, "mean": mean_iv.estimate, "mean_lo": mean_iv.lo,
                    "mean_hi": mean_iv.hi, "hodges_lehmann": hl})
    if mean_status != o.status and o.interval is not None and o.interval.estimator == "trimmed":
        o.detail = (f"{o.detail}; " if o.detail else "") + (
            f"the plain mean would say '{mean_status}' (trimmed mean: '{o.status}'): an outlying seed, see the "
            "cells' lost-class / collapse rates")
    return o


def _walsh_hl(a: Any, b: Any, scale: str, floor: float | None) -> float:
    ta, tb = transform(a, scale, floor), transform(b, scale, floor)
    if ta.shape != tb.shape:
        return float("nan")
    return hodges_lehmann(tb - ta)


def superiority(name: str, reference: Any, candidate: Any, delta: float, scale: str = "diff",
                floor: float | None = None, higher: bool = False, detail: str = "",
                estimator: str = "trimmed") -> Outcome:
    """``candidate`` beats ``reference`` by more than ``delta``. The effect is reference - candidate when
    lower is better (error rates, the default) and candidate - reference with ``higher=True``; decided on the
    ``estimator`` of the paired differences (`difference`: "mean" for a claim about the tail)."""
    a, b = (candidate, reference) if not higher else (reference, candidate)
    iv = difference(a, b, scale, floor, estimator=estimator)
    status, need = decide_superiority(iv, delta)
    o = Outcome(name, "superiority", status, delta, scale, iv, need, detail)
    mean_iv = iv if estimator == "mean" else difference(a, b, scale, floor, estimator="mean")
    return _with_mean(o, mean_iv, lambda x: decide_superiority(x, delta),
                      _walsh_hl(a, b, scale, floor))


def equivalence(name: str, a: Any, b: Any, tol: float, scale: str = "diff", floor: float | None = None,
                detail: str = "", estimator: str = "trimmed") -> Outcome:
    """``b`` matches ``a`` within ``tol`` (on ``scale``), decided on the ``estimator`` of the paired differences."""
    iv = difference(a, b, scale, floor, estimator=estimator)
    status, need = decide_equivalence(iv, tol)
    o = Outcome(name, "equivalence", status, tol, scale, iv, need, detail)
    mean_iv = iv if estimator == "mean" else difference(a, b, scale, floor, estimator="mean")
    return _with_mean(o, mean_iv, lambda x: decide_equivalence(x, tol),
                      _walsh_hl(a, b, scale, floor))


def _one(name: str, kind: str, values: Any, margin: float, decide: Any, detail: str) -> Outcome:
    iv = one_sample(values)
    status, need = decide(iv)
    o = Outcome(name, kind, status, margin, "diff", iv, need, detail)
    return _with_mean(o, one_sample(values, "mean"), decide, hodges_lehmann(values))


def at_least(name: str, values: Any, threshold: float, detail: str = "") -> Outcome:
    """The (trimmed) mean of ``values`` exceeds ``threshold`` (one-sample interval; no "direction")."""
    return _one(name, "at_least", values, threshold,
                lambda iv: decide_superiority(_shift(iv, -threshold), 0.0), detail)


def at_most(name: str, values: Any, threshold: float, detail: str = "") -> Outcome:
    """The (trimmed) mean of ``values`` is below ``threshold``."""
    return _one(name, "at_most", values, threshold,
                lambda iv: decide_superiority(_shift(_negate(iv), threshold), 0.0), detail)


def within(name: str, values: Any, centre: float, tol: float, detail: str = "") -> Outcome:
    """The (trimmed) mean of ``values`` lies within ``centre`` +- ``tol`` (one-sample TOST)."""
    return _one(name, "equivalence", values, tol, lambda iv: decide_equivalence(_shift(iv, -centre), tol), detail)


def _shift(iv: Interval, by: float) -> Interval:
    return Interval(iv.estimate + by, iv.lo + by, iv.hi + by, iv.n, iv.sd, iv.se, iv.df, iv.paired, iv.level,
                    iv.estimator)


def _negate(iv: Interval) -> Interval:
    return Interval(-iv.estimate, -iv.hi, -iv.lo, iv.n, iv.sd, iv.se, iv.df, iv.paired, iv.level, iv.estimator)


def exact(name: str, holds: bool, value: float = float("nan"), margin: float = float("nan"), detail: str = "") -> Outcome:
    """A part decided by an exact computation (no sampling noise): holds or fails."""
    iv = Interval(value, value, value, 0, 0.0, 0.0, 0.0)
    return Outcome(name, "exact", "holds" if holds else "fails", margin, "diff", iv, None, detail)


def precondition(name: str, base: Any, stale: Any, min_effect: float, detail: str = "", unit: str = "%",
                 estimator: str = "trimmed") -> Outcome:
    """Does ``stale`` exceed ``base`` (paired, the ``estimator`` of the differences) significantly *and* by at
    least ``min_effect`` on average?

    holds: lo > 0 and estimate >= min_effect; n/a: hi < min_effect (it does not, by that much);
    otherwise undecided (seeds needed to settle min_effect). The regime search's definition of "degrades"."""
    iv = difference(base, stale, estimator=estimator)
    if iv.n == 0 or not math.isfinite(iv.estimate):
        return Outcome(name, "precondition", "undecided", min_effect, "diff", iv, None, detail, unit=unit)
    if iv.lo > 0 and iv.estimate >= min_effect:
        status, need = "holds", None
    elif iv.hi < min_effect:
        status, need = "n/a", None
    else:
        gap = abs(iv.estimate - min_effect) if iv.estimate < min_effect else abs(iv.estimate)
        status, need = "undecided", _undecided(iv, gap)
    return Outcome(name, "precondition", status, min_effect, "diff", iv, need, detail, unit=unit)


def clopper_pearson(k: int, n: int, level: float | None = None) -> tuple[float, float]:
    """Exact binomial interval of k successes in n trials."""
    level = _lv(level)
    if n == 0:
        return float("nan"), float("nan")
    ci = st.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    return float(ci.low), float(ci.high)


def events_needed(p: float, threshold: float, alpha: float = ALPHA, beta: float = BETA) -> int | None:
    """Events needed to tell a rate p from ``threshold`` (normal approximation,
    n = (z_{1-alpha} + z_{1-beta})^2 p (1 - p) / (p - threshold)^2)."""
    if not 0 < p < 1 or p == threshold:
        return None
    z = st.norm.ppf(1 - alpha) + st.norm.ppf(1 - beta)
    return math.ceil(z * z * p * (1 - p) / (p - threshold) ** 2)


def proportion(name: str, k: int, n: int, threshold: float, base_k: int = 0, base_n: int = 0, detail: str = "") -> Outcome:
    """"Most events have the property": k of n, exact interval against ``threshold``; the "direction" is that
    the rate exceeds the base rate base_k / base_n (Fisher's exact test, one-sided at ALPHA)."""
    lo, hi = clopper_pearson(k, n)
    p = k / n if n else float("nan")
    iv = Interval(p, lo, hi, n, float("nan"), float("nan"), 0.0, level=current_level())
    above_base = False
    pval = float("nan")
    if n and base_n:
        pval = float(st.fisher_exact([[k, n - k], [base_k, base_n - base_k]], alternative="greater")[1])
        above_base = pval < ALPHA
    if n == 0:
        status, need = "undecided", None
    elif lo > threshold and (above_base or not base_n):
        status, need = "holds", None
    elif hi < threshold:
        status, need = ("direction" if above_base else "fails"), None
    else:
        status, need = "undecided", events_needed(p, threshold)
    return Outcome(name, "proportion", status, threshold, "diff", iv, need, detail,
                   {"base_rate": base_k / base_n if base_n else None, "fisher_p": _jsonable(pval)})


def rate(name: str, flags: Any, detail: str = "") -> Outcome:
    """How many seeds of a cell carry a flag (lost a class, stalled, diverged): k of n with the exact
    Clopper-Pearson interval at the current level. ``flags``: one bool per seed, None where unknown
    (not counted). Reported beside the verdict (status ``n/a``), never averaged into an error."""
    known = [bool(f) for f in np.atleast_1d(np.asarray(flags, dtype=object)) if f is not None
             and not (isinstance(f, float) and math.isnan(f))]
    k, n = sum(known), len(known)
    lo, hi = clopper_pearson(k, n)
    iv = Interval(k / n if n else float("nan"), lo, hi, n, float("nan"), float("nan"), 0.0, level=current_level())
    return Outcome(name, "rate", "n/a", float("nan"), "diff", iv, None, detail or f"{k} of {n} seeds",
                   {"k": k, "n": n})


def reported(name: str, values: Any, detail: str = "") -> Outcome:
    """A quantity shown beside the verdict, not judged: its trimmed mean and interval (status ``n/a``)."""
    return Outcome(name, "reported", "n/a", float("nan"), "diff", one_sample(values), None, detail)


def combine(outcomes: Iterable[Outcome]) -> str:
    """A claim's verdict from its parts: all ``n/a`` (or none) -> not applicable; any ``fails`` -> not
    reproduced; else any ``undecided`` -> inconclusive; else any ``direction`` -> direction only; else
    reproduced (every part holds)."""
    statuses = [o.status for o in outcomes if o.status != "n/a"]
    if not statuses:
        return "not applicable"
    if "fails" in statuses:
        return "not reproduced"
    if "undecided" in statuses:
        return "inconclusive"
    if "direction" in statuses:
        return "direction only"
    return "reproduced"


def max_needed(outcomes: Sequence[Outcome]) -> int | None:
    """The largest seeds-needed number among the undecided parts (None if none is known)."""
    needs = [o.seeds_needed for o in outcomes if o.status == "undecided" and o.seeds_needed is not None]
    return max(needs) if needs else None


# -- plain summaries, noise floors and levels ------------------------------------------------------------


def mean_se(values: Sequence[float]) -> tuple[float, float, int]:
    """(mean, standard error of the mean, n) of ``values``, in Python floats: m = sum(v) / n, SE = sqrt(sum((v -
    m)^2) / (n - 1) / n); SE NaN below two values; a NaN value (a diverged run) makes both NaN, so a cell with one
    reads as undefined rather than as the mean of the rest (the LLM study's search rule)."""
    n = len(values)
    if n == 0:
        return math.nan, math.nan, 0
    m = sum(values) / n
    if n < 2:
        return m, math.nan, n
    var = sum((v - m) ** 2 for v in values) / (n - 1)
    return m, math.sqrt(var / n), n


def mean_se_finite(values: Any) -> tuple[Any, Any]:
    """Mean and standard error over seeds of the finite values only (seeds a later look did not train are NaN):
    floats for a list of per-seed values, arrays per column for rows of seeds [n_seeds, n_x]. The error is 0
    with fewer than two finite values (an error bar of no width), the mean NaN with none."""
    v = np.asarray(values, dtype=float)
    cols = v.reshape(-1, 1) if v.ndim <= 1 else v
    n = np.isfinite(cols).sum(axis=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns (mean NaN) and single seeds (no spread)
        mean = np.nanmean(cols, axis=0)
        se = np.where(n > 1, np.nanstd(cols, axis=0, ddof=1) / np.sqrt(np.maximum(n, 1)), 0.0)
    return (float(mean[0]), float(se[0])) if v.ndim <= 1 else (mean, se)


def pooled_sd(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """Pooled within-group SD and its degrees of freedom over the groups' finite values: sqrt(sum_g sum_i (x_gi -
    m_g)^2 / df), df = sum_g (n_g - 1) over the groups with at least two values; NaN when df is 0."""
    ss, df = 0.0, 0
    for g in groups:
        g = [x for x in g if math.isfinite(x)]
        if len(g) >= 2:
            m = sum(g) / len(g)
            ss += sum((x - m) ** 2 for x in g)
            df += len(g) - 1
    return (math.sqrt(ss / df) if df else math.nan), df


def binomial_diff_sd(p1: float, p2: float, problems: int, n: int = 1) -> float:
    """The spread that evaluation noise alone gives a difference of two scores (proportions p1, p2 of
    ``problems`` problems each), averaged over ``n`` pairs: sqrt((p1 (1 - p1) + p2 (1 - p2)) / problems / n);
    NaN when p1 or p2 is."""
    if not (math.isfinite(p1) and math.isfinite(p2)):
        return math.nan
    return math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / problems / n)


def mcnemar_greater(a: Any, b: Any) -> dict[str, Any]:
    """Paired events, one flag per seed in each arm: k = seeds where only ``a`` has it, c = only ``b``; the exact
    one-sided McNemar p = P(Bin(k + c, 1/2) >= k) (McNemar 1947) that ``a`` has it more often, and k / n with its
    exact interval (`clopper_pearson`). Keys: caused (k), reverse (c), n, p, rate, lo, hi."""
    s, y = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    k, c, n = int((s & ~y).sum()), int((~s & y).sum()), int(s.size)
    p = float(st.binom.sf(k - 1, k + c, 0.5)) if k + c else 1.0
    lo, hi = clopper_pearson(k, n)
    return {"caused": k, "reverse": c, "n": n, "p": p, "rate": k / n if n else float("nan"), "lo": lo, "hi": hi}


def bonferroni_level(looks: int, alpha: float = ALPHA) -> float:
    """The two-sided level of each interval when ``looks`` looks at growing data are read (Bonferroni): the one
    look's two tails, 2 ``alpha``, shared equally: 1 - 2 ``alpha`` / looks, so that reading the data again after
    an undecided look keeps the chance of any false "holds" or "fails" within one look's."""
    return 1.0 - 2.0 * alpha / looks


# -- formatting ----------------------------------------------------------------------------------------


def summary(values: Any) -> dict[str, float]:
    """mean, std (ddof 1), standard error and n of the finite values (std and standard error NaN below two)."""
    v = _finite(values)
    n = int(v.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "se": float("nan"), "n": 0}
    std = float(v.std(ddof=1)) if n > 1 else math.nan
    return {"mean": float(v.mean()), "std": std, "se": std / math.sqrt(n), "n": n}


def fmt(values: Any, digits: int = 3, pct: bool = False) -> str:
    """'mean +- std (n=k)' of per-seed values (percent if ``pct``)."""
    s = summary(values)
    if s["n"] == 0:
        return "n/a"
    k = 100.0 if pct else 1.0
    unit = "%" if pct else ""
    if s["n"] == 1:
        return f"{s['mean'] * k:.{digits}g}{unit} (n=1, no spread)"
    return f"{s['mean'] * k:.{digits}g}{unit} +- {s['std'] * k:.2g} (n={s['n']})"


def fmt_interval(o: Outcome) -> str:
    """The part's estimate and 90% interval in the units of its scale (ratios for ``log``)."""
    iv = o.interval
    if iv is None or not math.isfinite(iv.estimate):
        return "no data"
    if o.kind == "exact":
        return f"{iv.estimate:.4g} (exact)"
    note = level_note(iv)
    level = f", {note}" if note else ""
    if o.kind == "proportion":
        return f"{iv.estimate:.0%} of {iv.n} [{iv.lo:.0%}, {iv.hi:.0%}]" + (f" (exact{level})" if level else "")
    if o.kind == "rate":
        return f"{o.extra.get('k', 0)} of {iv.n} seeds ({iv.estimate:.0%}) [{iv.lo:.0%}, {iv.hi:.0%}] (exact{level})"
    if iv.n == 1:
        return f"{iv.estimate:.4g} (n=1, no spread)"
    if o.scale == "log":
        def r(x: float) -> str:
            return f"{math.exp(x):.3g}x" if math.isfinite(x) else ("inf" if x > 0 else "0")
        return f"ratio {r(iv.estimate)} [{r(iv.lo)}, {r(iv.hi)}] ({_tags(iv)})"
    k, unit = (100.0, " pts") if o.unit == "%" else (1.0, "")

    def v(x: float) -> str:
        return f"{x * k:+.3g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")
    return f"{v(iv.estimate)}{unit} [{v(iv.lo)}, {v(iv.hi)}] ({_tags(iv)})"


def _tags(iv: Interval) -> str:
    tags = [f"n={iv.n}"]
    if not iv.paired:
        tags.append("unpaired")
    if iv.estimator == "trimmed" and trim_count(iv.n) > 0:
        tags.append(f"{trim_count(iv.n)} trimmed per side")
    note = level_note(iv)
    if note:
        tags.append(note)
    return ", ".join(tags)


def level_note(iv: Interval) -> str:
    """ "<level> interval" where the interval is not at the one-look `LEVEL` (a staged look's), else ""."""
    return f"{iv.level:.2%} interval" if abs(iv.level - LEVEL) > 1e-9 else ""


def fmt_margin(o: Outcome) -> str:
    """The part's margin as the rule reads it: a factor (log scale), points, or a plain value."""
    if not isinstance(o.margin, int | float) or not math.isfinite(o.margin):
        return ""
    if o.scale == "log":
        return f"factor {math.exp(o.margin):.3g}"
    if o.unit == "%":
        return f"{o.margin * 100:.3g} pts"
    return f"{o.margin:.3g}"


# -- ratios and several hypotheses ---------------------------------------------------------------------


def ratio_interval(num: Any, den: Any, level: float | None = None) -> Interval:
    """mean(num) / mean(den) over the positions (seeds) where both are finite, with Fieller's paired interval.

    Fieller (1954, J. R. Stat. Soc. B 16:175): the interval is the set of theta whose paired mean
    mean(num_i - theta den_i) the two-sided ``level`` t interval does not exclude from 0, i.e.
    (x - theta y)^2 <= t^2 (s_xx - 2 theta s_xy + theta^2 s_yy) / n with x, y the means, s the
    (ddof 1) (co)variances and t = t_{(1+level)/2, n-1}. It is a finite interval when mean(den) is
    itself different from 0 at that level (y^2 > t^2 s_yy / n); otherwise it is unbounded and reported
    as (-inf, inf). So ``lo > theta0`` exactly when the one-sided t test of mean(num - theta0 den) > 0
    rejects at (1 - level) / 2 and the denominator is established. ``se`` is the delta method's.
    Fewer than two pairs, or mean(den) = 0: NaN estimate, interval (-inf, inf)."""
    level = _lv(level)
    x, y = (np.asarray([np.nan if v is None else v for v in np.atleast_1d(np.asarray(a, dtype=object))], dtype=float)
            for a in (num, den))  # fmt: skip
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(x.size)
    if n < 2 or y.mean() == 0:
        est = float(x.mean() / y.mean()) if n and y.mean() != 0 else float("nan")
        return Interval(est, -math.inf, math.inf, n, float("nan"), float("inf"), float(max(n - 1, 0)), level=level)
    mx, my = float(x.mean()), float(y.mean())
    cov = np.cov(np.stack([x, y]), ddof=1)
    sxx, syy, sxy = float(cov[0, 0]), float(cov[1, 1]), float(cov[0, 1])
    t2 = t_quantile(0.5 + level / 2.0, n - 1) ** 2
    a, b, c = my * my - t2 * syy / n, mx * my - t2 * sxy / n, mx * mx - t2 * sxx / n
    est = mx / my
    se = math.sqrt(max(sxx - 2 * est * sxy + est * est * syy, 0.0) / n) / abs(my)
    if a <= 0:
        return Interval(est, -math.inf, math.inf, n, se * math.sqrt(n), se, float(n - 1), level=level)
    half = math.sqrt(max(b * b - a * c, 0.0))
    return Interval(est, (b - half) / a, (b + half) / a, n, se * math.sqrt(n), se, float(n - 1), level=level)


def p_greater(estimate: float, se: float, df: float) -> float:
    """One-sided p-value of H0: effect <= 0 against effect > 0 from a t statistic estimate / se with ``df``
    degrees of freedom; NaN when undefined (no standard error, df < 1)."""
    if not (math.isfinite(estimate) and math.isfinite(se)) or df < 1 or se < 0:
        return float("nan")
    if se == 0:
        return 0.0 if estimate > 0 else 1.0
    return float(st.t.sf(estimate / se, df))


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> list[tuple[bool, float]]:
    """Holm's (1979, Scand. J. Stat. 6:65) step-down test of m hypotheses at family-wise level ``alpha``.

    Order the p-values p_(1) <= ... <= p_(m); reject H_(k) when p_(j) <= alpha / (m - j + 1) for every
    j <= k. A NaN p-value (a hypothesis that cannot be tested yet) counts in m and is never rejected.
    Returns per hypothesis, in the given order, (rejected, the level alpha / (m - k + 1) of its rank k).
    Decreasing any p-value never undoes a rejection (the procedure is monotone)."""
    m = len(p_values)
    key = [p if math.isfinite(p) else math.inf for p in p_values]
    order = sorted(range(m), key=lambda i: key[i])
    out: list[tuple[bool, float]] = [(False, math.nan)] * m
    going = True
    for k, i in enumerate(order):
        level = alpha / (m - k)
        going = going and key[i] <= level
        out[i] = (going, level)
    return out
