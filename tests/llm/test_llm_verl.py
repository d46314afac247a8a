"""The verl plugin, exercised through verl's own registry lookup (skipped when verl is not installed)."""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch

core_algos = pytest.importorskip(
    "verl.trainer.ppo.core_algos",
    reason="verl is not installed. CI leaves it out: verl 0.9 pins transformers<5.11 (the suite runs on 5.2x) and "
    "pulls ray, wandb and ~50 more packages. To run: pip install verl (keeps the CPU torch), then "
    "pytest tests/llm/test_llm_verl.py",
)
from verl.workers.config import ActorConfig  # noqa: E402

from llm_scale.integrations import verl as plugin  # noqa: E402
from testbed.stabilizers import AGG_MODES, SURROGATES, build  # noqa: E402


def _config(loss_mode: str, **policy_loss) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_mini_batch_size=4, ppo_micro_batch_size_per_gpu=2, clip_ratio=0.2,
        policy_loss=plugin.StabilizerPolicyLossConfig(loss_mode=loss_mode, **policy_loss),
    )  # fmt: skip


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, t = 5, 7
    old = torch.randn(b, t, generator=g) * 0.3 - 1.0
    new = (old + torch.randn(b, t, generator=g) * 0.3).requires_grad_()
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    return old, new, adv, mask


def test_every_surrogate_is_in_verls_registry_with_verls_signature():
    vanilla = inspect.signature(core_algos.get_policy_loss_fn("vanilla"))
    for name in SURROGATES:
        fn = core_algos.get_policy_loss_fn(f"tb_{name}")
        assert core_algos.POLICY_LOSS_REGISTRY[f"tb_{name}"] is fn
        assert list(inspect.signature(fn).parameters) == list(vanilla.parameters)
        old, new, adv, mask = _batch()
        loss, metrics = fn(old, new, adv, mask, "token-mean", _config(f"tb_{name}"), None)
        assert loss.dim() == 0 and torch.isfinite(loss)
        assert all(k.startswith("actor/tb_") and isinstance(v, float) for k, v in metrics.items())


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("info", [{}, {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 9, "loss_scale_factor": 5}])
def test_tb_ppo_matches_verls_vanilla_ppo_number_for_number(mode, info):
    """Same clipping (eps 0.2, dual clip 3): loss and gradient equal verl's, with global-batch normalisation."""
    cfg = _config("tb_ppo", stabilizer_params={"eps": 0.2, "dual_clip": 3.0})
    cfg.global_batch_info.update(info)
    old, new, adv, mask = _batch(1)
    ref, _ = core_algos.get_policy_loss_fn("vanilla")(old, new, adv, mask, mode, cfg, None)
    ours, _ = core_algos.get_policy_loss_fn("tb_ppo")(old, new, adv, mask, mode, cfg, None)
    assert torch.allclose(ours, ref, rtol=1e-6, atol=1e-7)
    g_ref, g_ours = (torch.autograd.grad(x, new)[0] for x in (ref, ours))
    assert torch.allclose(g_ours, g_ref, rtol=1e-6, atol=1e-7)


def test_rollout_is_weights_scale_the_per_token_loss_and_params_reach_the_surrogate():
    old, new, adv, mask = _batch(2)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(3)) + 0.5
    fn = core_algos.get_policy_loss_fn("tb_dg")
    cfg = _config("tb_dg", stabilizer_params={"eta": 0.5})
    loss, _ = fn(old, new, adv, mask, "seq-mean-token-sum", cfg, w)
    surrogate = build("dg(eta=0.5)").surrogate
    from testbed.stabilizers import PolicyTerms

    mat, used, _ = surrogate.per_token(PolicyTerms(new, old, adv, mask))
    expected = (torch.where(used, mat * w, 0.0).sum(-1)).sum() / used.any(-1).sum()
    assert torch.allclose(loss, expected, rtol=1e-6)
    assert not torch.allclose(loss, fn(old, new, adv, mask, "seq-mean-token-sum", _config("tb_dg"), w)[0])


def test_gradient_transforms_run_as_an_optimizer_pre_hook_only_after_a_tb_loss():
    torch.manual_seed(0)
    actor, critic = torch.nn.Linear(7, 7), torch.nn.Linear(7, 1)
    opt_actor = torch.optim.AdamW(actor.parameters(), lr=0.1)
    opt_critic = torch.optim.AdamW(critic.parameters(), lr=0.1)
    cfg = _config("tb_pg", gradient_transforms="clip_norm(max_norm=0.001)")
    old, _, adv, mask = _batch(4)
    try:
        logp = torch.log_softmax(actor(torch.randn(5, 7)), -1)
        loss, _ = core_algos.get_policy_loss_fn("tb_pg")(old, logp, adv, mask, "token-mean", cfg, None)
        loss.backward()
        critic(torch.randn(3, 7)).pow(2).sum().mul(100).backward()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            opt_actor.step()
            opt_critic.step()
        actor_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in actor.parameters()))
        critic_norm = torch.sqrt(sum(p.grad.pow(2).sum() for p in critic.parameters()))
        assert float(actor_norm) <= 0.001 * (1 + 1e-4)  # clipped by the hook, before the step
        assert float(critic_norm) > 1.0  # untouched: no tb_* loss fed it
        assert plugin._HOOKS.last_metrics["grad_norm"] > 0.001
        assert opt_actor.param_groups[0]["lr"] == 0.1
    finally:
        plugin._HOOKS.reset()
