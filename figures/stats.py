"""Statistics of the claims report: intervals over seeds and the decisions built on them.

Pure functions of per-seed numbers; every verdict of figures/claims.py is made here. The rules:

* **Data.** One value per seed and setting (a final error, a mean cosine, a longest solved length).
  Two settings run with the same seed share the initialisation and the context stream
  (testbed/runner.py), so a comparison is made seed by seed: d_i = f(b_i) - f(a_i) over the seeds
  where both values are finite (``paired``). Where fewer than two seeds pair up, Welch's unpaired
  interval is used (`welch_interval`).
* **Interval.** The two-sided 90% Student-t interval of the mean, d_bar +- t_{0.95, n-1} s / sqrt(n)
  (s the standard deviation with ddof 1, n the number of values; `t_interval`). Every decision
  below reads this one interval, so every test is one-sided at ALPHA = 0.05.
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

Statuses of one part (`Outcome.status`): ``holds``, ``direction``, ``fails``, ``undecided``,
``n/a`` (the part does not apply, e.g. a base that does not degrade).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import stats as st

ALPHA = 0.05  # one-sided level of every test
BETA = 0.20  # 1 - power, for the seeds-needed planning number
LEVEL = 1.0 - 2.0 * ALPHA  # the two-sided interval every decision reads: 90%
MAX_SEEDS = 100_000  # "seeds needed" beyond this is reported as more than MAX_SEEDS

STATUSES = ("holds", "direction", "fails", "undecided", "n/a")
VERDICTS = ("reproduced", "direction only", "not reproduced", "inconclusive", "not applicable")


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


def t_interval(values: Any, level: float = LEVEL) -> Interval:
    """Mean of the finite ``values`` +- t_{(1+level)/2, n-1} sd / sqrt(n). One value: an undefined
    (infinite) interval; no value: NaN."""
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


def welch_interval(a: Any, b: Any, level: float = LEVEL) -> Interval:
    """mean(b) - mean(a) with Welch's interval (Welch-Satterthwaite degrees of freedom)."""
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


def difference(a: Any, b: Any, scale: str = "diff", floor: float | None = None, level: float = LEVEL) -> Interval:
    """b - a on ``scale``: paired by position (= by seed) over the positions where both are finite, when at
    least two pair up; else Welch's unpaired interval. ``a`` and ``b`` are aligned per seed."""
    ta, tb = transform(a, scale, floor), transform(b, scale, floor)
    if ta.shape == tb.shape:
        ok = np.isfinite(ta) & np.isfinite(tb)
        if ok.sum() >= 2:
            return t_interval(tb[ok] - ta[ok], level)
    return welch_interval(ta, tb, level)


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


def superiority(name: str, reference: Any, candidate: Any, delta: float, scale: str = "diff",
                floor: float | None = None, higher: bool = False, detail: str = "") -> Outcome:
    """``candidate`` beats ``reference`` by more than ``delta``. The effect is reference - candidate when
    lower is better (error rates, the default) and candidate - reference with ``higher=True``."""
    iv = difference(candidate, reference, scale, floor) if not higher else difference(reference, candidate, scale, floor)
    status, need = decide_superiority(iv, delta)
    return Outcome(name, "superiority", status, delta, scale, iv, need, detail)


def equivalence(name: str, a: Any, b: Any, tol: float, scale: str = "diff", floor: float | None = None,
                detail: str = "") -> Outcome:
    """``b`` matches ``a`` within ``tol`` (on ``scale``)."""
    iv = difference(a, b, scale, floor)
    status, need = decide_equivalence(iv, tol)
    return Outcome(name, "equivalence", status, tol, scale, iv, need, detail)


def at_least(name: str, values: Any, threshold: float, detail: str = "") -> Outcome:
    """The mean of ``values`` exceeds ``threshold`` (one-sample interval; "direction" is not defined)."""
    iv = t_interval(values)
    status, need = decide_superiority(_shift(iv, -threshold), 0.0)
    return Outcome(name, "at_least", status, threshold, "diff", iv, need, detail)


def at_most(name: str, values: Any, threshold: float, detail: str = "") -> Outcome:
    """The mean of ``values`` is below ``threshold``."""
    iv = t_interval(values)
    status, need = decide_superiority(_shift(_negate(iv), threshold), 0.0)
    return Outcome(name, "at_most", status, threshold, "diff", iv, need, detail)


