"""Numerics shared by every stabilizer: aggregation modes, saturated ratios, ESS, non-finite inputs, dtypes."""

from __future__ import annotations

import math

import pytest
import torch

from testbed.stabilizers import (
    AGG_MODES,
    MAX_LOG_RATIO,
    BatchStats,
    PolicyTerms,
    aggregate,
    build,
    effective_sample_size,
    safe_exp,
)

from ._terms import random_terms

T = torch.tensor
SURROGATES = [
    "pg", "is", "is(level=sequence)", "tis", "tis(level=sequence, lo=0.5)", "mis", "mis(level=sequence)", "ppo",
    "ppo(dual_clip=3)", "decoupled_ppo", "cispo", "gspo", "m2po", "m2po(trust_region_only=true)", "dg",
    "dg(whiten=true, level=sequence)", "kondo",
]

LOSS = T([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = T([[1, 1, 0], [1, 0, 0]], dtype=torch.bool)


def test_aggregation_modes_by_hand():
    assert aggregate(LOSS, MASK, "token-mean").item() == pytest.approx((1 + 2 + 4) / 3)
    assert aggregate(LOSS, MASK, "seq-mean-token-mean").item() == pytest.approx(((1 + 2) / 2 + 4 / 1) / 2)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum").item() == pytest.approx((3 + 4) / 2)
    # verl 0.9: the sequence mean of token sums, divided by T (or loss_scale_factor)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm").item() == pytest.approx((3 + 4) / 2 / 3)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=2).item() == pytest.approx(1.75)
    # global denominators (data parallel): token count 10, sequence count 4
    assert aggregate(LOSS, MASK, "token-mean", global_tokens=10).item() == pytest.approx(0.7)
    assert aggregate(LOSS, MASK, "seq-mean-token-sum", global_seqs=4).item() == pytest.approx(7 / 4)
    # a sequence without tokens does not count as a sequence
    empty_row = T([[1, 1, 0], [0, 0, 0]], dtype=torch.bool)
    assert aggregate(LOSS, empty_row, "seq-mean-token-mean").item() == pytest.approx(1.5)
    assert aggregate(LOSS, empty_row, "seq-mean-token-sum").item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match="token-mean"):
        aggregate(LOSS, MASK, "mean")


@pytest.mark.parametrize("mode", AGG_MODES)
def test_fully_masked_aggregation_is_exactly_zero(mode):
    inf_loss = T([[math.inf, -math.inf], [math.nan, 1.0]], requires_grad=True)
    out = aggregate(inf_loss, torch.zeros(2, 2, dtype=torch.bool), mode)
    out.backward()
    assert out.item() == 0.0 and torch.equal(inf_loss.grad, torch.zeros(2, 2))


def test_safe_exp_and_ess():
    assert safe_exp(T([100.0, -100.0, 3.0])).tolist() == pytest.approx([math.exp(MAX_LOG_RATIO), math.exp(-MAX_LOG_RATIO), math.exp(3.0)])
    # w = [1, 3]: (4)^2 / (2 * 10) = 0.8; equal weights: 1; one dominant weight: 1/B
    assert effective_sample_size(torch.log(T([1.0, 3.0]))).item() == pytest.approx(0.8)
    assert effective_sample_size(T([5.0, 5.0, 5.0])).item() == pytest.approx(1.0)
    assert effective_sample_size(T([1000.0, 0.0, 0.0, 0.0])).item() == pytest.approx(0.25)
    assert effective_sample_size(T([0.0, 7.0]), T([True, False])).item() == 1.0
    assert effective_sample_size(T([0.0]), T([False])).item() == 1.0
    # one rho per leading index, each the same number as its row alone
    rows = torch.log(T([[1.0, 3.0], [5.0, 5.0], [2.0, 1e-3]]))
    batched = effective_sample_size(rows, T([[True, True], [True, True], [False, True]]))
    assert batched.tolist() == pytest.approx([0.8, 1.0, 1.0])
    assert batched[0] == effective_sample_size(rows[0]) and batched[1] == effective_sample_size(rows[1])
    stats = BatchStats.from_terms(PolicyTerms(T([[0.0], [0.0]]), torch.log(T([[1.0], [1 / 3]])), T([0.0, 0.0]), T([[True], [True]])))
    assert stats.ess == pytest.approx(0.8)


@pytest.mark.parametrize("spec", SURROGATES)
def test_fully_masked_batch_gives_zero_loss_and_zero_grads(spec):
    t = random_terms(seed=9, scale=3.0)
    t.mask = torch.zeros_like(t.mask)
    for agg in AGG_MODES:
        out = build(spec).loss(t, agg)
        (g,) = torch.autograd.grad(out.loss, t.logp, allow_unused=True)
        assert out.loss.item() == 0.0 and (g is None or not g.any()), agg
        assert all(math.isfinite(v) for v in out.metrics.values())


@pytest.mark.parametrize("spec", SURROGATES)
def test_garbage_under_the_mask_cannot_leak(spec):
    # NaN / inf at masked positions must change neither the loss nor the gradient
    t = random_terms(seed=10)
    dirty_logp = t.logp.detach().clone()
    dirty_b, dirty_a = t.behavior_logp.clone(), t.advantages.clone()
    hole = ~t.mask
    assert hole.any()
    dirty_logp[hole], dirty_b[hole], dirty_a[hole] = math.nan, math.inf, -math.inf
    dirty = PolicyTerms(dirty_logp.requires_grad_(), dirty_b, dirty_a, t.mask)
    clean = build(spec).loss(t)
    got = build(spec).loss(dirty)
    (g_clean,) = torch.autograd.grad(clean.loss, t.logp)
    (g_dirty,) = torch.autograd.grad(got.loss, dirty.logp)
    assert got.loss.item() == pytest.approx(clean.loss.item(), rel=1e-6, abs=1e-7)
    assert torch.isfinite(g_dirty).all() and torch.allclose(g_dirty, g_clean, atol=1e-7)


def test_non_finite_inputs_raise_or_are_masked_and_counted():
    t = random_terms(seed=11)
    logp = t.logp.detach().clone()
    logp[0, 0] = math.nan
    bad = PolicyTerms(logp.requires_grad_(), t.behavior_logp, t.advantages, t.mask)
    with pytest.raises(ValueError, match="logp"):
        build("ppo").loss(bad)
    out = build("ppo").loss(bad, nan_policy="mask")
    assert out.metrics["nonfinite_masked"] == 1.0 and math.isfinite(out.loss.item())
    # equals the loss with that token masked by hand
    mask = t.mask.clone()
    mask[0, 0] = False
    ref = build("ppo").loss(PolicyTerms(t.logp, t.behavior_logp, t.advantages, mask))
    assert out.loss.item() == pytest.approx(ref.loss.item())
    adv = t.advantages.clone()
    adv[1, :] = math.inf
    with pytest.raises(ValueError, match="advantages"):
        build("dg").loss(PolicyTerms(t.logp, t.behavior_logp, adv, t.mask))
    with pytest.raises(ValueError, match="nan_policy"):
        build("pg").loss(t, nan_policy="skip")
    # "ignore" checks nothing: the same loss on finite inputs, a non-finite loss from non-finite ones
    assert build("pg").loss(t, nan_policy="ignore").loss.item() == build("pg").loss(t).loss.item()
    assert not math.isfinite(build("pg").loss(PolicyTerms(t.logp, t.behavior_logp, adv, t.mask), nan_policy="ignore").loss.item())


@pytest.mark.parametrize("spec", SURROGATES)
def test_bfloat16_inputs_compute_in_float32(spec):
    t = random_terms(seed=12)
    lp16 = t.logp.detach().to(torch.bfloat16).requires_grad_()
    b16, a16 = t.behavior_logp.to(torch.bfloat16), t.advantages.to(torch.bfloat16)
    out16 = build(spec).loss(PolicyTerms(lp16, b16, a16, t.mask))
    # the same values held in float32 give the same loss: computation is float32 either way
    lp32 = lp16.detach().float().requires_grad_()
    out32 = build(spec).loss(PolicyTerms(lp32, b16.float(), a16.float(), t.mask))
    assert out16.loss.dtype == torch.float32
    assert out16.loss.item() == pytest.approx(out32.loss.item(), rel=1e-6, abs=1e-7)
    (g16,) = torch.autograd.grad(out16.loss, lp16)
    (g32,) = torch.autograd.grad(out32.loss, lp32)
    assert g16.dtype == torch.bfloat16 and torch.allclose(g16.float(), g32, rtol=1e-2, atol=1e-3)
