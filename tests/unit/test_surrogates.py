"""Every surrogate against values computed by hand, and the identities between them.

The batch (see _terms.hand_terms): logp = [[-1, -2], [-0.5, -1.5]], token ratios r = [[2, 1], [0.5, 4]],
sequence ratios R = [2, 2], advantages A = [1, 1 | -2, -2] per token, token-mean over N = 4 tokens.
"""

from __future__ import annotations

import math

import pytest
import torch

from testbed.stabilizers import PolicyTerms, build
from testbed.stabilizers.importance import IS, MIS, TIS
from testbed.stabilizers.ppo_family import CISPO, GSPO, M2PO, PPO, DecoupledPPO, m2po_mask
from testbed.stabilizers.surrogates import PG, PMPO

from ._terms import LN2, hand_terms, loss_and_grad, random_terms

T = torch.tensor


def close(a, b, tol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64), atol=tol, rtol=1e-6)


# ---- hand values ---------------------------------------------------------------------------------


def test_pg_by_hand():
    # loss = -(1/4) sum A logp = -(1/4) [1(-1) + 1(-2) + (-2)(-0.5) + (-2)(-1.5)] = -(1/4)(1) = -0.25
    loss, grad, m = loss_and_grad(PG(), hand_terms())
    assert close(loss, -0.25)
    # d loss / d logp = -A / 4
    assert close(grad, [[-0.25, -0.25], [0.5, 0.5]])
    assert m["ratio_max"] == pytest.approx(4.0) and m["ratio_min"] == pytest.approx(0.5)
    assert m["ratio_mean"] == pytest.approx((2 + 1 + 0.5 + 4) / 4)
    assert m["ess"] == pytest.approx(1.0)  # R = [2, 2]: (2 + 2)^2 / (2 (4 + 4)) = 1


def test_is_token_by_hand():
    # -(1/4) [2*1*(-1) + 1*1*(-2) + 0.5*(-2)(-0.5) + 4*(-2)(-1.5)] = -(1/4)(-2 - 2 + 0.5 + 12) = -2.125
    loss, grad, _ = loss_and_grad(IS(), hand_terms())
    assert close(loss, -2.125)
    assert close(grad, [[-0.5, -0.25], [0.25, 2.0]])  # -r A / 4


def test_is_sequence_by_hand():
    # R = [2, 2]: -(1/4) [2*1*(-1 - 2) + 2*(-2)*(-0.5 - 1.5)] = -(1/4)(-6 + 8) = -0.5
    loss, grad, _ = loss_and_grad(IS(level="sequence"), hand_terms())
    assert close(loss, -0.5)
    assert close(grad, [[-0.5, -0.5], [1.0, 1.0]])  # -R A / 4


def test_tis_by_hand():
    # c = 1.5: w = min(r, 1.5) = [[1.5, 1], [0.5, 1.5]]
    # -(1/4) [1.5(-1) + 1(-2) + 0.5(-2)(-0.5) + 1.5(-2)(-1.5)] = -(1/4)(-1.5 - 2 + 0.5 + 4.5) = -0.375
    loss, grad, m = loss_and_grad(TIS(c=1.5), hand_terms())
    assert close(loss, -0.375)
    assert close(grad, [[-0.375, -0.25], [0.25, 0.75]])
    assert m["clip_frac"] == pytest.approx(0.5)  # r = 2 and r = 4 truncated
    # lower bound lo = 0.75 also lifts 0.5 -> 0.75: third term 0.75 => sum 1.75, loss -0.4375
    loss, _, m = loss_and_grad(TIS(c=1.5, lo=0.75), hand_terms())
    assert close(loss, -0.4375) and m["clip_frac"] == pytest.approx(0.75)
    # sequence level: R = [2, 2] -> 1.5 each: -(1/4)[1.5(-3) + 1.5(4)] = -0.375, both sequences truncated
    loss, _, m = loss_and_grad(TIS(c=1.5, level="sequence"), hand_terms())
    assert close(loss, -0.375) and m["clip_frac"] == pytest.approx(1.0)


