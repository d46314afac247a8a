"""A run's endpoint (testbed/util/endpoints.py): each rule on closed forms, with its window's edges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.util import endpoints as ep


def test_last_mean_reads_the_last_k_logged_values():
    assert ep.last_mean([0.1, np.nan, 0.5, 0.7, np.nan], 2) == pytest.approx(0.6)  # NaN = not logged
    assert ep.last_mean([0.4], 2) == 0.4  # fewer than k: all of them
    assert math.isnan(ep.last_mean([], 2)) and math.isnan(ep.last_mean([np.nan], 1))
    # a pilot's evaluations start at the untrained model: k = 2 of at least 3
    assert math.isnan(ep.last_mean([0.3, 0.5], 2, min_count=3))
    assert ep.last_mean([0.3, 0.5, 0.9], 2, min_count=3) == pytest.approx(0.7)
    with pytest.raises(ValueError, match="k must be >= 1"):
        ep.last_mean([1.0], 0)


@pytest.mark.parametrize("n, k", [(10, 1), (19, 1), (30, 2), (50, 2), (70, 4), (100, 5), (1, 1)])
def test_tail_mean_window_rounds_half_to_even(n, k):
    """k = max(1, round(0.05 n)) with Python's round: 0.05 * 30 = 1.5 -> 2, 0.05 * 50 = 2.5 -> 2, 0.05 * 70 = 3.5
    -> 4 (banker's rounding); values 0..n-1, so the mean of the last k is n - (k + 1) / 2."""
    assert ep.tail_mean(np.arange(n, dtype=float), 0.05) == pytest.approx(n - (k + 1) / 2)


@pytest.mark.parametrize("n, k", [(9, 5), (10, 5), (11, 5), (1, 1), (2, 1)])
def test_from_mean_reads_from_a_fraction_of_the_run(n, k):
    """k = max(1, n - round(0.5 n)): n = 9 -> round(4.5) = 4 -> the last 5; n = 11 -> round(5.5) = 6 -> 5."""
    assert ep.from_mean(np.arange(n, dtype=float), 0.5) == pytest.approx(n - (k + 1) / 2)
    assert math.isnan(ep.from_mean([np.nan, np.nan], 0.5))


def test_second_half_mean_is_the_last_n_over_2_rows_nan_aware():
    # n = 5 rows: the last 2 (the middle update stays in the first half); NaN left out
    assert ep.second_half_mean([9.0, 9.0, 9.0, np.nan, 0.4]) == pytest.approx(0.4)
    assert ep.second_half_mean([9.0, 9.0, 0.2, 0.4]) == pytest.approx(0.3)
    assert math.isnan(ep.second_half_mean([1.0, np.nan]))
    assert math.isnan(ep.second_half_mean([]))


def test_numpy_means_are_the_bits_of_python_ones_at_two_values():
    """The LLM study's score (the mean of its last 1 or 2 evaluations) was a Python sum / len: numpy's mean gives
    the same float for every window of at most two values."""
    rng = np.random.default_rng(0)
    for _ in range(1000):
        a, b = rng.random(2)
        assert ep.last_mean([a, b], 2) == (a + b) / 2 and ep.last_mean([b], 1) == b


def test_learning_window_closed_form_and_base_only():
    v = np.arange(0, 201, 10.0)
    base = 0.8 * np.exp(-v / 40.0) + 0.1  # drop 0.8 (1 - e^-5); p(v) = (1 - e^{-v/40}) / (1 - e^-5)
    lo, hi = ep.learning_window(v, np.vstack([base, base]), 0.25, 0.75)
    d = 1 - math.exp(-5)
    # first grid versions with p >= 0.25 / 0.75: v >= -40 ln(1 - 0.25 d) = 11.42 -> 20; -40 ln(1 - 0.75 d) = 54.65 -> 60
    assert (lo, hi) == (20.0, 60.0)
    assert -40 * math.log(1 - 0.25 * d) == pytest.approx(11.42, abs=0.01)
    assert -40 * math.log(1 - 0.75 * d) == pytest.approx(54.65, abs=0.01)
    # a method's curves never enter: the function takes the base only; a base that does not learn -> no window
    assert all(map(math.isnan, ep.learning_window(v, np.full_like(v, 0.5), 0.25, 0.75)))
    assert all(map(math.isnan, ep.learning_window([], np.zeros((2, 0)), 0.25, 0.75)))  # nothing logged
    late = np.vstack([base, base])
    late[:, 0] = np.nan  # version 0 not logged: the drop runs from the first logged version
    assert ep.learning_window(v, late, 0.25, 0.75)[0] >= 20.0


def test_window_mean_is_the_trapezoid_area_over_the_width():
    v = np.array([0, 10, 20, 30.0])
    y = np.array([0.9, 0.5, 0.3, 0.2])
    # [10, 30]: (0.5 + 0.3) / 2 * 10 + (0.3 + 0.2) / 2 * 10 = 6.5; / 20 = 0.325
    assert ep.window_mean(v, y, (10, 30)) == pytest.approx(0.325)
    assert ep.window_mean(v, y, (20, 20)) == pytest.approx(0.3)
    assert math.isnan(ep.window_mean(v, y, (5, 30)))  # not on the logged versions
    per_seed = ep.endpoint_per_seed(v, np.vstack([y, y + 0.1]), (10, 30))
    assert per_seed == pytest.approx([0.325, 0.425])


def test_steps_mean_is_a_plain_mean_over_the_steps_in_the_window():
    # steps 1, 1, 2 in [1, 3] (step 3's value not logged): (0 + 1 + 2) / 3, not a trapezoid
    assert ep.steps_mean([1, 1, 2, 3, 4], [0.0, 1.0, 2.0, np.nan, 9.0], (1, 3)) == pytest.approx(1.0)
    assert math.isnan(ep.steps_mean([1, 2], [1.0, 2.0], (float("nan"), 2)))
    assert math.isnan(ep.steps_mean([1, 2], [1.0, 2.0], (5, 6)))
