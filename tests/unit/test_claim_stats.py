"""The statistics of the claims report (testbed/util/stats.py) on hand-computed numbers and synthetic evidence.

t quantiles used by hand below (two-sided 90% = one-sided 0.95; standard tables):
t_{0.95,2} = 2.91999, t_{0.95,4} = 2.13185, t_{0.95,6} = 1.94318, t_{0.95,7} = 1.89458,
t_{0.80,6} = 0.90570, t_{0.80,7} = 0.89603.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from figures.records import RHO, Judgement, with_direction
from testbed.util import stats

T95 = {2: 2.91999, 4: 2.13185, 6: 1.94318, 7: 1.89458}
T80 = {6: 0.90570, 7: 0.89603}


def test_one_sample_t_interval_by_hand():
    # 1..5: mean 3, sd sqrt(2.5), se sqrt(0.5); half-width t_{0.95,4} * 0.70711 = 1.50745
    iv = stats.t_interval([1, 2, 3, 4, 5])
    assert iv.estimate == pytest.approx(3.0)
    assert iv.sd == pytest.approx(math.sqrt(2.5))
    assert iv.se == pytest.approx(math.sqrt(0.5))
    assert (iv.lo, iv.hi) == pytest.approx((3 - T95[4] * math.sqrt(0.5), 3 + T95[4] * math.sqrt(0.5)), abs=1e-4)
    assert (iv.lo, iv.hi) == pytest.approx((1.49255, 4.50745), abs=1e-4)
    assert iv.df == 4 and iv.level == pytest.approx(0.90)


def test_paired_difference_by_hand_and_pairing_by_seed():
    # d = b - a = (1, 2, 3): mean 2, sd 1, se 1/sqrt(3); half-width 2.91999 / sqrt(3) = 1.68586
    iv = stats.difference([1, 2, 3], [2, 4, 6])
    assert iv.paired and iv.n == 3
    assert (iv.estimate, iv.lo, iv.hi) == pytest.approx((2.0, 2 - 1.68586, 2 + 1.68586), abs=1e-4)
    # a seed missing on one side drops that pair only: (1, 3) -> mean 2, sd sqrt(2), t_{0.95,1} = 6.31375
    iv = stats.difference([1, 2, 3], [2, float("nan"), 6])
    assert iv.n == 2 and iv.estimate == pytest.approx(2.0)
    assert iv.hi - iv.estimate == pytest.approx(6.31375 * 1.0, abs=1e-4)
    # pairing removes a shared seed effect: same differences, very different seed levels -> same interval
    shifted = stats.difference([1, 102, 53], [2, 104, 56])
    assert (shifted.lo, shifted.hi) == pytest.approx((2 - 1.68586, 2 + 1.68586), abs=1e-4)


def test_welch_interval_by_hand():
    # a = (1, 2, 3): var 1 -> 1/3; b = (2, 4, 6, 8): var 20/3 -> 5/3; se = sqrt(2); Welch-Satterthwaite df =
    # 4 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 4 / 0.981481 = 4.07547
    iv = stats.welch_interval([1, 2, 3], [2, 4, 6, 8])
    assert not iv.paired
    assert iv.estimate == pytest.approx(3.0)
    assert iv.se == pytest.approx(math.sqrt(2.0))
    assert iv.df == pytest.approx(4.07547, abs=1e-4)
    half = iv.hi - iv.estimate
    # t_{0.95, 4.075} lies between t_{0.95,5} = 2.01505 and t_{0.95,4} = 2.13185
    assert 2.01505 * math.sqrt(2) < half < 2.13185 * math.sqrt(2)
    # unequal lengths are never paired
    assert not stats.difference([1, 2, 3], [2, 4, 6, 8]).paired


def test_log_scale_compares_ratios_with_a_floor():
    a = np.array([0.10, 0.20, 0.05])
    iv = stats.difference(a, 2 * a, scale="log", floor=1e-3)
    assert iv.estimate == pytest.approx(math.log(2)) and iv.sd == pytest.approx(0.0, abs=1e-12)
    # an error of 0 is floored, not -inf
    iv = stats.difference([0.0, 0.0], [0.01, 0.01], scale="log", floor=0.0005)
    assert iv.estimate == pytest.approx(math.log(0.01 / 0.0005))
    with pytest.raises(ValueError, match="floor"):
        stats.transform([0.1], "log")


def test_seeds_needed_by_hand():
    # sd 1, margin 1: n = 7 gives (1.94318 + 0.90570)^2 = 8.116 > 7; n = 8 gives (1.89458 + 0.89603)^2 = 7.787 <= 8
    assert ((T95[6] + T80[6]) ** 2, (T95[7] + T80[7]) ** 2) == pytest.approx((8.116, 7.787), abs=1e-3)
    assert stats.seeds_needed(1.0, 1.0) == 8
    # the requirement scales like (sd / margin)^2: ten times the margin needs the minimum
    assert stats.seeds_needed(1.0, 10.0) == 2
    assert 600 < stats.seeds_needed(1.0, 0.1) < 640  # ~ (1.645 + 0.842)^2 * 100 = 618.5, plus t's excess
    assert stats.seeds_needed(float("nan"), 1.0) is None and stats.seeds_needed(1.0, 0.0) is None


def test_a_large_noisy_gap_never_matches():
    # the audit's case: gac at D = 10 (26% +- 16) against pg at sync (12%): a wide interval reaching past the
    # tolerance is never "matches", whatever the draw
    rng = np.random.default_rng(0)
    for _ in range(200):
        sync = 0.12 + 0.01 * rng.standard_normal(3)
        stale = 0.26 + 0.16 * rng.standard_normal(3)
        assert stats.equivalence("gac vs sync", sync, stale, 0.02).status != "holds"
        assert stats.equivalence("gac vs sync", sync, np.clip(stale, 1e-3, 1), math.log1p(RHO), "log",
                                 5e-4).status != "holds"


def test_a_tight_small_gap_matches():
    a = np.array([0.100, 0.104, 0.097, 0.102, 0.099])
    b = a + np.array([0.002, 0.0015, 0.0025, 0.002, 0.0018])
    o = stats.equivalence("x vs sync", a, b, 0.01)
    assert o.status == "holds" and o.seeds_needed is None
    assert -0.01 < o.interval.lo < o.interval.hi < 0.01
    # and on the ratio scale within the papers' resolution (factor 1.167)
    assert stats.equivalence("x vs sync", a, b, math.log1p(RHO), "log", 5e-4).status == "holds"


def test_a_wide_interval_is_inconclusive_with_seeds_needed():
    a = np.array([0.10, 0.12, 0.08])
    b = np.array([0.10, 0.20, 0.03])  # d = (0, 0.08, -0.05): mean 0.01, sd 0.0656
    o = stats.equivalence("x vs y", a, b, 0.05)
    assert o.status == "undecided"
    d = b - a
    assert o.seeds_needed == stats.seeds_needed(float(d.std(ddof=1)), 0.05 - abs(float(d.mean())))
    assert o.seeds_needed > 3
    assert stats.combine([o]) == "inconclusive"


def test_tight_large_gap_is_not_equivalent_and_superiority_statuses():
    a = np.array([0.10, 0.11, 0.09, 0.10])
    assert stats.equivalence("far", a, a + 0.2, 0.02).status == "fails"
    # candidate below reference by 0.05, tightly: beats delta = 0.02 (holds), falls short of delta = 0.2 but the
    # sign is established (direction), and a candidate above the reference fails
    cand = a - np.array([0.050, 0.051, 0.049, 0.050])
    assert stats.superiority("x", a, cand, 0.02).status == "holds"
    assert stats.superiority("x", a, cand, 0.2).status == "direction"
    assert stats.superiority("x", a, a + 0.05, 0.02).status == "fails"
    # higher-is-better quantities
    assert stats.superiority("longer", [5, 5, 6], [13, 12, 13], 4.0, higher=True).status == "holds"
    # one seed: no spread, never decided, no seeds-needed number
    one = stats.superiority("x", [0.5], [0.1], 0.02)
    assert one.status == "undecided" and one.seeds_needed is None


def test_thresholds_and_preconditions():
    assert stats.at_least("fails", [0.80, 0.85, 0.88], 0.5).status == "holds"
    assert stats.at_least("fails", [0.10, 0.11, 0.12], 0.5).status == "fails"
    assert stats.at_most("small", [0.10, 0.11, 0.12], 0.5).status == "holds"
    assert stats.within("near 0", [0.01, -0.02, 0.03, 0.0], 0.0, 0.2).status == "holds"
    # the regime's "degrades": significant and >= 2 points on average
    sync = np.array([0.08, 0.09, 0.085, 0.082, 0.088])
    assert stats.precondition("deg", sync, sync + np.array([0.05, 0.051, 0.049, 0.05, 0.052]), 0.02).status == "holds"
    assert stats.precondition("deg", sync, sync + 0.001, 0.02).status == "n/a"
    noisy = stats.precondition("deg", sync, sync + np.array([0.1, -0.05, 0.08, -0.04, 0.03]), 0.02)
    assert noisy.status == "undecided" and noisy.seeds_needed is not None


def test_proportion_against_a_majority_and_a_base_rate():
    # 9 of 10 collapses preceded, 1 of 10 quiet ends: exact 90% interval (0.606, 0.995) above 1/2; Fisher p < 0.05
    lo, hi = stats.clopper_pearson(9, 10)
    assert (lo, hi) == pytest.approx((0.6058, 0.9949), abs=1e-3)
    assert stats.proportion("ess", 9, 10, 0.5, 1, 10).status == "holds"
    assert stats.proportion("ess", 0, 10, 0.5, 5, 10).status == "fails"
    assert stats.proportion("ess", 1, 2, 0.5, 0, 10).status == "undecided"
    assert stats.events_needed(0.9, 0.5) == math.ceil((1.6449 + 0.8416) ** 2 * 0.09 / 0.16)


def test_proportions_and_rates_carry_the_level_they_were_computed_at():
    """Under `using_level` (a later look of a staged claim, a second look at the real model) the exact interval
    is the wider one, and the interval says so: its ``level`` is the one it was computed at."""
    with stats.using_level(0.95):
        p, r = stats.proportion("ess", 6, 6, 0.5), stats.rate("lost", [True, False, False, False])
    assert p.interval.level == r.interval.level == 0.95
    assert p.interval.lo == pytest.approx(0.025 ** (1 / 6)) and stats.fmt_interval(p) == "100% of 6 [54%, 100%] (exact, 95.00% interval)"
    assert stats.proportion("ess", 6, 6, 0.5).interval.level == stats.LEVEL


def test_combine_and_direction_only_is_never_partly():
    def o(status):
        return stats.Outcome("p", "superiority", status, 0.0, "diff")

    assert stats.combine([o("holds"), o("holds")]) == "reproduced"
    assert stats.combine([o("holds"), o("direction")]) == "direction only"
    assert stats.combine([o("direction"), o("undecided")]) == "inconclusive"
    assert stats.combine([o("undecided"), o("fails")]) == "not reproduced"
    assert stats.combine([o("n/a"), o("n/a")]) == "not applicable"
    assert stats.combine([o("n/a"), o("holds")]) == "reproduced"
    assert "partly" not in stats.VERDICTS
    with pytest.raises(ValueError):
        o("partly")
    # a failed "matches" softened by a rescue over the stale base is "direction", never "partly"
    match = stats.Outcome("m", "equivalence", "fails", 0.15, "log")
    rescue = stats.Outcome("r", "superiority", "holds", 0.15, "log")
    assert with_direction(match, rescue).status == "direction"
    assert with_direction(stats.Outcome("m", "equivalence", "fails", 0.15, "log"),
                          stats.Outcome("r", "superiority", "undecided", 0.15, "log")).status == "fails"
    assert Judgement("x", [with_direction(match, rescue)]).verdict == "direction only"


def test_the_papers_resolution_by_hand():
    # 1.645 * sqrt(2) * sqrt(0.72 * 0.28 / 500) / 0.28 = 0.04671 / 0.28
    assert pytest.approx(0.1668, abs=1e-4) == RHO


# -- the pre-declared robust estimator and bimodal outcomes ------------------------------------------------


def test_trimmed_interval_by_hand():
    # 1, 2, 3, 4, 10: g = floor(0.2 * 5) = 1, h = 3; trimmed mean (2 + 3 + 4) / 3 = 3; winsorized 2, 2, 3, 4, 4:
    # mean 3, sum of squares 4, s_w^2 = 1; se = sqrt((n - 1) s_w^2 / (h (h - 1))) = sqrt(4 / 6); half-width
    # t_{0.95,2} se = 2.91999 x 0.816497 = 2.38416
    iv = stats.trimmed_interval([1, 2, 3, 4, 10], level=0.90)
    assert iv.estimator == "trimmed" and iv.df == 2
    assert iv.estimate == pytest.approx(3.0)
    assert iv.se == pytest.approx(math.sqrt(4 / 6))
    assert (iv.lo, iv.hi) == pytest.approx((3 - 2.38416, 3 + 2.38416), abs=1e-4)
    # below 5 values nothing is trimmed: exactly the Student-t interval
    t, tr = stats.t_interval([1, 2, 4], 0.9), stats.trimmed_interval([1, 2, 4], 0.9)
    assert (tr.estimate, tr.lo, tr.hi) == pytest.approx((t.estimate, t.lo, t.hi))
    # Hodges-Lehmann: median of the 15 Walsh averages of 1, 2, 3, 4, 10 = 3.0
    assert stats.hodges_lehmann([1, 2, 3, 4, 10]) == pytest.approx(3.0)


def test_using_level_sets_the_interval_every_decision_reads():
    with stats.using_level(0.98):
        iv = stats.difference([1, 2, 3], [2, 4, 6])
        assert iv.level == pytest.approx(0.98)
        assert stats.current_level() == pytest.approx(0.98)
    assert stats.current_level() == pytest.approx(stats.LEVEL)
    # 98%: t_{0.99,2} = 6.96456 -> half-width 6.96456 / sqrt(3) = 4.02099
    assert iv.hi - iv.estimate == pytest.approx(4.02099, abs=1e-4)
    with pytest.raises(ValueError, match="level"), stats.using_level(1.0):
        pass


LOG_TOL = math.log1p(RHO)


def _errors(rng: np.random.Generator, n: int, ratio: float, sd: float = 0.02) -> tuple[np.ndarray, np.ndarray]:
    base = 0.08 * np.exp(rng.normal(0.0, 0.1, n))
    return base, base * ratio * np.exp(rng.normal(0.0, sd, n))


@pytest.mark.parametrize("ratio, expected", [(1.0, "holds"), (1.6, "fails")])
def test_one_lost_class_seed_cannot_swing_a_verdict_silently(ratio, expected):
    """Five seeds: four behave, one lost a class (its error jumps to 0.2-0.9). Wherever that seed sits and however
    far it lands, the trimmed verdict is the one the four well-behaved seeds give, and the cell's rate says 1 of 5
    lost a class; where the plain mean would have said something else, the part's detail says so."""
    rng = np.random.default_rng(3)
    a, b = _errors(rng, 5, ratio)
    clean = stats.equivalence("m", a, b, LOG_TOL, "log", 1e-4)
    assert clean.status == expected
    swung_by_mean = 0
    for pos in range(5):
        for bad in (0.2, 0.4, 0.9):
            bb = b.copy()
            bb[pos] = bad
            o = stats.equivalence("m", a, bb, LOG_TOL, "log", 1e-4)
            assert o.status == expected, (pos, bad, o.interval)
            if o.extra["mean_status"] != o.status:
                swung_by_mean += 1
                assert "plain mean would say" in o.detail
    assert swung_by_mean > 0  # the mean-based interval would have been swung by the same seed
    r = stats.rate("cell: lost a class", [False, False, True, False, False])
    assert (r.extra["k"], r.extra["n"], r.status) == (1, 5, "n/a")
    # exact Clopper-Pearson 90% interval of 1 in 5: [0.01021, 0.65741]
    assert (r.interval.lo, r.interval.hi) == pytest.approx((0.010206, 0.657408), abs=1e-5)
    assert "1 of 5 seeds" in stats.fmt_interval(r)


def test_two_lost_class_seeds_may_change_the_verdict_and_the_rate_says_so():
    rng = np.random.default_rng(4)
    a, b = _errors(rng, 5, 1.0)
    b[[1, 3]] = 0.9
    o = stats.equivalence("m", a, b, LOG_TOL, "log", 1e-4)
    assert o.status != "holds"  # beyond the 20% breakdown: the verdict moves ...
    r = stats.rate("cell", [False, True, False, True, False])
    assert r.extra["k"] == 2 and r.interval.lo > 0.07  # ... and the rate shows two seeds in five


def test_one_seed_formats_without_a_spread():
    assert stats.fmt([0.25]) == "0.25 (n=1, no spread)"
    one = stats.summary([0.25, float("nan")])
    assert one["n"] == 1 and one["mean"] == 0.25 and math.isnan(one["std"]) and math.isnan(one["se"])  # undefined, not 0
    o = stats.Outcome("x", "at_least", "undecided", 0.1, "diff", stats.t_interval([0.3]))
    assert "no spread" in stats.fmt_interval(o)
