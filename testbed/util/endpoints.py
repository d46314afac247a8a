"""A run's endpoint: the one number a claim, a scorecard or a study reads from a run's logged values.

Every reader of "a run's final value" in the project takes it from here, by one of these rules (each a pure
function of the values a run logged, in logging order; NaN marks a value not logged):

* `last_mean`: the mean of the last k logged values (the LLM study: its last ``last_evals`` greedy
  evaluations; the validation scorecard: the last two);
* `tail_mean`: the mean over the last ``fraction`` of the logged values (the figures' final error: the last 5%);
* `from_mean`: the mean over the logged values from ``start`` of the run on (the figures' GAC fractions: the
  second half);
* `second_half_mean`: the NaN-aware mean over the second half of a run's updates (`second_half`), one row per
  update (the LLM runs' late gradient cosines, the window the testbed's GAC-1 reads);
* the learning phase (`learning_window`, `window_mean`, `endpoint_per_seed`): the window of versions in which
  a base makes a stated share of its error drop, read from the base's curves alone, and the mean error over it
  (the area under the learning curve divided by the window's width); `steps_mean`: the mean over the optimizer
  steps inside such a window.

A run that diverged has no endpoint of its own: each reader states what stands in for it (chance error, a
failed sequence, NaN), beside the rule it reads. Means are numpy's (`numpy.mean`), the same bits wherever a
rule is read.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


def logged(values: Any) -> np.ndarray:
    """The values a run logged, in order: ``values`` as float64 with its NaNs (not logged) left out."""
    v = np.asarray(values, dtype=float).ravel()
    return v[~np.isnan(v)]


def last_mean(values: Any, k: int, min_count: int = 1) -> float:
    """mean(y[n - k:]) over the n logged values y (all of them when n < k); NaN when n < ``min_count``.

    ``min_count`` > k asks for values before the window too: a pocket pilot's evaluations begin at version 0,
    the untrained model, so its score needs k evaluations after it (``min_count`` = k + 1)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    v = logged(values)
    if len(v) < max(1, min_count):
        return math.nan
    return float(v[-k:].mean())


def tail_mean(values: Any, fraction: float) -> float:
    """`last_mean` over k = max(1, round(``fraction`` * n)) of the n logged values; NaN when none.

    ``round`` is Python's (half to even), so at n = 50 and ``fraction`` 0.05 the window is 2 values."""
    n = len(logged(values))
    return last_mean(values, max(1, round(fraction * n))) if n else math.nan


def from_mean(values: Any, start: float) -> float:
    """`last_mean` over the logged values from fraction ``start`` of them on: k = max(1, n - round(``start`` *
    n)) of the n logged values (half to even); NaN when none."""
    n = len(logged(values))
    return last_mean(values, max(1, n - round(start * n))) if n else math.nan


def second_half(n: int) -> int:
    """The first of the n updates 0..n-1 in the second half of a run: n - n // 2 (the last n // 2 updates; an odd n
    leaves the middle update in the first half)."""
    return n - n // 2


def second_half_mean(values: Any) -> float:
    """The NaN-aware mean of ``values``, one per update, over the second half of the updates (`second_half`);
    NaN when none of them is defined."""
    import pandas as pd

    v = pd.Series(np.asarray(values, dtype=float))
    late = v.iloc[second_half(len(v)):]
    return float(late.mean()) if late.notna().any() else math.nan


def learning_window(versions: Sequence[float], base_error: Any, lo: float, hi: float) -> tuple[float, float]:
    """(first, last) version of the learning phase, from the base's curves only.

    ``base_error``: [seeds, versions] test error of the base. With c(v) the mean over seeds, progress
    p(v) = (c(v_0) - c(v)) / (c(v_0) - c(v_end)) (v_0, v_end: the first and last versions the base logged); the
    window runs from the first version with p >= ``lo`` to the first with p >= ``hi``. (nan, nan) when the base
    does not learn (c(v_end) >= c(v_0)) or logged fewer than two versions."""
    v = np.asarray(versions, dtype=float)
    b = np.atleast_2d(np.asarray(base_error, dtype=float))
    if b.size == 0 or v.size == 0:
        return float("nan"), float("nan")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a version no seed logged: NaN, left out below
        c = np.nanmean(b, axis=0)
    if c.shape != v.shape:
        raise ValueError(f"base_error has {c.size} versions per seed, versions has {v.size}")
    ok = np.flatnonzero(np.isfinite(c))
    if ok.size < 2:
        return float("nan"), float("nan")
    first, last = c[ok[0]], c[ok[-1]]
    if not first - last > 0:
        return float("nan"), float("nan")
    with np.errstate(invalid="ignore"):
        p = np.where(np.isfinite(c), (first - c) / (first - last), -np.inf)
    return float(v[np.argmax(p >= lo)]), float(v[np.argmax(p >= hi)])


def window_mean(versions: Sequence[float], curve: Any, window: tuple[float, float]) -> float:
    """Mean of ``curve`` over [a, b] = ``window``: its trapezoid area there divided by b - a (the value at a
    when a = b); NaN when the window is not on the curve's versions."""
    v, y = np.asarray(versions, dtype=float), np.asarray(curve, dtype=float)
    a, b = window
    if not (math.isfinite(a) and math.isfinite(b)) or a not in v or b not in v or b < a:
        return float("nan")
    inside = (v >= a) & (v <= b)
    if a == b:
        return float(y[inside][0])
    x, f = v[inside], y[inside]
    return float(np.sum((f[1:] + f[:-1]) * np.diff(x)) / 2.0 / (b - a))


def endpoint_per_seed(versions: Sequence[float], errors: Any, window: tuple[float, float]) -> np.ndarray:
    """Per seed (rows of ``errors``), `window_mean` over ``window``: the learning-phase endpoint."""
    return np.array([window_mean(versions, row, window) for row in np.atleast_2d(np.asarray(errors, dtype=float))])


def steps_mean(steps: Any, values: Any, window: tuple[float, float]) -> float:
    """Mean of ``values`` over the optimizer steps whose batch version ``steps`` lies in [a, b] = ``window``, NaN
    values left out (a plain mean over steps, not a trapezoid); NaN when none or the window is undefined."""
    a, b = window
    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    if not (math.isfinite(a) and math.isfinite(b)):
        return float("nan")
    keep = (s >= a) & (s <= b) & np.isfinite(v)
    return float(v[keep].mean()) if keep.any() else float("nan")
