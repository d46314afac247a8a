"""Fieller's paired ratio interval, the one-sided t p-value and Holm's step-down (testbed/util/stats.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as st

from testbed.util import stats


def test_fieller_interval_is_the_set_of_ratios_the_paired_t_test_does_not_reject():
    rng = np.random.default_rng(0)
    y = 0.2 + 0.05 * rng.standard_normal(12)
    x = 0.6 * y + 0.03 * rng.standard_normal(12)
    iv = stats.ratio_interval(x, y, level=0.9)
    assert iv.estimate == pytest.approx(x.mean() / y.mean())
    for theta, inside in ((iv.lo - 1e-6, False), (iv.lo + 1e-6, True), (iv.hi - 1e-6, True), (iv.hi + 1e-6, False)):
        d = stats.t_interval(x - theta * y, level=0.9)
        assert (d.lo <= 0 <= d.hi) == inside  # the ends are exactly where the t interval of x - theta y reaches 0


def test_fieller_interval_is_unbounded_when_the_denominator_is_not_established():
    x, y = [0.1, 0.0, 0.2, -0.1], [0.05, -0.04, 0.06, -0.05]  # mean(y) 0.005, far inside its own interval
    iv = stats.ratio_interval(x, y)
    assert (iv.lo, iv.hi) == (-math.inf, math.inf) and iv.estimate == pytest.approx(0.05 / 0.005)
    one = stats.ratio_interval([1.0], [1.0])  # one pair: no spread, no interval
    assert one.n == 1 and (one.lo, one.hi) == (-math.inf, math.inf)


def test_p_greater_is_the_t_distributions_tail():
    assert stats.p_greater(2.0, 1.0, 4) == pytest.approx(st.t.sf(2.0, 4))
    assert stats.p_greater(0.1, 0.0, 3) == 0.0 and stats.p_greater(-0.1, 0.0, 3) == 1.0
    assert math.isnan(stats.p_greater(1.0, math.nan, 3)) and math.isnan(stats.p_greater(1.0, 1.0, 0))


def test_holm_steps_down_and_stops_at_the_first_acceptance():
    got = stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    # sorted: 0.005 <= 0.05/4, 0.01 <= 0.05/3, 0.03 > 0.05/2: stop; 0.04 not rejected either
    assert [r for r, _ in got] == [True, False, False, True]
    assert [lv for _, lv in got] == pytest.approx([0.05 / 3, 0.05, 0.05 / 2, 0.05 / 4])
    assert [r for r, _ in stats.holm([0.001, math.nan], 0.05)] == [True, False]  # NaN counts in m, never rejected
    assert stats.holm([0.03, math.nan], 0.05)[0][0] is False  # 0.03 > 0.05 / 2