def test_mis_by_hand():
    # [lo, hi] = [0.6, 3]: r = 0.5 and r = 4 rejected; w = [[2, 1], [0, 0]]
    # -(1/4) [2(-1) + 1(-2)] = 1.0; the rejected tokens keep their place in the denominator
    loss, grad, m = loss_and_grad(MIS(lo=0.6, hi=3.0), hand_terms())
    assert close(loss, 1.0)
    assert close(grad, [[-0.5, -0.25], [0.0, 0.0]])
    assert m["mask_frac"] == pytest.approx(0.5)
    # sequence level: R = [2, 2] both > hi = 1.5: everything rejected -> exactly 0
    loss, grad, m = loss_and_grad(MIS(lo=0.5, hi=1.5, level="sequence"), hand_terms())
    assert loss == 0.0 and m["mask_frac"] == 1.0 and not grad.any()
    # ... and with hi = 3 nothing is rejected: equals sequence-level IS (-0.5)
    loss, _, m = loss_and_grad(MIS(lo=0.5, hi=3.0, level="sequence"), hand_terms())
    assert close(loss, -0.5) and m["mask_frac"] == 0.0


def test_ppo_by_hand():
    # eps = 0.2. token (r, A): (2, 1) -> min(2, 1.2) = 1.2 clipped | (1, 1) -> 1
    # (0.5, -2) -> min(-1, 0.8(-2) = -1.6) = -1.6 clipped | (4, -2) -> min(-8, -2.4) = -8 unclipped
    # objective sum 1.2 + 1 - 1.6 - 8 = -7.4 -> loss 7.4 / 4 = 1.85
    loss, grad, m = loss_and_grad(PPO(eps=0.2), hand_terms())
    assert close(loss, 1.85)
    # gradient only through unclipped terms: d(r A)/d logp = r A -> -(1)/4 and -(-8)/4
    assert close(grad, [[0.0, -0.25], [0.0, 2.0]])
    assert m["clip_frac"] == pytest.approx(0.5) and m["dual_clip_frac"] == 0.0


def test_ppo_dual_clip_by_hand():
    # dual clip c = 3: the A < 0 token with objective -8 is raised to 3 * (-2) = -6 (no gradient)
    # objective sum 1.2 + 1 - 1.6 - 6 = -5.4 -> loss 1.35
    loss, grad, m = loss_and_grad(build("ppo(eps=0.2, dual_clip=3)").surrogate, hand_terms())
    assert close(loss, 1.35)
    assert close(grad, [[0.0, -0.25], [0.0, 0.0]])
    assert m["dual_clip_frac"] == pytest.approx(0.25)


def test_ppo_asymmetric_eps_by_hand():
    # eps_low = 0.6, eps_high = 1.5: clip range [0.4, 2.5]. (2, 1): min(2, 2) = 2, not strictly clipped
    # (0.5, -2): min(-1, -1) = -1 | (4, -2): min(-8, 2.5(-2) = -5) = -8. sum 2 + 1 - 1 - 8 = -6 -> 1.5
    loss, _, m = loss_and_grad(PPO(eps_low=0.6, eps_high=1.5), hand_terms())
    assert close(loss, 1.5) and m["clip_frac"] == 0.0


def decoupled_hand_terms() -> PolicyTerms:
    # u = pi/prox = [[1.5, 1], [1, 0.5]], behaviour weight bw = prox/mu = [[1, 2], [6, 0.5]]
    logp = T([[-1.0, -2.0], [-0.5, -1.5]], dtype=torch.float64).requires_grad_()
    prox = logp.detach() - torch.log(T([[1.5, 1.0], [1.0, 0.5]], dtype=torch.float64))
    blogp = prox - torch.log(T([[1.0, 2.0], [6.0, 0.5]], dtype=torch.float64))
    return PolicyTerms(logp, blogp, T([1.0, -2.0]), torch.ones(2, 2, dtype=torch.bool), proximal_logp=prox)


def test_decoupled_ppo_by_hand():
    # eps = 0.2, cap = 5. (u, bw, A): (1.5, 1, 1) -> 1 * min(1.5, 1.2) = 1.2 | (1, 2, 1) -> 2 * 1 = 2
    # (1, 6, -2) -> bw > cap: masked, 0 | (0.5, 0.5, -2) -> 0.5 * min(-1, 0.8(-2)) = 0.5(-1.6) = -0.8
    # objective sum 1.2 + 2 + 0 - 0.8 = 2.4 -> loss -0.6
    loss, grad, m = loss_and_grad(DecoupledPPO(eps=0.2, cap=5.0), decoupled_hand_terms())
    assert close(loss, -0.6)
    # only the (1, 2, 1) token has a gradient: -bw u A / 4 = -2 / 4
    assert close(grad, [[0.0, -0.5], [0.0, 0.0]])
    assert m["mask_frac"] == pytest.approx(0.25) and m["clip_frac"] == pytest.approx(0.5)
    assert m["behav_weight_max"] == pytest.approx(6.0)
    # without the cap the masked token counts: 6 * min(1 * (-2), 1 * (-2)) = -12 -> sum -9.6 -> 2.4
    loss, _, m = loss_and_grad(DecoupledPPO(eps=0.2, cap=None), decoupled_hand_terms())
    assert close(loss, 2.4) and m["mask_frac"] == 0.0


