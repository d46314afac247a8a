"""The per-optimizer-step record's numbers (testbed/health.py `step_stats`): closed forms, NaN where undefined,
and each run's row the same number as that run alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from testbed.health import step_stats


def inputs(n: int = 3, b: int = 16, t: int = 4, a: int = 5, p: int = 50, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(n, b, t, a, generator=g)
    logp = torch.log_softmax(logits, -1)[..., 0]
    return {"logits": logits, "logp": logp, "behavior_logp": logp + 0.3 * torch.randn(n, b, t, generator=g),
            "advantages": [torch.where(torch.rand(b, generator=g) < 0.25, 0.0, torch.randn(b, generator=g))
                           for _ in range(n)],
            "grads": torch.randn(n, p, generator=g), "prev_grads": torch.randn(n, p, generator=g)}


def test_each_statistic_is_its_closed_form():
    x = inputs()
    out = step_stats(**x)
    for i in range(3):
        g, h = x["grads"][i].double().numpy(), x["prev_grads"][i].double().numpy()
        assert out["grad_norm"][i].item() == pytest.approx(np.linalg.norm(g), rel=1e-6)
        assert out["grad_cos"][i].item() == pytest.approx(g @ h / np.linalg.norm(g) / np.linalg.norm(h), rel=1e-5)
        log_r = (x["logp"][i] - x["behavior_logp"][i]).double().numpy()
        w = np.exp(log_r.sum(-1))  # sequence ratios
        assert out["ess"][i].item() == pytest.approx(w.sum() ** 2 / (len(w) * (w**2).sum()), rel=1e-5)
        assert out["ratio_max"][i].item() == pytest.approx(np.exp(log_r.max()), rel=1e-5)
        assert out["logratio_q95"][i].item() == pytest.approx(np.quantile(log_r, 0.95), rel=1e-5)
        assert out["zero_adv_frac"][i].item() == pytest.approx(float((x["advantages"][i] == 0).double().mean()))
        prob = torch.softmax(x["logits"][i].double(), -1).numpy()
        assert out["entropy"][i].item() == pytest.approx(-(prob * np.log(prob)).sum(-1).mean(), rel=1e-5)
        assert out["max_prob"][i].item() == pytest.approx(prob.max(-1).mean(), rel=1e-5)
    assert out["zero_grad"].tolist() == [0.0, 0.0, 0.0]


def test_undefined_cosines_are_nan_and_a_zero_gradient_is_flagged():
    x = inputs()
    x["grads"][1] = 0.0
    x["prev_grads"][2] = 0.0
    out = step_stats(**x)
    assert math.isfinite(out["grad_cos"][0].item()) and math.isnan(out["grad_cos"][1].item())
    assert math.isnan(out["grad_cos"][2].item()) and out["zero_grad"].tolist() == [0.0, 1.0, 0.0]
    first = step_stats(**{**x, "prev_grads": None})  # no previous step: undefined, never 0
    assert all(math.isnan(v) for v in first["grad_cos"].tolist())


def test_each_row_is_the_same_number_as_that_run_alone():
    x = inputs(n=4, b=100, t=10, a=2, p=20_000, seed=3)
    together = step_stats(**x)
    for i in range(4):
        alone = step_stats(**{k: v[i : i + 1] for k, v in x.items()})
        for name, value in together.items():
            assert value[i].item() == alone[name][0].item() or (math.isnan(value[i]) and math.isnan(alone[name][0])), name


def test_advantages_of_different_shapes_are_counted_per_run():
    x = inputs(n=2, b=8, t=3)
    x["advantages"] = [torch.tensor([0.0, 1.0, 0.0, 2.0]), torch.zeros(8, 3)]
    assert step_stats(**x)["zero_adv_frac"].tolist() == [0.5, 1.0]
