"""Property-based tests (hypothesis) on extreme inputs: every surrogate gives finite losses and gradients.

Log-probs down to -1e4, log-ratios of +-100 (far beyond the exp saturation at 20), advantages up to
+-1e3, batches of one, ragged and fully masked batches, every aggregation mode.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.stabilizers import AGG_MODES, PolicyTerms, build, effective_sample_size
from testbed.stabilizers.advantages import OPOB, DrGRPO, Group, SNISMean

from .test_numerics import SURROGATES

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _vals(lo: float, hi: float, extremes: tuple[float, ...]):
    # uniform draws plus the edges themselves, which a uniform draw would rarely hit
    return st.one_of(st.floats(lo, hi, allow_nan=False, allow_infinity=False), st.sampled_from(extremes))


@st.composite
def extreme_terms(draw):
    B, T = draw(st.integers(1, 4)), draw(st.integers(1, 5))
    n = B * T
    logp = draw(st.lists(_vals(-1e4, 0.0, (-1e4, -1e-8, 0.0)), min_size=n, max_size=n))
    log_r = draw(st.lists(_vals(-100.0, 100.0, (-100.0, 100.0, 0.0)), min_size=n, max_size=n))
    log_u = draw(st.lists(_vals(-100.0, 100.0, (-100.0, 100.0)), min_size=n, max_size=n))
    adv = draw(st.lists(_vals(-1e3, 1e3, (-1e3, 1e3, 0.0)), min_size=B, max_size=B))
    mask = draw(st.one_of(st.just([False] * n), st.just([True] * n), st.lists(st.booleans(), min_size=n, max_size=n)))
    lp = torch.tensor(logp).view(B, T)
    lr = torch.tensor(log_r).view(B, T)
    prox = lp - torch.tensor(log_u).view(B, T)
    return lp, lp - lr, torch.tensor(adv), torch.tensor(mask).view(B, T), prox


@pytest.mark.parametrize("spec", SURROGATES)
@SETTINGS
@given(batch=extreme_terms())
def test_every_surrogate_is_finite_on_extreme_inputs(spec, batch):
    logp, blogp, adv, mask, prox = batch
    recipe = build(spec)
    for agg in AGG_MODES:
        lp = logp.clone().requires_grad_()
        out = recipe.loss(PolicyTerms(lp, blogp, adv, mask, proximal_logp=prox), agg)
        (g,) = torch.autograd.grad(out.loss, lp, allow_unused=True)
        g = torch.zeros_like(lp) if g is None else g
        assert math.isfinite(out.loss.item()), agg
        assert torch.isfinite(g).all(), agg
        assert all(math.isfinite(v) for v in out.metrics.values()), out.metrics
        if not mask.any():
            assert out.loss.item() == 0.0 and not g.any()
        else:
            assert not g[~mask].any()  # nothing flows to padding


@SETTINGS
@given(
    rewards=st.lists(_vals(-1e3, 1e3, (-1e3, 1e3)), min_size=1, max_size=8),
    data=st.data(),
)
def test_advantages_are_finite_on_extreme_ratios(rewards, data):
    n = len(rewards)
    r = torch.tensor(rewards)
    lw = torch.tensor(data.draw(st.lists(_vals(-1e4, 1e4, (-1e4, 1e4)), min_size=n, max_size=n)))
    norms = torch.tensor(data.draw(st.lists(_vals(0.0, 1e6, (0.0, 1e6)), min_size=n, max_size=n)))
    gid = torch.tensor(data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    for adv in (
        OPOB()(r, group_ids=gid, seq_log_ratio=lw, score_sq_norms=norms),
        OPOB(code_variant=True)(r, group_ids=gid, seq_log_ratio=lw),
        SNISMean()(r, group_ids=gid, seq_log_ratio=lw),
        Group()(r, group_ids=gid),
        DrGRPO()(r, group_ids=gid),
    ):
        assert adv.shape == (n,) and torch.isfinite(adv).all()
    rho = effective_sample_size(lw).item()
    assert 1.0 / n - 1e-6 <= rho <= 1.0 + 1e-6


@pytest.mark.parametrize("spec", SURROGATES)
@pytest.mark.parametrize("log_r", [-100.0, 100.0])
def test_batch_of_one_at_the_extremes(spec, log_r):
    # one token, logp = -1e4, log-ratio +-100 (proximal 50 away), advantage -1e3
    lp = torch.tensor([[-1e4]], requires_grad=True)
    terms = PolicyTerms(lp, lp.detach() - log_r, torch.tensor([-1e3]), torch.ones(1, 1, dtype=torch.bool), proximal_logp=lp.detach() - 50.0)
    out = build(spec).loss(terms)
    (g,) = torch.autograd.grad(out.loss, lp, allow_unused=True)
    assert math.isfinite(out.loss.item()) and (g is None or torch.isfinite(g).all())
