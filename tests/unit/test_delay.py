"""Staleness models: parsing, and realised lags that follow each model's distribution and bound."""

import math

import numpy as np
import pytest
import torch

from testbed.delay import bounded_lags, parse_staleness

N_STEPS = 40_000


def realised(spec: str, n_steps: int = N_STEPS, n_actors: int = 1, seed: int = 0) -> np.ndarray:
    return parse_staleness(spec).lags(n_steps, n_actors, np.random.default_rng(seed))


@pytest.mark.parametrize(
    "spec", ["uniform:7", "geometric:0.3,12", "geometric:0.05,20", "pareto:1.2,50", "pareto:0.5,8"]
)
def test_iid_models_follow_their_pmf(spec):
    model = parse_staleness(spec)
    pmf = model.pmf()
    assert pmf.sum() == pytest.approx(1.0) and len(pmf) == model.max_lag + 1
    lags = realised(spec, n_actors=2)[model.max_lag :].ravel()  # past the clamped warm-up
    n = lags.size
    assert lags.min() >= 0 and lags.max() <= model.max_lag
    freq = np.bincount(lags, minlength=len(pmf)) / n
    # every bin within 5 binomial standard errors (plus one count): fails with prob. < 1e-5 per bin
    tol = 5 * np.sqrt(pmf * (1 - pmf) / n) + 1 / n
    assert np.all(np.abs(freq - pmf) <= tol), (freq, pmf)
    k = np.arange(len(pmf))
    mean, var = (k * pmf).sum(), ((k - (k * pmf).sum()) ** 2 * pmf).sum()
    assert abs(lags.mean() - mean) <= 5 * math.sqrt(var / n) + 1e-12


def test_known_shapes_of_the_pmfs():
    geo = parse_staleness("geometric:0.5,30").pmf()
    assert geo[1] / geo[0] == pytest.approx(0.5) and geo[7] / geo[6] == pytest.approx(0.5)
    par = parse_staleness("pareto:1.0,1000").pmf()
    # discrete Pareto: P(L >= k) proportional to (k+1)^-alpha, so P(L >= 9) / P(L >= 0) ~ 1/10
    tail = par[::-1].cumsum()[::-1]
    assert tail[9] / tail[0] == pytest.approx((10.0**-1 - 1002.0**-1) / (1 - 1002.0**-1))
    assert parse_staleness("uniform:4").pmf() == pytest.approx(np.full(5, 0.2))


@pytest.mark.parametrize("spec, expect", [("sync", 0), ("fixed:5", 5), ("fixed:0", 0)])
def test_deterministic_models_and_clamping(spec, expect):
    lags = realised(spec, n_steps=20, n_actors=3)
    t = np.arange(20)[:, None]
    assert np.array_equal(lags, np.minimum(expect, t).repeat(3, axis=1))


def test_lags_never_reach_before_version_zero():
    for spec in ("uniform:50", "pareto:0.5,100", "bounded:8,10"):
        lags = realised(spec, n_steps=200, n_actors=4)
        assert np.all(lags <= np.arange(200)[:, None])


@pytest.mark.parametrize("eta", [0, 1, 4, 16])
@pytest.mark.parametrize("speed", [0.5, 1.0, 2.0, 100.0])
def test_bounded_respects_the_admission_bound(eta, speed):
    lags = bounded_lags(300, 4, eta, speed)
    assert lags.min() >= 0 and lags.max() <= eta  # AReaL's rule: floor((N_r - 1)/B) <= i + eta
    if eta == 0:
        assert lags.max() == 0  # eta = 0 is synchronous, at any speed


def test_bounded_fast_actors_run_exactly_eta_ahead():
    lags = bounded_lags(100, 10, 4, 1000.0)
    assert np.all(lags[4:] == 4) and np.array_equal(lags[:4, 0], np.arange(4))


def test_bounded_slow_actors_keep_lags_small():
    # actors slower than the learner: the learner waits, the queue never fills, lags stay < eta
    assert bounded_lags(200, 1, 8, 0.5).max() <= 1


def test_mixed_versions_are_monotone_and_in_range():
    model = parse_staleness("fixed:6+mixed:0.25")
    gen = torch.Generator().manual_seed(0)
    v = model.token_versions(10, 16, (4000, 8), gen)
    assert v.shape == (4000, 8) and np.all(v[:, 0] == 10)
    assert np.all(np.diff(v, axis=1) >= 0) and v.max() <= 16
    steps = np.diff(v[:, :4], axis=1).ravel()  # far from the cap: increments ~ Bernoulli(q)
    assert abs(steps.mean() - 0.25) <= 5 * math.sqrt(0.25 * 0.75 / steps.size)
    assert model.token_versions(10, 16, (5, 1), gen) is None  # T = 1: nothing to mix
    assert parse_staleness("fixed:6").token_versions(10, 16, (5, 8), gen) is None


@pytest.mark.parametrize(
    "spec",
    ["", "fixed", "fixed:-1", "fixed:1.5", "uniform:a", "geometric:0,5", "geometric:0.5", "pareto:-1,5",
     "bounded:2,0", "weird:3", "fixed:3+mixed:2", "fixed:3+other:1", None, 7],
)
def test_bad_specs_name_the_allowed_forms(spec):
    with pytest.raises(ValueError, match="allowed forms") as info:
        parse_staleness(spec)
    assert repr(spec) in str(info.value)
