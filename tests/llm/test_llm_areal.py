"""The AReaL plugin against AReaL's own loss (``areal.utils.functional.ppo_actor_loss_fn``) and its engine hook.
Skipped when AReaL is not installed (it runs beside verl in the separate environment of .ci/run)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

functional = pytest.importorskip("areal.utils.functional", reason="AReaL is not installed")

from areal.api.cli_args import RejectionSamplingConfig  # noqa: E402

from llm_scale.integrations import areal as plugin  # noqa: E402
from testbed.stabilizers import build  # noqa: E402


def _packed(seed: int = 0, n: int = 40):
    """Packed 1D tokens: behaviour (inference) log-probs, a proximal policy and the learner's, spread so that the
    clip, and the behaviour-weight cap of 5, both bind."""
    g = torch.Generator().manual_seed(seed)
    old = torch.randn(n, generator=g) * 0.3 - 1.0
    prox = old + 1.2 * torch.randn(n, generator=g)
    new = (prox + 0.5 * (2 * torch.rand(n, generator=g) - 1)).requires_grad_()
    adv = torch.randn(n, generator=g)
    mask = torch.rand(n, generator=g) > 0.15
    cu = torch.tensor([0, 7, 19, 26, n])  # four sequences of 7, 12, 7 and 14 tokens
    return {"logprobs": old, "prox_logp": prox, "advantages": adv, "loss_mask": mask, "cu_seqlens": cu}, new


def test_decoupled_ppo_is_areals_decoupled_loss_number_for_number():
    data, new = _packed()
    ours = plugin.make_loss_fn(build("decoupled_ppo(cap=5.0)"))(new, torch.zeros_like(new), data)
    (g_ours,) = torch.autograd.grad(ours, new)
    rs = RejectionSamplingConfig(level="token", action="mask", metric="ratio", upper=5.0)
    theirs, stat = functional.ppo_actor_loss_fn(logprobs=new, proximal_logprobs=data["prox_logp"], old_logprobs=data["logprobs"],
                                                advantages=data["advantages"], eps_clip=0.2, loss_mask=data["loss_mask"],
                                                rejection_sampling=rs)  # fmt: skip
    (g_theirs,) = torch.autograd.grad(theirs, new)
    assert torch.allclose(ours, theirs, rtol=1e-6) and torch.allclose(g_ours, g_theirs, atol=1e-7)
    weight = torch.exp(data["prox_logp"] - data["logprobs"])
    assert bool(((weight > 5.0) & data["loss_mask"]).any()) and bool(stat["clip_mask"].any())  # cap and clip bind


def test_ppo_without_a_proximal_policy_is_areals_coupled_loss():
    data, new = _packed(1)
    data.pop("prox_logp")
    ours = plugin.make_loss_fn(build("ppo"))(new, torch.zeros_like(new), data)
    theirs, _ = functional.ppo_actor_loss_fn(logprobs=new, proximal_logprobs=data["logprobs"], old_logprobs=data["logprobs"],
                                             advantages=data["advantages"], eps_clip=0.2, loss_mask=data["loss_mask"])  # fmt: skip
    assert torch.allclose(ours, theirs, rtol=1e-6)


def test_use_stabilizer_replaces_the_actors_loss_keeps_its_weights_and_runs_the_transforms():
    model = torch.nn.Linear(4, 1)
    calls = []

    class Engine:  # the TrainEngine contract: train_batch(input_, loss_fn, loss_weight_fn), an optimizer
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

        def train_batch(self, input_, loss_fn, loss_weight_fn):
            data, new = input_
            loss = loss_fn(new + 0.0 * model(torch.ones(4)).sum(), torch.zeros_like(new), data)
            loss.backward()
            calls.append((float(loss), float(loss_weight_fn(data))))
            self.optimizer.step()
            self.optimizer.zero_grad()
            return {"loss": float(loss)}

    actor = SimpleNamespace(engine=Engine())
    recipe = plugin.use_stabilizer(actor, "decoupled_ppo+gac+ess_lr")
    data, new = _packed(2)
    actor.engine.train_batch(
        (data, new), loss_fn=lambda *a: 1 / 0, loss_weight_fn=lambda d: d["loss_mask"].count_nonzero()
    )
    expected = plugin.make_loss_fn(build("decoupled_ppo"))(new, torch.zeros_like(new), data)
    assert calls == [(pytest.approx(float(expected)), float(data["loss_mask"].count_nonzero()))]
    metrics = actor.stabilizer_step.history[-1]
    assert 0.0 < metrics["ess"] < 1.0 and "grad_cos_prev" in metrics and recipe.spec == "decoupled_ppo+gac+ess_lr"


def test_a_sequence_level_surrogate_is_refused_in_one_line():
    with pytest.raises(ValueError) as info:
        plugin.make_loss_fn(build("gspo"))
    assert "whole sequences" in str(info.value) and "\n" not in str(info.value)


def test_packed_tokens_become_one_row_per_sequence():
    t = torch.arange(1.0, 8.0)
    rows = plugin.unpack(t, torch.tensor([0, 3, 4, 7]))
    assert rows.tolist() == [[1.0, 2.0, 3.0], [4.0, 0.0, 0.0], [5.0, 6.0, 7.0]]
    assert plugin.unpack(t, None).shape == (1, 7)
