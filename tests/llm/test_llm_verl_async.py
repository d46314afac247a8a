"""The verl plugin with verl's asynchronous trainers, its bypass-mode refusal, the hosts' metric names and the
checkpoint wiring that says when it fails. Skipped when verl is not installed (see tests/llm/test_llm_verl.py)."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch

core_algos = pytest.importorskip("verl.trainer.ppo.core_algos", reason="verl is not installed (see .ci/run)")

from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from llm_scale.integrations import verl as plugin  # noqa: E402
from testbed.stabilizers import PolicyTerms, build  # noqa: E402

OVERRIDES = ["actor_rollout_ref.model.path=/nonexistent/model", "trainer.n_gpus_per_node=1", "data.train_batch_size=16",
             "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
             "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"]  # fmt: skip
ASYNC = ("fully_async_decoupled_ppo", "one_step_off_decoupled_ppo")
PRIMARY = {
    "fully_async_decoupled_ppo": ("fully_async_policy", "fully_async_ppo_trainer"),
    "one_step_off_decoupled_ppo": ("one_step_off_policy", "one_step_off_ppo_trainer"),
}


def _compose(name: str, extra: tuple[str, ...] = ()):
    """verl's own async trainer config as the primary one, our group merged in, as the documented command does."""
    import importlib.util
    from pathlib import Path

    from hydra import compose, initialize_config_dir

    from llm_scale.integrations.configs import CONFIG_DIR

    package, primary = PRIMARY[name]
    verl_dir = Path(importlib.util.find_spec("verl").origin).parent
    with initialize_config_dir(config_dir=str(verl_dir / "experimental" / package / "config"), version_base=None):
        return compose(
            config_name=primary,
            overrides=[
                f"hydra.searchpath=[pkg://verl.trainer.config,file://{CONFIG_DIR}]",
                f"+tb_async={name}",
                *OVERRIDES,
                *extra,
            ],
        )


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 7
    prox = torch.randn(b, t, generator=g) * 0.3 - 1.0
    behav = prox + 0.5 * torch.randn(b, t, generator=g)
    new = (prox + 0.6 * (2 * torch.rand(b, t, generator=g) - 1)).requires_grad_()
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    mask = torch.ones(b, t)
    mask[0, 5:] = 0
    return prox, behav, new, adv, mask


@pytest.mark.parametrize("name", ASYNC)
def test_async_config_binds_the_stabilizer_loss_and_recomputed_old_log_probs(name):
    """The worker's actor config holds our loss class and loss mode, verl's registry gives our function; bypass
    mode is off, so verl recomputes old_log_probs (the proximal policy) instead of copying the rollout's, and
    the rollout's log-probs reach the loss as token-level importance weights."""
    from verl.utils.config import omega_conf_to_dataclass

    cfg = _compose(name)
    assert cfg.async_training is not None if "fully_async" in name else True  # verl's async trainer config is the base
    rc = cfg.algorithm.rollout_correction
    assert (rc.bypass_mode, rc.rollout_is, rc.rollout_is_threshold) == (False, "token", 2.0)
    plugin.check_bypass(cfg)  # no refusal
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, plugin.StabilizerPolicyLossConfig)
    assert (
        actor.policy_loss.loss_mode == "tb_decoupled_ppo" and actor.policy_loss.gradient_transforms == "gac(t_low=0.1)"
    )
    assert (
        core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode)
        is core_algos.POLICY_LOSS_REGISTRY["tb_decoupled_ppo"]
    )
    # what the workers get as old_log_probs: the trainer skips the bypass substitution when bypass_mode is false
    assert not (rc and rc.get("bypass_mode", False))  # verl's own test (separation/ray_trainer.py)


@pytest.mark.parametrize("name", ASYNC)
def test_bypass_mode_with_a_stabilizer_loss_is_refused_in_one_line(name):
    cfg = _compose(name, ("algorithm.rollout_correction.bypass_mode=true",))
    with pytest.raises(ValueError) as info:
        plugin.check_bypass(cfg)
    assert "bypass_mode=false" in str(info.value) and "\n" not in str(info.value)
    from tensordict import TensorDict
    from verl import DataProto
    from verl.trainer.ppo import rollout_corr_helper

    prox, behav, _, _, _ = _batch()
    batch = DataProto(
        batch=TensorDict({"old_log_probs": prox.clone(), "rollout_log_probs": behav.clone()}, batch_size=[6])
    )
    from omegaconf import OmegaConf

    ours = OmegaConf.create({"loss_mode": "tb_decoupled_ppo"})
    with pytest.raises(ValueError, match=r"cannot run with algorithm\.rollout_correction\.bypass_mode=true"):
        rollout_corr_helper.apply_bypass_mode(batch, cfg.algorithm.rollout_correction, ours)
    assert torch.equal(batch.batch["old_log_probs"], prox)  # refused before verl touched the batch
    theirs = OmegaConf.create({"loss_mode": "vanilla"})
    rollout_corr_helper.apply_bypass_mode(
        batch, cfg.algorithm.rollout_correction, theirs
    )  # verl's own losses: as before
    assert torch.equal(batch.batch["old_log_probs"], behav) and theirs.loss_mode == "bypass_mode"


