"""Plain summaries, noise floors and levels of testbed/util/stats.py, on closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from testbed.util import stats


def test_mean_se_propagates_a_diverged_seed():
    m, se, n = stats.mean_se([0.2, 0.4, 0.9])
    assert (m, n) == (pytest.approx(0.5), 3)
    assert se == pytest.approx(math.sqrt(((0.3**2 + 0.1**2 + 0.4**2) / 2) / 3))
    assert all(math.isnan(x) for x in stats.mean_se([0.5, math.nan])[:2])
    assert stats.mean_se([0.7])[0] == 0.7 and math.isnan(stats.mean_se([0.7])[1])
    assert stats.mean_se([])[2] == 0


def test_mean_se_finite_drops_unrun_seeds_and_draws_no_bar_below_two():
    assert stats.mean_se_finite([0.3, math.nan]) == (0.3, 0.0)
    mean, se = stats.mean_se_finite([[0.1, 0.2], [0.3, math.nan]])  # per column
    assert mean.tolist() == pytest.approx([0.2, 0.2]) and se.tolist() == pytest.approx([0.1, 0.0])


def test_pooled_sd_is_the_within_group_spread():
    # groups {1, 3} and {2, 4, 6}: ss = 2 + 8 = 10 on df = 1 + 2 = 3; a group of one value or NaNs adds nothing
    sd, df = stats.pooled_sd([[1.0, 3.0], [2.0, 4.0, 6.0], [5.0], [math.nan, 7.0]])
    assert (sd, df) == (pytest.approx(math.sqrt(10 / 3)), 3)
    assert math.isnan(stats.pooled_sd([[1.0]])[0])


def test_binomial_diff_sd_is_bit_for_bit_the_paired_floor():
    """sqrt((p1 q1 + p2 q2) / E / n); at p1 = p2 = p and n = 1 it is the same float as sqrt(2 p (1 - p) / E)
    (doubling is exact), the form the pocket LM's planning and the testbed's resolution margin wrote."""
    for p in np.random.default_rng(1).random(500):
        assert stats.binomial_diff_sd(p, p, 512) == math.sqrt(2 * p * (1 - p) / 512)
    assert stats.binomial_diff_sd(0.5, 0.5, 100, 4) == pytest.approx(math.sqrt(0.5 / 100 / 4))
    assert math.isnan(stats.binomial_diff_sd(math.nan, 0.5, 100))


def test_mcnemar_greater_exact_tail():
    # seeds: 4 only-a, 1 only-b, 5 neither: p = P(Bin(5, 1/2) >= 4) = 6 / 32
    a = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    b = [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]
    out = stats.mcnemar_greater(a, b)
    assert (out["caused"], out["reverse"], out["n"]) == (4, 1, 10)
    assert out["p"] == pytest.approx(6 / 32) and out["rate"] == 0.4
    assert (out["lo"], out["hi"]) == stats.clopper_pearson(4, 10)
    assert stats.mcnemar_greater([0, 0], [0, 0])["p"] == 1.0


def test_bonferroni_level_shares_the_two_tails():
    assert stats.bonferroni_level(1) == stats.LEVEL
    assert stats.bonferroni_level(2) == pytest.approx(1 - stats.ALPHA)
