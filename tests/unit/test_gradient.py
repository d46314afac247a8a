"""Gradient transforms: gac's bands, reference, skip cap and state; ess_lr's formula; clip_norm; Recipe.step."""

from __future__ import annotations

import math

import pytest
import torch

from testbed.stabilizers import BatchStats, PolicyTerms, build
from testbed.stabilizers.gradient import ESSLR, GAC, ClipNorm

T = torch.tensor
NONE = BatchStats()


def param(*values: float) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.zeros(len(values)))


def apply(gac: GAC, params, *grads):
    for p, g in zip(params, grads):
        p.grad = T(g, dtype=torch.float32)
    result = gac(params, NONE)
    return [p.grad.tolist() for p in params], result


# ---- gac -----------------------------------------------------------------------------------------


def test_gac_first_step_has_no_reference():
    p = [param(0, 0, 0)]
    (g,), res = apply(GAC(), p, [1.0, 2.0, 3.0])
    assert g == [1.0, 2.0, 3.0] and res.lr_scale == 1.0
    assert math.isnan(res.metrics.pop("grad_cos_prev"))  # undefined: NaN, never 0
    assert res.metrics == {"projected": 0.0, "skipped": 0.0, "damped": 0.0, "gac_t_low": 0.2, "gac_t_high": 0.9}


def test_gac_dynamic_thresholds_are_running_quantiles_with_the_fixed_values_as_floors():
    """window 4: the fixed bands until 4 cosines are seen, then the running 0.5 / 0.9 quantiles (never below
    t_low / t_high). Gradients in the plane: the cosine to the previous raw gradient is cos(angle step)."""
    gac = GAC(t_low=0.1, t_high=0.2, thresholds="dynamic", window=4, high_action="damp", damp=0.5, max_skips=100)
    p = [param(0, 0)]
    angles = [0.0, 0.3, 0.6, 0.8, 1.0, 1.1, 1.15]  # consecutive steps of 0.3, 0.3, 0.2, 0.2, 0.1, 0.05
    seen = []
    for k, a in enumerate(angles):
        _, res = apply(gac, p, [math.cos(a), math.sin(a)])
        if k == 0:
            continue
        history = [math.cos(x) for x in (0.3, 0.3, 0.2, 0.2, 0.1, 0.05)][: k - 1][-4:]
        if len(history) < 4:
            assert (res.metrics["gac_t_low"], res.metrics["gac_t_high"]) == (0.1, 0.2)
        else:
            srt = sorted(history)
            q50 = (srt[1] + srt[2]) / 2
            q90 = srt[2] + 0.7 * (srt[3] - srt[2])
            assert res.metrics["gac_t_low"] == pytest.approx(q50) and res.metrics["gac_t_high"] == pytest.approx(q90)
        seen.append(res.metrics["grad_cos_prev"])
    assert seen == pytest.approx([math.cos(x) for x in (0.3, 0.3, 0.2, 0.2, 0.1, 0.05)], rel=1e-6)
    # the last cosine (cos 0.05 = 0.9988) is above the running 0.9 quantile: the high-band action (damp)
    assert res.metrics["damped"] == 1.0 and res.lr_scale == 0.5
    state = gac.state_dict()
    again = GAC(t_low=0.1, t_high=0.2, thresholds="dynamic", window=4)
    again.load_state_dict(state)
    assert again.bands() == gac.bands()


def test_gac_leaves_the_gradient_untouched_at_or_below_t_low():
    p = [param(0, 0, 0)]
    gac = GAC(t_low=0.8, t_high=0.9)
    apply(gac, p, [1.0, 0.0, 0.0])
    # cos([1, 1, 0], [1, 0, 0]) = 1 / sqrt 2 = 0.707 <= 0.8: unchanged
    (g,), res = apply(gac, p, [1.0, 1.0, 0.0])
    assert g == [1.0, 1.0, 0.0] and res.metrics["projected"] == 0.0
    assert res.metrics["grad_cos_prev"] == pytest.approx(1 / math.sqrt(2))
    # anti-aligned (cos = -1/sqrt2): unchanged too
    (g,), res = apply(gac, p, [-1.0, 0.0, 0.0])
    assert g == [-1.0, 0.0, 0.0] and res.metrics["grad_cos_prev"] == pytest.approx(-1 / math.sqrt(2))


