"""The confirmatory design's measurements (figures/confirm.py) on closed forms and synthetic runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from figures import confirm
from testbed.util import stats

# --- (b) the fingerprint like for like ---

TESTBED_V50 = [{"lag": 1, "ess_token": 0.990, "ess_seq": 0.990, "clip_frac": 0.034},
               {"lag": 2, "ess_token": 0.965, "ess_seq": 0.965, "clip_frac": 0.121},
               {"lag": 4, "ess_token": 0.923, "ess_seq": 0.923, "clip_frac": 0.193}]
SMOLLM2 = [{"lag": 1, "ess_token": 0.993, "ess_seq": 0.90, "clip_frac": 0.037},
           {"lag": 2, "ess_token": 0.977, "ess_seq": 0.75, "clip_frac": 0.128},
           {"lag": 4, "ess_token": 0.941, "ess_seq": 0.55, "clip_frac": 0.241}]


def test_fingerprint_token_vs_token_and_units_refused():
    g = confirm.fingerprint_gap(TESTBED_V50, SMOLLM2, (1, 2, 4), 0.03, 0.06)
    assert g["status"] == "met" and g["unit"] == "token"
    assert [r["ess_diff"] for r in g["rows"]] == pytest.approx([-0.003, -0.012, -0.018])
    assert [r["clip_diff"] for r in g["rows"]] == pytest.approx([-0.003, -0.007, -0.048])
    assert confirm.fingerprint_gap(TESTBED_V50, SMOLLM2, (1, 2, 4), 0.01, 0.06)["status"] == "failed"
    assert confirm.fingerprint_gap(TESTBED_V50, SMOLLM2, (1, 8), 0.03, 0.06)["status"] == "unknown"
    # single-action sequences against 19-token sequences: refused
    with pytest.raises(ValueError, match="equal sequence lengths"):
        confirm.fingerprint_gap(TESTBED_V50, SMOLLM2, (1,), 0.03, 0.06, unit="sequence", seq_len=(1, 19))


# --- (c) stability ---

SYNC = np.array([0.050, 0.052, 0.049, 0.051, 0.050, 0.048, 0.053, 0.050, 0.051, 0.049])


def test_collapse_and_high_error_flags():
    stale = SYNC + np.array([0.005, -0.002, 0.01, 0.0, 0.019, 0.0, 0.001, 0.056, 0.10, 0.289])
    c = confirm.collapsed(stale, SYNC, 2.0, 0.10)  # threshold max(2 x 0.050, 0.10) = 0.10
    assert c.tolist() == [False] * 7 + [True, True, True]
    assert confirm.high_error([0.375, 0.05, float("nan")], 0.25) == [True, False, None]


def test_stability_parts_plain_mean_sees_what_trimming_removes():
    # 15 seeds, three collapse (the async-GRPO pattern): 20% trimming drops 3 from each end
    ref = np.concatenate([SYNC, SYNC[:5]])
    cand = ref * np.array([1.02, 0.99, 1.03, 1.0, 1.01, 1.0, 1.0, 1.02, 0.98, 1.01, 1.0, 0.99, 2.2, 3.0, 6.8])
    mean, caused = confirm.stability_parts("x", ref, cand, ref, ref, "equivalence", math.log(1.167), 5e-4, 2.0, 0.1)
    trimmed = stats.equivalence("t", ref, cand, math.log(1.167), "log", 5e-4)
    assert trimmed.status == "holds"  # the trimmed mean discards the three collapses
    assert mean.status != "holds" and mean.interval.estimator == "mean"
    d = np.log(cand) - np.log(ref)
    assert mean.interval.estimate == pytest.approx(d.mean())
    assert caused.extra["candidate_collapses"] == 3
    # exact McNemar: 3 discordant pairs all one way, p = 0.5^3
    assert caused.extra["mcnemar_p"] == pytest.approx(0.125)
    lo, hi = stats.clopper_pearson(3, 15)
    assert (caused.interval.lo, caused.interval.hi) == pytest.approx((lo, hi))


def test_stability_superiority_holds_by_collapses():
    cand = SYNC.copy()
    cand[:6] = 0.5  # six staleness-caused collapses: p = 0.5^6 = 0.0156 < 0.05
    mean, caused = confirm.stability_parts("d", SYNC, cand, SYNC, SYNC, "superiority", 5.0, 5e-4, 2.0, 0.1)
    assert caused.extra["mcnemar_p"] == pytest.approx(0.5 ** 6)
    assert mean.status == "holds" and "collapses" in mean.detail


# --- (d) GAC's cosine where the noise does not cap it ---


def test_cosine_cap_and_accumulation():
    assert confirm.cosine_cap(200 / 6370) == pytest.approx(0.0304, abs=1e-4)
    assert confirm.cosine_cap(1.0) == 0.5
    assert confirm.accumulation(6370, 200, 1.0) == 32  # ceil(31.85)
    with pytest.raises(ValueError):
        confirm.accumulation(0, 200, 1.0)


def test_accumulated_cosines_follow_the_cap():
    rng = np.random.default_rng(0)
    p, m, b_noise = 4000, 1, 8.0  # per-sample noise: tr(Sigma) = B_noise |g|^2
    g = np.zeros(p)
    g[0] = 1.0
    noise = rng.standard_normal((4096, p)) * math.sqrt(b_noise / p)
    grads = g + noise / math.sqrt(m)  # each row: a 1-sample gradient, r = 1 / 8
    for k in (1, 8, 32):
        r = k * m / b_noise
        assert confirm.accumulated_cosines(grads, k).mean() == pytest.approx(confirm.cosine_cap(r), abs=0.03)
    assert confirm.accumulated_cosines(grads[:3], 2).size == 0


# --- (e) VCPO-1's spike rule: a stated reference, a calibrated factor ---


def _quiet(rng, n=1000):
    return np.exp(np.linspace(0, math.log(6), n)) * rng.lognormal(0, 0.15, n)  # drifts up 6-fold, no collapse


def test_local_spike_rule_false_alarms_and_detection():
    rng = np.random.default_rng(1)
    quiet = [_quiet(rng) for _ in range(40)]
    # the exploratory rule (twice the median of all earlier steps) fires at almost every quiet run end
    assert np.mean([confirm.history_spikes(r, 2.0)[-50:].any() for r in quiet]) >= 0.9
    local = confirm.SpikeReference("local", 20)
    assert confirm.false_alarm_rate(quiet, local, 2.0, 50) <= 0.05
    f, rate = confirm.calibrate_factor(quiet, local, (1.2, 1.5, 2.0, 3.0), 0.05, 50)
    assert rate <= 0.05 and f == min(x for x in (1.2, 1.5, 2.0, 3.0) if confirm.false_alarm_rate(quiet, local, x, 50) <= 0.05)
    spiky = _quiet(rng)
    spiky[980] *= 5
    assert confirm.local_spikes(spiky, 20, f)[980]
    x = np.array([1, 1, 1, 1, 5.0, 1])
    assert confirm.local_spikes(x, 3, 2.0).tolist() == [False, False, False, False, True, False]


def _converged(rng, n=2000):
    """A quiet run that converges: a learning-phase norm near 1, then most batches carry no signal (norm 0.002) and
    one in fifty does (norm about 0.5)."""
    x = rng.lognormal(0, 0.2, n)
    late = np.arange(n) >= n // 2
    x[late] = np.where(rng.random(late.sum()) < 0.02, 0.5 * rng.lognormal(0, 0.2, late.sum()), 0.002)
    return x


def test_early_reference_calibrates_where_the_local_one_cannot():
    """On converging quiet runs the local median falls to the no-signal level, so every batch that carries a signal
    is a spike at any factor of the grid; against the run's learning-phase level it is not, and a norm 20 times that
    level still is."""
    rng = np.random.default_rng(2)
    quiet = [_converged(rng) for _ in range(40)]
    grid = (2.0, 3.0, 5.0, 8.0)
    local, early = confirm.SpikeReference("local", 20), confirm.SpikeReference("early", 500)
    assert confirm.false_alarm_rate(quiet, local, max(grid), 300) > 0.9
    assert math.isnan(confirm.calibrate_factor(quiet, local, grid, 0.05, 300)[0])
    f, rate = confirm.calibrate_factor(quiet, early, grid, 0.05, 300)
    assert f == 2.0 and rate == 0.0
    collapse = _converged(rng)
    collapse[1900] = 20.0
    assert early.spikes(collapse, f)[1900] and early.spikes(collapse, f).sum() == 1
    x = np.array([1.0, 2.0, 3.0, 5.0, 7.0, 1.0])
    assert early.spikes(x, 2.0).tolist() == [False] * 6 and confirm.early_spikes(x, 3, 2.0).tolist() == [False, False, False, True, True, False]
    assert confirm.SpikeReference.of({"reference": "early", "early_steps": 500, "window": 20}) == early
    assert confirm.SpikeReference.of({"window": 20}) == local and local.label() == "spike_window 20"
    assert confirm.SpikeReference.of(early.section()) == early and confirm.SpikeReference.of(local.section()) == local
    with pytest.raises(ValueError, match="one of local, early"):
        confirm.SpikeReference("global", 5)


def test_spike_calibration_reads_quiet_runs_per_reference_and_refuses_a_missing_cache(tmp_path, capsys):
    from figures.spike_calibration import calibration, main

    rng = np.random.default_rng(5)
    quiet = [_converged(rng) for _ in range(30)]
    local, early = calibration(quiet, 300, 20, (500,), (2.0, 8.0), 0.05)
    assert local["factor"] is None and local["false_alarm"]["8"] > 0.9
    assert early["factor"] == 2.0 and early["rate"] == 0.0 and early["label"] == "spike_early 500"
    assert early["end_over_reference_median"] == pytest.approx(0.002, rel=0.2)  # converged: 0.002 of a level near 1
    assert main(["--cache", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: --cache {str(tmp_path / 'none')!r} is not a directory; "
                                                    "give a confirmatory run cache"]


# --- (f) DDG-2 and DDG-3 ---


def test_ddg2_floor_precondition_and_solved_seeds():
    paper = {"pg": 0.60, "pmpo": 0.15, "ppo": 0.10}
    at_floor = {"pg": [0.97, 0.98], "pmpo": [0.95, 0.96], "ppo": [0.98, 0.97]}
    status, measured = confirm.baselines_off_floor(at_floor, paper, 3.0)
    assert status == "failed" and "pmpo median 0.955 vs limit 0.450" in measured
    ok = {"pg": [0.7, 0.6], "pmpo": [0.2, 0.3], "ppo": [0.1, 0.2]}
    assert confirm.baselines_off_floor(ok, paper, 3.0)[0] == "met"
    o = confirm.solved_counts("dg vs ppo", [0.01] * 6, [0.5] * 6, 0.1)
    # Fisher's exact one-sided, 6/6 vs 0/6: p = 1 / C(12, 6) = 1 / 924
    assert o.extra["fisher_p"] == pytest.approx(1 / 924) and o.status == "holds"
    assert confirm.solved_counts("dg vs ppo", [0.01] * 2, [0.5] * 2, 0.1).status != "holds"


def test_ddg3_unit_grid_longest_and_exact_comparison():
    hs = confirm.unit_grid(2, 18)
    assert hs == tuple(range(2, 19)) and len(hs) == 17
    err = np.array([[0.0] * 12 + [0.5] * 5, [0.0] * 3 + [0.5] * 14])
    assert confirm.longest_solved(err, hs, 0.1) == [13.0, 4.0]
    assert confirm.grid_covers([13, 16], hs)[0] and not confirm.grid_covers([17], hs)[0]
    assert not confirm.grid_covers([10], (2, 4, 6, 8, 10, 12, 14, 16))[0]  # the even grid: not unit step
    o = confirm.exceeds_by("dg vs pmpo", [13] * 6, [8] * 6, 5)
    # 6 of 6: exact 90% lower bound 0.05^(1/6) = 0.607 > 0.5
    assert o.status == "holds" and o.interval.lo == pytest.approx(0.05 ** (1 / 6), abs=1e-6)
    o = confirm.exceeds_by("dg vs pmpo", [13] * 6, [10] * 6, 5)
    assert o.status == "direction"


# --- (g) margins and edges ---


def test_resolution_margin_computed_from_the_base():
    base = np.array([0.20, 0.21, 0.19, 0.20, 0.205, 0.195])
    m = confirm.resolution_margin("tol", base, 1000, 30, 1.645, 5e-4)
    test = math.log1p(1.645 * math.sqrt(2 * 0.2 * 0.8 / 1000) / 0.2)  # 0.1371 -> factor 1.147
    assert m.value == pytest.approx(test) and m.scale == "log"
    assert "1000 examples" in m.derivation and "0.2000" in m.derivation
    noisy = np.exp(np.log(0.2) + np.array([-1, 1, -1, 1, -1, 1.0]))  # log sd 1.095: the seeds decide
    sd = np.std(np.log(noisy), ddof=1)
    t = stats.t_quantile(0.95, 29) + stats.t_quantile(0.8, 29)
    assert confirm.resolution_margin("tol", noisy, 1000, 30, 1.645, 5e-4).value == pytest.approx(t * sd * math.sqrt(2 / 30))
    with pytest.raises(ValueError):
        confirm.resolution_margin("tol", [0.2], 1000, 30, 1.645, 5e-4)


def test_near_edge():
    iv = stats.Interval(0.3, 0.12, 0.48, 10, 0.3, 0.1, 9)
    assert confirm.near_edge(stats.Outcome("a", "superiority", "holds", 0.05, "diff", iv)) is True  # lo 0.12 - 0.05 <= se
    assert confirm.near_edge(stats.Outcome("a", "superiority", "holds", -0.5, "diff", iv)) is False
    assert confirm.near_edge(stats.Outcome("a", "exact", "holds", 0.1, "diff", None)) is None


def test_near_edge_of_a_proportion_uses_the_binomial_se_of_its_rate():
    # 23 of 32: rate 0.719, se sqrt(0.719 * 0.281 / 32) = 0.0795; exact lower end 0.52 lies within it of 1/2
    edge = stats.proportion("spike", 23, 32, 0.5, 10, 232)
    assert edge.status == "holds" and edge.interval.lo - 0.5 < math.sqrt(23 / 32 * 9 / 32 / 32)
    assert confirm.near_edge(edge) is True
    assert confirm.near_edge(stats.proportion("ess", 32, 32, 0.5, 102, 232)) is False  # se 0: lo 0.88 far from 1/2
    assert confirm.near_edge(stats.proportion("solved", 3, 6, 0.0, 0, 6)) is None  # Fisher's test alone decides