def test_cispo_by_hand():
    # no lower bound, eps_high = 0.5: w = clip(r, 0, 1.5) = [[1.5, 1], [0.5, 1.5]] -> -0.375 (as tis c = 1.5)
    loss, grad, m = loss_and_grad(CISPO(eps_low=1.0, eps_high=0.5), hand_terms())
    assert close(loss, -0.375)
    assert close(grad, [[-0.375, -0.25], [0.25, 0.75]])  # every token keeps a gradient
    assert m["clip_frac"] == pytest.approx(0.5)  # r = 2 and r = 4
    # eps_low = 0.2 lifts 0.5 -> 0.8: third term 0.8(-2)(-0.5) = 0.8 -> sum 1.8 -> loss -0.45
    loss, _, m = loss_and_grad(CISPO(eps_low=0.2, eps_high=0.5), hand_terms())
    assert close(loss, -0.45) and m["clip_frac"] == pytest.approx(0.75)


def test_gspo_by_hand():
    # s_i = exp(mean_t log r) = exp(ln2 / 2) = sqrt 2 for both sequences.
    s = math.sqrt(2.0)
    # eps = 0.5 (range [0.5, 1.5]) does not clip: objective s A per token, seq-mean-token-mean:
    # loss = -mean_i mean_t s A_i = -(s - 2 s) / 2 = s / 2
    loss, grad, m = loss_and_grad(GSPO(eps_low=0.5, eps_high=0.5), hand_terms())
    assert close(loss, s / 2)
    # sg trick: d/d logp_t = -(1/B)(1/|y_i|) s_i A_i = -(1/4) s A_i
    assert close(grad, [[-s / 4, -s / 4], [s / 2, s / 2]])
    assert m["clip_frac"] == 0.0
    # paper's eps (3e-4, 4e-4): A = 1 is clipped at 1.0004 (no gradient); A = -2 keeps s(-2)
    loss, grad, m = loss_and_grad(GSPO(), hand_terms())
    assert close(loss, -(1.0004 - 2 * s) / 2)
    assert close(grad, [[0.0, 0.0], [s / 2, s / 2]])
    assert m["clip_frac"] == pytest.approx(0.5)


def test_gspo_gradient_is_per_token_with_ragged_lengths():
    # lengths 3 and 1: the gradient on each token is -(1/B)(1/|y_i|) s_i A_i with s_i = exp(mean log r)
    terms = random_terms(B=2, T=3, seed=3, scale=0.3)
    terms.mask = T([[True, True, True], [True, False, False]])
    _, grad, _ = loss_and_grad(GSPO(eps_low=1.0, eps_high=100.0), terms)
    lr = (terms.logp.detach() - terms.behavior_logp).to(torch.float64)
    s = torch.stack([lr[0].mean().exp(), lr[1, 0].exp()])
    A = terms.advantages[:, 0].to(torch.float64)
    expected = torch.zeros(2, 3, dtype=torch.float64)
    expected[0] = -(1 / 2) * (1 / 3) * s[0] * A[0]
    expected[1, 0] = -(1 / 2) * s[1] * A[1]
    assert close(grad, expected, 1e-5)


def test_gspo_agg_none_uses_callers_mode():
    a = GSPO(eps_low=0.5, eps_high=0.5, agg=None)(hand_terms(), "token-mean").loss
    b = GSPO(eps_low=0.5, eps_high=0.5)(hand_terms(), "token-mean").loss
    s = math.sqrt(2.0)
    assert close(a, -(2 * s - 4 * s) / 4) and close(b, s / 2)  # same here (equal lengths); the mode is honoured
    terms = hand_terms(mask=T([[True, True], [True, False]]))
    a = GSPO(eps_low=1.0, eps_high=100.0, agg=None)(terms, "token-mean").loss
    b = GSPO(eps_low=1.0, eps_high=100.0)(terms, "token-mean").loss
    assert not close(a, b)