def test_gac_removes_exactly_the_aligned_component():
    p = [param(0, 0, 0)]
    gac = GAC(t_low=0.5, t_high=0.9)
    apply(gac, p, [2.0, 0.0, 0.0])
    # u = [1, 0, 0]; g = [1, 1, 0]: <g, u> = 1 -> g - 1 * u = [0, 1, 0]
    (g,), res = apply(gac, p, [1.0, 1.0, 0.0])
    assert g == pytest.approx([0.0, 1.0, 0.0]) and res.metrics["projected"] == 1.0 and res.lr_scale == 1.0
    # the reference is now the *raw* [1, 1, 0]: for g = [0, 1, 0], cos = 1/sqrt2 -> projected:
    # u = [1, 1, 0]/sqrt2, <g, u> = 1/sqrt2 -> g - 0.5 [1, 1, 0] = [-0.5, 0.5, 0]. (With the applied
    # [0, 1, 0] as reference the cosine would be 1 and the step skipped.)
    (g,), res = apply(gac, p, [0.0, 1.0, 0.0])
    assert g == pytest.approx([-0.5, 0.5, 0.0]) and res.metrics["grad_cos_prev"] == pytest.approx(1 / math.sqrt(2))


def test_gac_partial_projection_and_orthogonality():
    torch.manual_seed(0)
    p = [param(*range(3)), param(*range(4))]
    gac = GAC(t_low=-1.0, t_high=1.0, alpha=1.0)
    prev = [torch.randn(3), torch.randn(4)]
    apply(gac, p, *[x.tolist() for x in prev])
    cur = [prev[0] + 0.3 * torch.randn(3), prev[1] + 0.3 * torch.randn(4)]
    out, res = apply(gac, p, *[x.tolist() for x in cur])
    assert res.metrics["projected"] == 1.0
    flat_prev, flat_cur, flat_out = torch.cat(prev), torch.cat(cur), torch.cat([T(o) for o in out])
    # global (not per-parameter): the output is orthogonal to the whole previous gradient ...
    assert float(flat_out @ flat_prev) == pytest.approx(0.0, abs=1e-5)
    # ... and differs from the input only along it
    u = flat_prev / flat_prev.norm()
    assert torch.allclose(flat_cur - flat_out, (flat_cur @ u) * u, atol=1e-6)
    # alpha = 0.5 removes half of it
    gac2 = GAC(t_low=-1.0, t_high=1.0, alpha=0.5)
    apply(gac2, p, *[x.tolist() for x in prev])
    out2, _ = apply(gac2, p, *[x.tolist() for x in cur])
    assert torch.allclose(torch.cat([T(o) for o in out2]), flat_cur - 0.5 * (flat_cur @ u) * u, atol=1e-6)


def test_gac_skip_cap():
    p = [param(0, 0)]
    gac = GAC(t_low=0.2, t_high=0.9, max_skips=2)
    seen = []
    for _ in range(7):
        (g,), res = apply(gac, p, [1.0, 0.5])
        seen.append((res.metrics["skipped"], res.metrics["projected"], res.lr_scale, g))
    # step 0: no reference. Then cos = 1 > t_high: skip, skip, then the cap forces a projection
    # (which removes the whole, fully aligned, gradient), and the count restarts.
    assert [s[0] for s in seen] == [0, 1, 1, 0, 1, 1, 0]
    assert [s[1] for s in seen] == [0, 0, 0, 1, 0, 0, 1]
    assert [s[2] for s in seen] == [1, 0, 0, 1, 0, 0, 1]
    assert seen[1][3] == [0.0, 0.0] and seen[3][3] == pytest.approx([0.0, 0.0], abs=1e-7)
    # max_skips = 0 never skips
    gac0 = GAC(max_skips=0)
    apply(gac0, p, [1.0, 0.5])
    _, res = apply(gac0, p, [1.0, 0.5])
    assert res.metrics["skipped"] == 0.0 and res.metrics["projected"] == 1.0


def test_gac_damp_scales_the_step_not_the_gradient():
    p = [param(0, 0)]
    gac = GAC(high_action="damp", damp=0.25)
    apply(gac, p, [1.0, 0.5])
    (g,), res = apply(gac, p, [2.0, 1.0])
    assert g == [2.0, 1.0] and res.lr_scale == 0.25 and res.metrics["damped"] == 1.0 and res.metrics["skipped"] == 0.0


def test_gac_zero_or_overflowing_gradient_has_no_direction():
    p = [param(0, 0)]
    gac = GAC()
    apply(gac, p, [0.0, 0.0])
    (g,), res = apply(gac, p, [1.0, 0.0])
    assert g == [1.0, 0.0] and math.isnan(res.metrics["grad_cos_prev"]) and res.metrics["projected"] == 0.0
    # squares of 1e30 overflow float32: no cosine, gradient left as it is
    (g,), res = apply(gac, p, [1e30, 0.0])
    assert g == [float(torch.tensor(1e30)), 0.0] and math.isnan(res.metrics["grad_cos_prev"])