def within(name: str, values: Any, centre: float, tol: float, detail: str = "") -> Outcome:
    """The mean of ``values`` lies within ``centre`` +- ``tol`` (one-sample TOST)."""
    iv = t_interval(values)
    status, need = decide_equivalence(_shift(iv, -centre), tol)
    return Outcome(name, "equivalence", status, tol, "diff", iv, need, detail)


def _shift(iv: Interval, by: float) -> Interval:
    return Interval(iv.estimate + by, iv.lo + by, iv.hi + by, iv.n, iv.sd, iv.se, iv.df, iv.paired, iv.level)


def _negate(iv: Interval) -> Interval:
    return Interval(-iv.estimate, -iv.hi, -iv.lo, iv.n, iv.sd, iv.se, iv.df, iv.paired, iv.level)


def exact(name: str, holds: bool, value: float = float("nan"), margin: float = float("nan"), detail: str = "") -> Outcome:
    """A part decided by an exact computation (no sampling noise): holds or fails."""
    iv = Interval(value, value, value, 0, 0.0, 0.0, 0.0)
    return Outcome(name, "exact", "holds" if holds else "fails", margin, "diff", iv, None, detail)


def precondition(name: str, base: Any, stale: Any, min_effect: float, detail: str = "", unit: str = "%") -> Outcome:
    """Does ``stale`` exceed ``base`` (paired) significantly *and* by at least ``min_effect`` on average?

    holds: lo > 0 and estimate >= min_effect; n/a: hi < min_effect (it does not, by that much);
    otherwise undecided (seeds needed to settle min_effect). The regime search's definition of "degrades"."""
    iv = difference(base, stale)
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


def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Exact binomial interval of k successes in n trials."""
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
    iv = Interval(p, lo, hi, n, float("nan"), float("nan"), 0.0)
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


# -- formatting ----------------------------------------------------------------------------------------


def summary(values: Any) -> dict[str, float]:
    """mean, std (ddof 1), standard error and n of the finite values."""
    v = _finite(values)
    n = int(v.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "se": float("nan"), "n": 0}
    std = float(v.std(ddof=1)) if n > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "se": std / math.sqrt(n), "n": n}


def fmt(values: Any, digits: int = 3, pct: bool = False) -> str:
    """'mean +- std (n=k)' of per-seed values (percent if ``pct``)."""
    s = summary(values)
    if s["n"] == 0:
        return "n/a"
    k = 100.0 if pct else 1.0
    unit = "%" if pct else ""
    if s["n"] == 1:
        return f"{s['mean'] * k:.{digits}g}{unit} (1 seed)"
    return f"{s['mean'] * k:.{digits}g}{unit} +- {s['std'] * k:.2g} (n={s['n']})"


def fmt_interval(o: Outcome) -> str:
    """The part's estimate and 90% interval in the units of its scale (ratios for ``log``)."""
    iv = o.interval
    if iv is None or not math.isfinite(iv.estimate):
        return "no data"
    if o.kind == "exact":
        return f"{iv.estimate:.4g} (exact)"
    if o.kind == "proportion":
        return f"{iv.estimate:.0%} of {iv.n} [{iv.lo:.0%}, {iv.hi:.0%}]"
    if o.scale == "log":
        def r(x: float) -> str:
            return f"{math.exp(x):.3g}x" if math.isfinite(x) else ("inf" if x > 0 else "0")
        return f"ratio {r(iv.estimate)} [{r(iv.lo)}, {r(iv.hi)}] (n={iv.n})"
    k, unit = (100.0, " pts") if o.unit == "%" else (1.0, "")

    def v(x: float) -> str:
        return f"{x * k:+.3g}" if math.isfinite(x) else ("+inf" if x > 0 else "-inf")
    return f"{v(iv.estimate)}{unit} [{v(iv.lo)}, {v(iv.hi)}] (n={iv.n}{'' if iv.paired else ', unpaired'})"


def fmt_margin(o: Outcome) -> str:
    """The part's margin as the rule reads it: a factor (log scale), points, or a plain value."""
    if not isinstance(o.margin, int | float) or not math.isfinite(o.margin):
        return ""
    if o.scale == "log":
        return f"factor {math.exp(o.margin):.3g}"
    if o.unit == "%":
        return f"{o.margin * 100:.3g} pts"
    return f"{o.margin:.3g}"