def test_m2po_by_hand():
    # (log r)^2 = [ln2^2, 0, ln2^2, (2 ln2)^2] = [0.4805, 0, 0.4805, 1.9218]; mean 0.7207 > 0.5.
    # Ascending running means: 0, 0.2402, 0.3203, 0.7207 -> keep 3, drop the (2 ln2)^2 token.
    # objective M r A: 2*1 + 1*1 + 0.5*(-2) + 0 = 2 -> loss -2 / 4 = -0.5
    loss, grad, m = loss_and_grad(M2PO(threshold=0.5), hand_terms())
    assert close(loss, -0.5)
    assert close(grad, [[-0.5, -0.25], [0.25, 0.0]])  # d(r A)/d logp = r A
    assert m["mask_frac"] == pytest.approx(0.25)
    assert m["m2_before"] == pytest.approx((3 * LN2**2 + 4 * LN2**2 - LN2**2) / 4, rel=1e-5)
    assert m["m2_after"] == pytest.approx(2 * LN2**2 / 3, rel=1e-5)
    # threshold 0.04 (paper): only the log r = 0 token survives: loss -(1 * 1) / 4
    loss, _, m = loss_and_grad(M2PO(), hand_terms())
    assert close(loss, -0.25) and m["mask_frac"] == pytest.approx(0.75) and m["m2_after"] == 0.0


def test_m2po_trust_region_only_by_hand():
    # eligible: A > 0 & log r > 0 -> (0,0); A < 0 & log r < 0 -> (1,0); both have ln2^2 = 0.48 > 0.04
    # -> both dropped. objective: 0 + 1*1 + 0 + 4*(-2) = -7 -> loss 1.75
    loss, _, m = loss_and_grad(M2PO(trust_region_only=True), hand_terms())
    assert close(loss, 1.75) and m["mask_frac"] == pytest.approx(0.5)


def test_m2po_mask_keeps_the_fewest_rejections():
    sq = T([0.01, 0.5, 0.02, 0.03, 0.2])
    rejected = m2po_mask(sq, torch.ones(5, dtype=torch.bool), 0.05)
    # kept {0.01, 0.02, 0.03, 0.2}: mean 0.065 > 0.05; kept {0.01, 0.02, 0.03}: 0.02 <= 0.05
    assert rejected.tolist() == [False, True, False, False, True]
    assert not m2po_mask(sq, torch.zeros(5, dtype=torch.bool), 0.05).any()


def test_metrics_fractions_count_units_of_the_level():
    terms = hand_terms(mask=T([[True, False], [True, True]]))
    _, _, m = loss_and_grad(TIS(c=1.5), terms)
    assert m["clip_frac"] == pytest.approx(2 / 3)  # r = 2 and r = 4 among the 3 valid tokens


# ---- identities ----------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_with_infinite_c_is_is(level):
    terms = random_terms(seed=1, scale=1.0)
    a = loss_and_grad(TIS(c=math.inf, level=level), terms)
    b = loss_and_grad(IS(level=level), terms)
    assert a[0] == b[0] and torch.equal(a[1], b[1])
    assert build("tis(c=inf)").surrogate.c == math.inf


@pytest.mark.parametrize("kw", [{}, {"eps": 0.1}, {"eps_low": 0.1, "eps_high": 0.3, "dual_clip": 3.0}])
def test_decoupled_ppo_with_behaviour_as_proximal_is_ppo(kw):
    terms = random_terms(seed=2, scale=0.8)
    ref = loss_and_grad(PPO(**kw), terms)
    for t in (terms, PolicyTerms(terms.logp, terms.behavior_logp, terms.advantages, terms.mask, proximal_logp=terms.behavior_logp)):
        got = loss_and_grad(DecoupledPPO(**kw), t)
        assert got[0] == pytest.approx(ref[0], abs=1e-7) and torch.allclose(got[1], ref[1], atol=1e-8)


ON_POLICY = [
    "is", "is(level=sequence)", "tis", "tis(level=sequence)", "mis", "mis(level=sequence)", "ppo",
    "ppo(dual_clip=3)", "decoupled_ppo", "cispo", "m2po", "gspo",
]


