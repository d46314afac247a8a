"""The Delightful Policy Gradient, its gate (a pure function theory/ imports) and the Kondo gate.

Hand batch: logp = [[-1, -2], [-0.5, -1.5]], A = [1, 1 | -2, -2], so the delight chi = A * (-logp)
is [[1, 2], [-1, -3]].
"""

from __future__ import annotations

import math

import pytest
import torch

from testbed.stabilizers import PolicyTerms, build, delight, delight_gate, kondo_gate
from testbed.stabilizers.dg import DG, Kondo
from testbed.stabilizers.surrogates import PG

from ._terms import hand_terms, loss_and_grad, random_terms


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


CHI = [[1.0, 2.0], [-1.0, -3.0]]


def test_delight_by_hand():
    t = hand_terms()
    assert torch.allclose(delight(t.advantages, t.logp), torch.tensor(CHI))
    # sequence level: chi_i = A_i * (-sum_t logp): 1 * 3 = 3 and -2 * 2 = -4
    assert delight(t.advantages, t.logp, level="sequence").flatten().tolist() == [3.0, -4.0]
    # log-prob clipping to [-1.2, 1.2] first: logp -2 -> -1.2, -1.5 -> -1.2
    clipped = delight(t.advantages, t.logp, logp_clip=1.2)
    assert torch.allclose(clipped, torch.tensor([[1.0, 1.2], [-1.0, -2.4]]))
    # whitening: mean -0.25, deviations [1.25, 2.25, -0.75, -2.75], population var 14.75 / 4
    w = delight(t.advantages, t.logp, whiten=True)
    sd = math.sqrt(14.75 / 4)
    assert torch.allclose(w, torch.tensor([[1.25, 2.25], [-0.75, -2.75]]) / sd, atol=1e-6)
    # masked entries are 0 and excluded from the whitening statistics
    m = torch.tensor([[True, True], [True, False]])
    wm = delight(t.advantages, t.logp, mask=m, whiten=True)
    mean, var = 2 / 3, ((1 - 2 / 3) ** 2 + (2 - 2 / 3) ** 2 + (-1 - 2 / 3) ** 2) / 3
    assert wm[1, 1] == 0.0 and wm[0, 0].item() == pytest.approx((1 - mean) / math.sqrt(var), rel=1e-5)


def test_dg_by_hand():
    # w = sigmoid(chi) = [[s(1), s(2)], [s(-1), s(-3)]]; loss = -(1/4) sum w A logp
    w = [[sig(1), sig(2)], [sig(-1), sig(-3)]]
    expected = -(w[0][0] * 1 * -1 + w[0][1] * 1 * -2 + w[1][0] * -2 * -0.5 + w[1][1] * -2 * -1.5) / 4
    loss, grad, m = loss_and_grad(DG(), hand_terms())
    assert loss == pytest.approx(expected, rel=1e-6)
    # the gate is detached: d loss / d logp = -w A / 4
    assert torch.allclose(grad, -torch.tensor(w, dtype=torch.float64) * torch.tensor([[1.0, 1], [-2, -2]], dtype=torch.float64) / 4, atol=1e-7)
    assert m["gate_mean"] == pytest.approx(sum(map(sum, w)) / 4)
    # eta = 2 halves chi
    loss2, _, _ = loss_and_grad(DG(eta=2.0), hand_terms())
    w2 = [[sig(0.5), sig(1)], [sig(-0.5), sig(-1.5)]]
    assert loss2 == pytest.approx(-(-w2[0][0] - 2 * w2[0][1] + w2[1][0] + 3 * w2[1][1]) / 4, rel=1e-6)


def test_dg_uses_the_exported_gate():
    t = random_terms(seed=5)
    _, grad, _ = loss_and_grad(DG(eta=0.7), t)
    w = delight_gate(t.advantages, t.logp, 0.7, mask=t.mask)
    n = t.mask.sum()
    expected = torch.where(t.mask, -w * t.advantages / n, torch.zeros(()))
    assert torch.allclose(grad.float(), expected, atol=1e-7)


def test_dg_needs_no_behaviour_probabilities():
    t = random_terms(seed=6)
    other = PolicyTerms(t.logp, t.behavior_logp + 5.0, t.advantages, t.mask)
    assert loss_and_grad(DG(), t)[0] == loss_and_grad(DG(), other)[0]


def test_gate_limits():
    chi_adv = torch.tensor([2.0, -3.0, 0.5, -0.25, 1.0])
    logp = torch.full((5,), -1.0)  # chi = A
    # eta -> inf: 1/2 everywhere (plain PG up to the factor 1/2)
    assert torch.equal(delight_gate(chi_adv, logp, math.inf), torch.full((5,), 0.5))
    assert torch.allclose(delight_gate(chi_adv, logp, 1e9), torch.full((5,), 0.5))
    # eta -> 0: the step 1{chi > 0}
    step = (chi_adv > 0).float()
    assert torch.equal(delight_gate(chi_adv, logp, 0.0), step)
    assert torch.allclose(delight_gate(chi_adv, logp, 1e-3), step, atol=1e-30)
    assert delight_gate(torch.zeros(1), torch.full((1,), -1.0), 0.0).item() == 0.5
    # DG with eta = inf has exactly half of PG's gradient
    t = random_terms(seed=7)
    assert torch.allclose(loss_and_grad(DG(eta=math.inf), t)[1], 0.5 * loss_and_grad(PG(), t)[1])


