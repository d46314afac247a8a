"""Advantage estimators against hand values; OPOB's optimality; exact per-sample score norms."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from testbed.stabilizers import build, score_sq_norms
from testbed.stabilizers.advantages import OPOB, Auto, BatchMean, DrGRPO, Group, Raw, SNISMean

T = torch.tensor

# Two groups of two: R = [1, 0 | 1, 0]; sequence ratios w = [2, 1 | 1, 3]; ||g||^2 = [1, 2 | 2, 1]
R = T([1.0, 0.0, 1.0, 0.0])
GID = T([0, 0, 1, 1])
LOG_W = torch.log(T([2.0, 1.0, 1.0, 3.0]))
NORMS = T([1.0, 2.0, 2.0, 1.0])


def close(a, b, tol=1e-5):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


def test_raw_mean_group_dr_grpo_by_hand():
    r = T([1.0, 0.0, 1.0, 1.0])
    assert close(Raw()(r), r)
    assert close(BatchMean()(r), r - 0.75)
    # group 0: mean 0.5, population std 0.5 -> [1, -1]; group 1: mean 1, std 0 -> [0, 0]
    assert close(Group(eps=1e-6)(r, group_ids=GID), [0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6), 0.0, 0.0])
    assert close(DrGRPO()(r, group_ids=GID), [0.5, -0.5, 0.0, 0.0])
    assert close(DrGRPO()(r), r - 0.75)  # one group without ids
    assert close(Auto()(r), BatchMean()(r)) and close(Auto()(r, group_ids=GID), Group()(r, group_ids=GID))


def test_opob_paper_formula_by_hand():
    # b_g = sum w^2 n R / sum w^2 n. Group 0: weights 4*1, 1*2 = [4, 2] -> b = 4 / 6 = 2/3
    # group 1: weights 1*2, 9*1 = [2, 9] -> b = 2 / 11. std of [1, 0] is 0.5 in both groups.
    adv = OPOB(eps=1e-12)(R, group_ids=GID, seq_log_ratio=LOG_W, score_sq_norms=NORMS)
    b0, b1 = 2 / 3, 2 / 11
    assert close(adv, [(1 - b0) / 0.5, (0 - b0) / 0.5, (1 - b1) / 0.5, (0 - b1) / 0.5])
    raw = OPOB(std_normalize=False)(R, group_ids=GID, seq_log_ratio=LOG_W, score_sq_norms=NORMS)
    assert close(raw, [1 - b0, -b0, 1 - b1, -b1])


def test_opob_without_score_norms_uses_unit_norms():
    # ||g||^2 = 1: group 0 weights [4, 1] -> b = 0.8; group 1 weights [1, 9] -> b = 0.1
    adv = OPOB(std_normalize=False)(R, group_ids=GID, seq_log_ratio=LOG_W)
    assert close(adv, [0.2, -0.8, 0.9, -0.1])
    # on-policy (no ratios): the group mean
    assert close(OPOB(std_normalize=False)(R, group_ids=GID), [0.5, -0.5, 0.5, -0.5])


def test_opob_code_variant_by_hand():
    # weight w^2 min(w, c)^2 n. c = 8 (all w < c): w^4 n. group 0: [16, 2] -> b = 16/18; group 1: [2, 81] -> 2/83
    adv = OPOB(std_normalize=False, code_variant=True)(R, group_ids=GID, seq_log_ratio=LOG_W, score_sq_norms=NORMS)
    assert close(adv, [1 - 16 / 18, -16 / 18, 1 - 2 / 83, -2 / 83])
    # c = 2.5 truncates w = 3: weight 9 * 6.25 * 1 = 56.25 against 1 * 1 * 2 -> b = 2 / 58.25
    adv = OPOB(std_normalize=False, code_variant=True, trunc_c=2.5)(R, group_ids=GID, seq_log_ratio=LOG_W, score_sq_norms=NORMS)
    assert close(adv[2:], [1 - 2 / 58.25, -2 / 58.25])


def test_opob_is_the_minimum_variance_constant_baseline():
    # b* minimises sum_i w_i^2 ||g_i||^2 (R_i - b)^2, the second moment of the estimator's terms
    g = torch.Generator().manual_seed(0)
    r = torch.rand(50, generator=g)
    lw = torch.randn(50, generator=g)
    n = torch.rand(50, generator=g) * 3
    b_star = float((r - OPOB(std_normalize=False)(r, seq_log_ratio=lw, score_sq_norms=n))[0])
    bs = torch.linspace(b_star - 0.2, b_star + 0.2, 4001, dtype=torch.float64)
    weight = (2 * lw).double().exp() * n.double()
    second_moment = (weight[None] * (r.double()[None] - bs[:, None]) ** 2).sum(1)
    assert float(bs[torch.argmin(second_moment)]) == pytest.approx(b_star, abs=2e-4)


def test_opob_is_exact_for_huge_log_ratios():
    # weights exp(2 * 500) would overflow any float; in log space the larger one wins exactly
    adv = OPOB(std_normalize=False)(T([1.0, 0.0]), seq_log_ratio=T([500.0, 400.0]))
    assert close(adv, [0.0, -1.0])
    with pytest.raises(ValueError, match="seq_log_ratio"):
        OPOB()(R, seq_log_ratio=T([0.0, math.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match="score_sq_norms"):
        OPOB()(R, score_sq_norms=T([1.0, -1.0, 1.0, 1.0]))
    # all-zero score norms in a group: falls back to the plain group mean
    assert close(OPOB(std_normalize=False)(T([1.0, 0.0]), score_sq_norms=T([0.0, 0.0])), [0.5, -0.5])


def test_snis_mean_by_hand():
    # b_g = sum w R / sum w. group 0: w = [2, 1] -> 2/3; group 1: w = [1, 3] -> 1/4
    adv = SNISMean()(R, group_ids=GID, seq_log_ratio=LOG_W)
    assert close(adv, [1 / 3, -2 / 3, 0.75, -0.25])
    assert close(SNISMean()(R), R - 0.5)


def test_recipe_advantages_feed_sequence_ratios():
    # vcpo = opob: the recipe forms log R_seq from per-token log-probs (masked) before calling OPOB
    logp = T([[-1.0, -1.0], [-1.0, -2.0], [-1.0, -1.0], [-1.0, -1.0]])
    lr = torch.stack([LOG_W, torch.zeros(4)], 1)  # the second token's log-ratio is 0 ...
    lr[1, 1] = 5.0  # ... except a masked one
    mask = T([[True, True], [True, False], [True, True], [True, True]])
    r = build("vcpo")
    assert r.needs_score_norms
    adv = r.advantages(R, group_ids=GID, logp=logp, behavior_logp=logp - lr, mask=mask, score_sq_norms=NORMS)
    assert close(adv, OPOB()(R, group_ids=GID, seq_log_ratio=LOG_W, score_sq_norms=NORMS))


# ---- per-sample score norms ------------------------------------------------------------------------


def linear_policy_logp(forward, x, a):
    return torch.log_softmax(forward(x), -1).gather(-1, a[:, None]).sum()


def test_score_norms_closed_form_for_a_linear_softmax_policy():
    # logits = W x: grad_W log pi(a|x) = (e_a - pi) x^T, so ||.||^2 = ||e_a - pi||^2 ||x||^2
    torch.manual_seed(0)
    model = nn.Linear(5, 4, bias=False)
    x, a = torch.randn(7, 5), torch.randint(0, 4, (7,))
    pi = torch.softmax(model(x), -1).detach()
    expected = ((nn.functional.one_hot(a, 4) - pi) ** 2).sum(1) * (x**2).sum(1)
    for method in ("vmap", "loop"):
        got = score_sq_norms(model, linear_policy_logp, x, a, method=method)
        assert torch.allclose(got, expected, rtol=1e-5), method
    assert torch.allclose(score_sq_norms(model, linear_policy_logp, x, a, chunk_size=3), expected, rtol=1e-5)


def test_score_norms_of_a_sequence_model_match_per_sample_autograd():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Embedding(6, 8), nn.Tanh(), nn.Linear(8, 6))
    tokens, mask = torch.randint(0, 6, (5, 4)), torch.rand(5, 4) > 0.3

    def seq_logp(forward, tok, m):
        logits = forward(tok[:, :-1])
        lp = torch.log_softmax(logits, -1).gather(-1, tok[:, 1:, None]).squeeze(-1)
        return (lp * m[:, 1:]).sum()

    got = score_sq_norms(model, seq_logp, tokens, mask)
    for i in range(5):
        grads = torch.autograd.grad(seq_logp(model, tokens[i : i + 1], mask[i : i + 1]), list(model.parameters()), allow_unused=True)
        ref = sum(g.pow(2).sum() for g in grads if g is not None)
        assert got[i].item() == pytest.approx(float(ref), rel=1e-5)


def test_score_norms_errors():
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match="method"):
        score_sq_norms(model, linear_policy_logp, torch.zeros(1, 2), torch.zeros(1, dtype=torch.long), method="x")
    with pytest.raises(ValueError, match="batch size"):
        score_sq_norms(model, linear_policy_logp, torch.zeros(2, 2), torch.zeros(3, dtype=torch.long))