@pytest.mark.parametrize("spec", ON_POLICY)
@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_on_policy_every_correction_has_pgs_gradient(spec, agg):
    # behaviour = learner: every ratio is 1, nothing is clipped, masked or truncated
    base = random_terms(seed=4)
    terms = PolicyTerms(base.logp, base.logp.detach(), base.advantages, base.mask)
    surrogate = build(spec).surrogate
    if spec == "gspo":
        agg = "seq-mean-token-mean"  # gspo fixes its aggregation
    _, g, m = loss_and_grad(surrogate, terms, agg)
    _, g_pg, _ = loss_and_grad(PG(), terms, agg)
    assert torch.allclose(g, g_pg, atol=1e-7)
    assert m.get("clip_frac", 0.0) == 0.0 and m.get("mask_frac", 0.0) == 0.0


def test_masked_tokens_do_not_count():
    terms = hand_terms(mask=T([[True, False], [True, True]]))
    # pg: -(1/3)[1(-1) + (-2)(-0.5) + (-2)(-1.5)] = -(1/3)(3) = -1
    loss, grad, _ = loss_and_grad(PG(), terms)
    assert close(loss, -1.0) and grad[0, 1] == 0.0
    # sequence ratio of row 0 is now r_00 = 2 only
    loss, _, _ = loss_and_grad(IS(level="sequence"), terms)
    # -(1/3)[2 * 1 * (-1) + 2 * (-2) * (-2)] = -(1/3)(6) = -2
    assert close(loss, -2.0)


def test_pmpo_by_hand():
    """Four sequences of two tokens, advantages [1, -1, -2, 0]: one accepted, two rejected, one tie (n = 4).

    Weights c_i = alpha n / n_a [acc] - (1 - alpha) n / n_r [rej] + beta with alpha = 0.5, beta = 0.1:
    c = [2 + 0.1, -1 + 0.1, -1 + 0.1, 0.1] = [2.1, -0.9, -0.9, 0.1]; log pi(y) = [-3, -1, -4, -2];
    seq-mean-token-sum: loss = -(1/4) sum c_i log pi(y_i) = -(1/4)(-6.3 + 0.9 + 3.6 - 0.2) = 0.5
    = -(alpha mean_acc log pi - (1 - alpha) mean_rej log pi + beta mean log pi) = -(-1.5 + 1.25 - 0.25)."""
    logp = T([[-1.0, -2.0], [-0.5, -0.5], [-3.0, -1.0], [-1.0, -1.0]], requires_grad=True)
    terms = PolicyTerms(logp, logp.detach() + 0.1, T([1.0, -1.0, -2.0, 0.0]), torch.ones(4, 2, dtype=torch.bool))
    loss, grad, m = loss_and_grad(PMPO(), terms, "seq-mean-token-sum")
    assert close(loss, 0.5)
    assert close(grad, -T([2.1, -0.9, -0.9, 0.1])[:, None].expand(4, 2) / 4)  # d loss / d logp_t = -c_i / n
    assert m["accept_frac"] == pytest.approx(0.25) and m["reject_frac"] == pytest.approx(0.5)
    assert m["kl"] == pytest.approx(0.1)  # the k1 estimate mean(log mu - log pi), mu = pi e^0.1 on every token
    # only accepted samples (alpha = 1, beta = 0): maximum likelihood on them; only rejected (alpha = 0): its negative
    loss, grad, _ = loss_and_grad(PMPO(alpha=1.0, beta=0.0), terms, "seq-mean-token-sum")
    assert close(loss, 3.0) and close(grad, T([[-1.0, -1.0], [0, 0], [0, 0], [0, 0]]))
    loss, grad, _ = loss_and_grad(PMPO(alpha=0.0, beta=0.0), terms, "seq-mean-token-sum")
    assert close(loss, -2.5) and close(grad, T([[0, 0], [0.5, 0.5], [0.5, 0.5], [0, 0]]))
    with pytest.raises(ValueError, match="alpha"):
        PMPO(alpha=1.5)


@pytest.mark.parametrize("name", ["c", "lo"])
def test_bad_parameters_raise_clear_errors(name):
    with pytest.raises(ValueError, match=name):
        TIS(**{name: -1.0})
    for bad in (lambda: IS(level="word"), lambda: MIS(lo=2.0, hi=3.0), lambda: PPO(dual_clip=0.5),
                lambda: PPO(eps=0.0), lambda: DecoupledPPO(cap=0.5), lambda: CISPO(eps_low=1.5),
                lambda: GSPO(agg="mean"), lambda: M2PO(threshold=-1.0)):
        with pytest.raises(ValueError):
            bad()
