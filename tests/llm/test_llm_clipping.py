"""llm_scale's gradient clipping: on by default at the hosts' value (TRL max_grad_norm, verl actor.grad_clip)."""

from __future__ import annotations

import math

import pytest
import torch

from llm_scale.config import TrainConfig, UsageError
from llm_scale.learner import Learner, LearnerSettings
from testbed.stabilizers import build


def _learner(max_grad_norm: float) -> Learner:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0)
    return Learner(model, build("pg"), opt, sched, LearnerSettings(max_grad_norm=max_grad_norm))


def _grads(learner: Learner, scale: float) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    for p in learner.model.parameters():
        p.grad = scale * torch.randn(p.shape, generator=g)
    return torch.cat([p.grad.reshape(-1) for p in learner.model.parameters()])


def test_the_default_clips_at_the_hosts_value():
    assert TrainConfig().max_grad_norm == 1.0


def test_a_large_gradient_is_scaled_to_the_bound_and_a_small_one_is_untouched():
    learner = _learner(1.0)
    raw = _grads(learner, 10.0)
    assert learner.clip_gradients() == pytest.approx(float(raw.norm()))
    clipped = torch.cat([p.grad.reshape(-1) for p in learner.model.parameters()])
    assert float(clipped.norm()) == pytest.approx(1.0, rel=1e-5)
    assert torch.allclose(clipped, raw / raw.norm(), atol=1e-6)  # the direction is kept
    small = _grads(learner, 1e-3)
    learner.clip_gradients()
    assert torch.equal(torch.cat([p.grad.reshape(-1) for p in learner.model.parameters()]), small)
    off = _learner(0.0)
    big = _grads(off, 10.0)
    assert math.isnan(off.clip_gradients())
    assert torch.equal(torch.cat([p.grad.reshape(-1) for p in off.model.parameters()]), big)


def test_a_negative_bound_is_refused_in_one_line():
    with pytest.raises(UsageError) as info:
        TrainConfig(model="tiny", max_grad_norm=-1.0).validate()
    assert "--max-grad-norm must be a finite number >= 0, got -1.0" in str(info.value) and "\n" not in str(info.value)


def test_the_trainer_hands_the_bound_to_its_learner(tmp_path):
    from llm_scale.trainer import Trainer

    cfg = TrainConfig(model="tiny", task="copy", steps=1, prompts_per_step=2, group_size=2, out=str(tmp_path / "r"),
                      tensorboard="off", progress=False, save_final=False)  # fmt: skip
    assert Trainer(cfg).learner.s.max_grad_norm == 1.0
    cfg = TrainConfig(**{**cfg.__dict__, "max_grad_norm": 0.25, "out": str(tmp_path / "s")})
    assert Trainer(cfg).learner.s.max_grad_norm == 0.25
