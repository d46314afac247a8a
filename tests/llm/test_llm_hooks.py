"""Gradient transforms around a foreign optimizer.step() (the verl and TRL plugins' shared hook logic)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from llm_scale.integrations.hooks import TransformStep
from testbed.stabilizers import BatchStats, GradientTransform, Recipe, TransformResult, build


@dataclass
class FixedScale(GradientTransform):
    name = "fixed_scale_for_test"
    scale: float = 0.5
    seen: list | None = None

    def __call__(self, params, stats: BatchStats) -> TransformResult:
        if self.seen is not None:
            self.seen.append(stats)
        return TransformResult(self.scale, {"scale": self.scale})


def _setup(scale: float):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen: list = []
    base = build("pg")
    recipe = Recipe("test", base.advantage, base.surrogate, [FixedScale(scale, seen)])
    model(torch.ones(1, 3)).sum().backward()
    return model, opt, recipe, seen


def test_lr_is_scaled_for_one_step_and_restored():
    model, opt, recipe, seen = _setup(0.5)
    hooks = TransformStep()
    logp, blogp = torch.zeros(4, 3), torch.log(torch.full((4, 3), 0.5))
    hooks.collect(logp, blogp, torch.ones(4, 3, dtype=torch.bool))
    before = model.weight.detach().clone()
    grad = model.weight.grad.clone()
    hooks.before_step(recipe, opt)
    assert opt.param_groups[0]["lr"] == 0.05
    opt.step()
    hooks.after_step(opt)
    assert opt.param_groups[0]["lr"] == 0.1
    assert torch.allclose(model.weight, before - 0.05 * grad)
    # the statistics of the loss calls reached the transform: sequence log-ratio 3 * log 2 per row
    assert torch.allclose(seen[0].seq_log_ratio, torch.full((4,), 3 * torch.log(torch.tensor(2.0)).item()))
    assert not hooks.pending


def test_scale_zero_makes_the_step_a_no_op_like_recipe_step():
    model, opt, recipe, _ = _setup(0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    before = {k: v.detach().clone() for k, v in model.state_dict().items()}
    hooks = TransformStep()
    hooks.before_step(recipe, opt)
    opt.step()
    hooks.after_step(opt)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert opt.state_dict()["state"] == {}  # Adam's moments and step count untouched
    assert opt.param_groups[0]["lr"] == 0.1