def test_decoupled_loss_with_rollout_weights_is_areals_three_policy_objective():
    """old_log_prob = proximal, rollout_is_weights = min(pi_prox / pi_behav, 2): the loss is the clipped objective around
    the proximal policy weighted by the truncated behaviour -> proximal ratio, token by token (AReaL, arXiv 2505.24298)."""
    prox, behav, new, adv, mask = _batch()
    w = torch.exp(prox - behav).clamp(max=2.0)
    actor = ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4,
                        policy_loss=plugin.StabilizerPolicyLossConfig(loss_mode="tb_decoupled_ppo"))  # fmt: skip
    fn = core_algos.get_policy_loss_fn("tb_decoupled_ppo")
    loss, _ = fn(prox, new, adv, mask, "token-mean", actor, w)
    mat, used, _ = build("decoupled_ppo(dual_clip=3.0)").surrogate.per_token(PolicyTerms(new, prox, adv, mask.bool()))
    expected = (torch.where(used, mat, 0.0) * w).sum() / mask.sum()
    assert torch.allclose(loss, expected, rtol=1e-6)


def test_the_hosts_metric_names_carry_verls_own_numbers():
    """tb_ppo logs actor/pg_clipfrac, actor/pg_clipfrac_lower and actor/ppo_kl beside its own, equal to verl's vanilla
    loss's values on the same inputs; every tb_* loss logs actor/ppo_kl."""
    prox, _, new, adv, mask = _batch()
    new = (prox + 3.0 * (2 * torch.rand(prox.shape, generator=torch.Generator().manual_seed(3)) - 1)).requires_grad_()

    def actor(policy_loss):
        return ActorConfig(strategy="fsdp", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4,
                           policy_loss=policy_loss)  # fmt: skip

    _, ours = core_algos.get_policy_loss_fn("tb_ppo")(
        prox, new, adv, mask, "token-mean", actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_ppo")), None
    )
    _, theirs = core_algos.get_policy_loss_fn("vanilla")(
        prox, new, adv, mask, "token-mean", actor(PolicyLossConfig(loss_mode="vanilla")), None
    )
    for key in ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl"):
        value = theirs[key].item() if torch.is_tensor(theirs[key]) else float(theirs[key])
        assert ours[key] == pytest.approx(value, abs=1e-6), key
    assert 0.0 < ours["actor/pg_clipfrac"] < 1.0 and ours["actor/pg_clipfrac_lower"] > 0.0  # both clips bind here
    _, dg = core_algos.get_policy_loss_fn("tb_dg")(
        prox, new, adv, mask, "token-mean", actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_dg")), None
    )
    assert dg["actor/ppo_kl"] == pytest.approx(ours["actor/ppo_kl"]) and "actor/pg_clipfrac" not in dg


def test_a_checkpointer_that_cannot_be_wired_says_so(monkeypatch, caplog):
    monkeypatch.setattr(plugin, "CHECKPOINTING", (("verl.no_such_module", "Manager"), ("json", "NoSuchClass"),
                                                  ("megatron_not_installed_pkg.core", "Engine")))  # fmt: skip
    monkeypatch.setattr(plugin, "WIRING_FAILURES", {})
    with caplog.at_level(logging.DEBUG, logger=plugin.__name__):
        assert plugin.wire_checkpoints() == []
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 2 and all("will NOT be saved" in w and "\n" not in w for w in warned)
    assert set(plugin.WIRING_FAILURES) == {"Manager", "NoSuchClass"}  # an absent optional backend is not a failure
    assert plugin.WIRED_CHECKPOINTS and plugin.GUARDED_BYPASS  # the real ones, at import
    warnings.simplefilter("default")


def test_a_transform_that_needs_batch_statistics_is_refused_without_a_stabilizer_loss():
    with pytest.raises(ValueError) as info:
        plugin.StabilizerPolicyLossConfig(loss_mode="vanilla", gradient_transforms="ess_lr")
    assert "ess_lr needs the batch's sequence log-ratios" in str(info.value) and "\n" not in str(info.value)
    plugin.StabilizerPolicyLossConfig(loss_mode="vanilla", gradient_transforms="gac")  # gac reads gradients only
    plugin.StabilizerPolicyLossConfig(loss_mode="tb_ppo", gradient_transforms="ess_lr")