def test_gac_state_dict_round_trip():
    torch.manual_seed(2)
    p = [param(0, 0, 0)]
    gac = GAC(t_low=0.1, t_high=0.95, max_skips=1)
    grads = [torch.randn(3).tolist() for _ in range(3)] + [[1.0, 1.0, 1.0]] * 3
    for g in grads[:4]:
        apply(gac, p, g)
    state = gac.state_dict()
    clone = GAC(t_low=0.1, t_high=0.95, max_skips=1)
    clone.load_state_dict(state)
    state["prev"][0].add_(100.0)  # the saved state is a copy, not the live buffer
    for g in grads[4:]:
        a, ra = apply(gac, p, g)
        b, rb = apply(clone, p, g)
        assert a == b and ra.metrics == rb.metrics and ra.lr_scale == rb.lr_scale
    assert GAC().state_dict() == {"prev": None, "run": 0, "history": []}


def test_gac_reference_resets_when_parameters_change():
    gac = GAC()
    apply(gac, [param(0, 0)], [1.0, 0.0])
    (g,), res = apply(gac, [param(0, 0, 0)], [1.0, 0.0, 0.0])
    assert math.isnan(res.metrics["grad_cos_prev"]) and g == [1.0, 0.0, 0.0]


def test_gac_bad_parameters():
    for kw in ({"t_low": 0.5, "t_high": 0.4}, {"alpha": 1.5}, {"high_action": "stop"}, {"damp": 2.0}, {"max_skips": -1}, {"max_skips": 1.5}):
        with pytest.raises(ValueError):
            GAC(**kw)


# ---- ess_lr --------------------------------------------------------------------------------------


def test_ess_lr_formula():
    # w = [1, 3]: rho = (1 + 3)^2 / (2 (1 + 9)) = 0.8
    stats = BatchStats(seq_log_ratio=torch.log(T([1.0, 3.0])))
    res = ESSLR()([], stats)
    assert res.metrics["ess"] == pytest.approx(0.8) and res.lr_scale == pytest.approx(math.sqrt(0.8))
    assert ESSLR(rule="linear")([], stats).lr_scale == pytest.approx(0.8)
    assert ESSLR(rho_base=0.5)([], stats).lr_scale == 1.0  # min(1, 0.8 / 0.5)
    assert ESSLR(rho_base=0.9, rule="linear")([], stats).lr_scale == pytest.approx(0.8 / 0.9)
    # sequences without tokens are excluded: w = [1, 3, (masked)]
    masked = BatchStats(seq_log_ratio=torch.log(T([1.0, 3.0, 50.0])), seq_mask=T([True, True, False]))
    assert ESSLR()([], masked).metrics["ess"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="sequence log-ratios"):
        ESSLR()([], BatchStats())
    for kw in ({"rho_base": 0.0}, {"rule": "cubic"}):
        with pytest.raises(ValueError):
            ESSLR(**kw)


def test_ess_lr_scales_only_the_step_through_recipe_step():
    # one parameter, SGD lr 1: the update is -lr * sqrt(rho) * grad; Adam-free, so it is exact
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    w.grad = T([1.0])
    logp = T([[-1.0], [-1.0]])
    terms = PolicyTerms(logp, logp - torch.log(T([[1.0], [3.0]])), T([0.0, 0.0]), torch.ones(2, 1, dtype=torch.bool))
    metrics = build("tis(c=2)+ess_lr").step([w], opt, terms)
    assert w.item() == pytest.approx(-math.sqrt(0.8)) and metrics["lr_scale"] == pytest.approx(math.sqrt(0.8))
    assert opt.param_groups[0]["lr"] == 1.0  # restored after the step


# ---- clip_norm and Recipe.step with gac ------------------------------------------------------------


def test_clip_norm_by_hand():
    p = [param(0, 0)]
    p[0].grad = T([3.0, 4.0])
    res = ClipNorm(max_norm=1.0)(p, NONE)
    assert p[0].grad.tolist() == pytest.approx([0.6, 0.8]) and res.metrics == {"grad_norm": 5.0, "clipped": 1.0}


def test_recipe_step_skips_the_optimizer_on_a_gac_skip():
    w = torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.Adam([w], lr=0.1)
    recipe = build("gac(t_low=0.2, t_high=0.9)")
    for _ in range(2):
        w.grad = T([1.0, 1.0])
        metrics = recipe.step([w], opt)
    # the second gradient repeats the first (cos = 1): skipped, so Adam neither moved nor counted it
    assert metrics["skipped"] == 1.0 and metrics["lr_scale"] == 0.0
    state = opt.state[w]
    assert int(state["step"]) == 1
    # damp: the same repeat gives a 0.25-sized SGD step
    v = torch.nn.Parameter(torch.zeros(2))
    sgd = torch.optim.SGD([v], lr=1.0)
    recipe = build("gac(high_action=damp, damp=0.25)")
    for _ in range(2):
        v.grad = T([1.0, 1.0])
        recipe.step([v], sgd)
    assert v.tolist() == pytest.approx([-1.25, -1.25])  # -1 (first step) - 0.25
    assert recipe.state_dict()["transforms"][0]["run"] == 1