def test_gate_maximises_delight_plus_entropy():
    # w* = argmax_w chi w + eta H(w) on a fine grid equals sigmoid(chi / eta)
    grid = torch.linspace(1e-6, 1 - 1e-6, 200001, dtype=torch.float64)
    H = -(grid * grid.log() + (1 - grid) * (1 - grid).log())
    for chi, eta in [(1.3, 1.0), (-2.0, 0.5), (0.4, 3.0)]:
        best = grid[torch.argmax(chi * grid + eta * H)]
        gate = delight_gate(torch.tensor([chi]), torch.tensor([-1.0]), eta).item()
        assert best.item() == pytest.approx(gate, abs=1e-5)


def test_dg_sequence_level_and_options_through_build():
    r = build("dg(eta=1, level=sequence)")
    loss, _, m = loss_and_grad(r.surrogate, hand_terms())
    g = [sig(3.0), sig(-4.0)]  # sequence chi = [3, -4]
    assert loss == pytest.approx(-(g[0] * 1 * -3 + g[1] * -2 * -2) / 4, rel=1e-6)
    assert m["gate_mean"] == pytest.approx(sum(g) / 2)
    assert build("dg(whiten=true, logp_clip=10)").surrogate.whiten is True


def test_kondo_hard_gate_by_hand():
    # eta = 0 and lambda = median(chi) = median(1, 2, -1, -3) = (-1 + 1) / 2 = 0: keep chi > 0,
    # i.e. the first sequence. loss = -(1/4)[1(-1) + 1(-2)] = 0.75 (a kept token carries A logp)
    loss, grad, m = loss_and_grad(Kondo(eta=0.0, quantile=0.5), hand_terms())
    assert loss == pytest.approx(0.75)
    assert torch.equal(grad, torch.tensor([[-0.25, -0.25], [0.0, 0.0]], dtype=torch.float64))
    assert m["mask_frac"] == 0.5 and m["kondo_price"] == 0.0 and m["gate_mean"] == 0.5
    # quantile 0.75 of (-3, -1, 1, 2): position 2.25 -> 1 + 0.25 (2 - 1) = 1.25; keep only chi = 2
    _, _, m = loss_and_grad(Kondo(eta=0.0, quantile=0.75), hand_terms())
    assert m["kondo_price"] == pytest.approx(1.25) and m["mask_frac"] == 0.75


def test_kondo_gate_is_seeded():
    t = random_terms(B=20, T=10, seed=8)
    a = [loss_and_grad(Kondo(seed=3), t)[0] for _ in range(2)]
    k = Kondo(seed=3)
    b = [loss_and_grad(k, t)[0] for _ in range(2)]
    assert a[0] == a[1] == b[0] and b[1] != b[0]  # same seed, same draws; the stream moves on
    k.reseed(3)
    assert loss_and_grad(k, t)[0] == b[0]
    assert loss_and_grad(Kondo(seed=4), t)[0] != b[0]
    g = torch.Generator().manual_seed(1)
    keep1, _, _ = kondo_gate(t.advantages, t.logp, generator=g, mask=t.mask)
    keep2, _, _ = kondo_gate(t.advantages, t.logp, generator=torch.Generator().manual_seed(1), mask=t.mask)
    assert torch.equal(keep1, keep2) and not keep1[~t.mask].any()


def test_zero_price_kondo_is_dg_in_expectation():
    # quantile=None -> lambda = 0: E[G] = sigmoid(chi / eta), so E[G A grad log pi] = DG's gradient.
    # Replicate the 4 hand tokens 20000 times; the mean gradient per token group matches DG's.
    t = hand_terms()
    n = 20000
    logp = t.logp.detach().float().repeat(n, 1).requires_grad_()
    rep = PolicyTerms(logp, t.behavior_logp.float().repeat(n, 1), t.advantages.float().repeat(n, 1), t.mask.repeat(n, 1))
    loss = Kondo(quantile=None, seed=0)(rep).loss
    (g,) = torch.autograd.grad(loss, logp)
    g_kondo = g.view(n, 2, 2).sum(0)
    _, g_dg, _ = loss_and_grad(DG(), t)
    # per-token std of the estimate <= |A| / 4 / sqrt(n) = 0.5 / 4 / 141 ~ 9e-4; allow 5 sigma
    assert torch.allclose(g_kondo.double(), g_dg, atol=5e-3)


def test_dg_bad_parameters():
    for bad in (lambda: DG(eta=-1.0), lambda: DG(level="x"), lambda: DG(logp_clip=0.0),
                lambda: Kondo(quantile=1.5), lambda: Kondo(eta=-0.1)):
        with pytest.raises(ValueError):
            bad()


def test_kondo_stream_resumes_exactly_through_the_recipe_state():
    """A recipe restored from state_dict draws the same Kondo gates as the uninterrupted one."""
    torch.manual_seed(0)
    logp = torch.log_softmax(torch.randn(64, 1, 4), -1)[..., 0]
    terms = PolicyTerms(logp, logp, torch.randn(64), torch.ones(64, 1))
    a = build("kondo(seed=3)")
    a.loss(terms)
    saved = a.state_dict()
    expected = a.loss(terms).metrics["mask_frac"], a.loss(terms).loss.item()
    b = build("kondo(seed=3)")
    b.load_state_dict(saved)
    got = b.loss(terms).metrics["mask_frac"], b.loss(terms).loss.item()
    fresh = build("kondo(seed=3)").loss(terms).loss.item()
    assert got == expected
    assert fresh != expected[1]  # the stream really advanced, so the restore mattered
