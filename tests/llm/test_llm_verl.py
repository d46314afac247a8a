"""The verl plugin against verl itself: every tb_* loss equals its verl counterpart under verl's config, through
verl's registry and verl's actor loss (``verl.workers.utils.losses.ppo_loss``) over several optimizer steps; the
ready YAML config passes verl's own loader; a plugin that cannot load says so at start-up.

Skipped when verl is not installed. CI installs verl in a separate environment (.ci/run); by hand:
    python -m venv /tmp/venv-verl && . /tmp/venv-verl/bin/activate && pip install torch==2.13.0 \\
      && pip install -e '.[dev,llm,verl]' && pytest tests/llm/test_llm_verl.py
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import types
import warnings

import pytest
import torch

core_algos = pytest.importorskip(
    "verl.trainer.ppo.core_algos",
    reason="verl is not installed (it pins an older transformers than the main suite; CI runs this file in a "
    "separate environment, see .ci/run)",
)
from tensordict import TensorDict  # noqa: E402
from verl.trainer.config.algorithm import RolloutCorrectionConfig  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402

from llm_scale.integrations import verl as plugin  # noqa: E402
from testbed.stabilizers import SURROGATES, PolicyTerms, build  # noqa: E402

VERL_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def _bypass(**rollout_correction) -> PolicyLossConfig:
    return PolicyLossConfig(loss_mode="bypass_mode", rollout_correction=RolloutCorrectionConfig(loss_type="reinforce", rollout_rs=None, **rollout_correction))


# (tb loss, its stabilizer_params, verl's loss config): equal under the same ActorConfig.
COUNTERPARTS = {
    "ppo": ("tb_ppo", {}, PolicyLossConfig(loss_mode="vanilla")),
    "decoupled_ppo": ("tb_decoupled_ppo", {}, PolicyLossConfig(loss_mode="vanilla")),
    "gspo": ("tb_gspo", {}, PolicyLossConfig(loss_mode="gspo")),
    "cispo": ("tb_cispo", {}, PolicyLossConfig(loss_mode="cispo")),
    "pg": ("tb_pg", {}, PolicyLossConfig(loss_mode="gpg")),
    "tis": ("tb_tis", {"c": 2.0}, _bypass(rollout_is="token", rollout_is_threshold=2.0)),
    "tis_sequence": ("tb_tis", {"c": 8.0, "level": "sequence"}, _bypass(rollout_is="sequence", rollout_is_threshold=8.0)),
    "is": ("tb_is", {}, _bypass(rollout_is="token", rollout_is_threshold=1e30)),
    "mis": ("tb_mis", {"lo": 0.5, "hi": 2.0}, _bypass(rollout_is="token", rollout_is_threshold="0.5_2.0")),
}
NO_COUNTERPART = ("dg", "kondo", "m2po", "pmpo")


def _actor(policy_loss, loss_agg_mode: str = "token-mean", **clip) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp", rollout_n=1, ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4, loss_agg_mode=loss_agg_mode,
        policy_loss=policy_loss, **clip,
    )  # fmt: skip


def _ours(name: str, loss_agg_mode: str = "token-mean", **clip) -> ActorConfig:
    loss_mode, params, _ = COUNTERPARTS.get(name, (f"tb_{name}", {}, None))
    return _actor(plugin.StabilizerPolicyLossConfig(loss_mode=loss_mode, stabilizer_params=params), loss_agg_mode, **clip)


def _theirs(name: str, loss_agg_mode: str = "token-mean", **clip) -> ActorConfig:
    return _actor(COUNTERPARTS[name][2], loss_agg_mode, **clip)


def _batch(seed: int = 0, spread: float = 3.0):
    """Log-ratios up to +-``spread`` nats per token (clipping, dual clip and masks all bind), ragged lengths."""
    g = torch.Generator().manual_seed(seed)
    b, t = 6, 7
    old = torch.randn(b, t, generator=g) * 0.3 - 1.0
    new = (old + spread * (2 * torch.rand(b, t, generator=g) - 1)).requires_grad_()
    adv = torch.randn(b, 1, generator=g).expand(b, t).contiguous()
    mask = torch.ones(b, t, dtype=torch.bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    mask[5, 1:] = False
    return old, new, adv, mask


def _call(config: ActorConfig, old, new, adv, mask, mode: str, weights=None):
    fn = core_algos.get_policy_loss_fn(config.policy_loss.loss_mode)
    loss, _ = fn(old, new, adv, mask, mode, config, weights)
    return loss, torch.autograd.grad(loss, new)[0]


def test_every_surrogate_is_in_verls_registry_with_verls_signature():
    vanilla = inspect.signature(core_algos.get_policy_loss_fn("vanilla"))
    assert set(COUNTERPARTS) | {"tis_sequence"} >= {n for n in SURROGATES if n not in NO_COUNTERPART}
    for name in SURROGATES:
        fn = core_algos.get_policy_loss_fn(f"tb_{name}")
        assert core_algos.POLICY_LOSS_REGISTRY[f"tb_{name}"] is fn
        assert list(inspect.signature(fn).parameters) == list(vanilla.parameters)


@pytest.mark.parametrize("mode", VERL_AGG_MODES)
@pytest.mark.parametrize("name", list(COUNTERPARTS))
def test_tb_loss_equals_verls_counterpart_under_verls_default_config(name, mode):
    """No stabilizer_params beyond the counterpart's own settings: verl's clip_ratio 0.2 and clip_ratio_c 3 reach ours."""
    old, new, adv, mask = _batch(1)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(3)) + 0.5
    if name in ("ppo", "decoupled_ppo"):  # the dual clip (verl's clip_ratio_c = 3) binds on this batch
        assert bool(((adv < 0) & (new - old > 1.1) & mask).any())
    for weights in (None, w) if COUNTERPARTS[name][2].loss_mode != "bypass_mode" else (None,):
        ref, g_ref = _call(_theirs(name, mode), old, new, adv, mask, mode, weights)
        ours, g_ours = _call(_ours(name, mode), old, new, adv, mask, mode, weights)
        assert torch.allclose(ours, ref, rtol=1e-6, atol=1e-7), (name, mode, float(ours), float(ref))
        assert torch.allclose(g_ours, g_ref, rtol=1e-5, atol=1e-7), (name, mode)
        assert float(g_ref.abs().max()) > 1e-3


@pytest.mark.parametrize("name", ["ppo", "decoupled_ppo", "gspo", "cispo"])
def test_tb_loss_follows_verls_clip_settings(name):
    clip = dict(clip_ratio=0.2, clip_ratio_low=0.1, clip_ratio_high=0.28, clip_ratio_c=2.0)
    old, new, adv, mask = _batch(2)
    info = {"dp_size": 2, "batch_num_tokens": 40, "global_batch_size": 9, "loss_scale_factor": 5}
    for mode in ("token-mean", "seq-mean-token-mean"):
        theirs, ours = _theirs(name, mode, **clip), _ours(name, mode, **clip)
        theirs.global_batch_info.update(info)
        ours.global_batch_info.update(info)
        ref, g_ref = _call(theirs, old, new, adv, mask, mode)
        got, g_got = _call(ours, old, new, adv, mask, mode)
        assert torch.allclose(got, ref, rtol=1e-6, atol=1e-7) and torch.allclose(g_got, g_ref, rtol=1e-5, atol=1e-7)
        default, _ = _call(_ours(name, mode), old, new, adv, mask, mode)
        assert not torch.allclose(default, got, rtol=1e-4)  # the settings did change the loss


def test_named_parameters_are_the_deliberate_differences():
    old, new, adv, mask = _batch(4, spread=3.0)
    # ppo without dual clip: verl's vanilla always applies clip_ratio_c; on these ratios the losses differ
    no_dual = _actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_ppo", stabilizer_params={"dual_clip": None}))
    loss_nd, _ = _call(no_dual, old, new, adv, mask, "token-mean")
    loss_v, _ = _call(_theirs("ppo"), old, new, adv, mask, "token-mean")
    mat, used, _ = build("ppo(eps=0.2)").surrogate.per_token(PolicyTerms(new, old, adv, mask))
    assert torch.allclose(loss_nd, torch.where(used, mat, 0.0).sum() / used.sum(), rtol=1e-6)
    assert float(loss_nd) > float(loss_v) + 0.1
    # gspo with the GSPO paper's aggregation whatever loss_agg_mode says
    paper = _actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_gspo", stabilizer_params={"agg": "seq-mean-token-mean"}))
    got, _ = _call(paper, old, new, adv, mask, "token-mean")
    ref, _ = _call(_theirs("gspo", "seq-mean-token-mean"), old, new, adv, mask, "seq-mean-token-mean")
    assert torch.allclose(got, ref, rtol=1e-6)
    # an explicit clip range wins over verl's
    explicit = _actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_ppo", stabilizer_params={"eps": 0.1}))
    got, _ = _call(explicit, old, new, adv, mask, "token-mean")
    ref, _ = _call(_theirs("ppo", clip_ratio=0.1, clip_ratio_low=0.1, clip_ratio_high=0.1), old, new, adv, mask, "token-mean")
    assert torch.allclose(got, ref, rtol=1e-6)


# -- verl's actor loss path over several optimizer steps -----------------------------------------


class _TinyLM(torch.nn.Module):
    def __init__(self, vocab: int = 11, width: int = 16) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.emb = torch.nn.Parameter(torch.randn(vocab, width, generator=g) * 0.5)
        self.head = torch.nn.Parameter(torch.randn(width, vocab, generator=g) * 0.5)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        hidden = torch.tanh(self.emb[ids]).cumsum(1) / torch.arange(1, ids.shape[1] + 1)[None, :, None]
        return torch.log_softmax(hidden @ self.head, -1)


def _rollout(model: _TinyLM, seed: int = 0) -> TensorDict:
    """A mini-batch as verl's actor sees it: prompts, ragged responses, old log-probs of the model, advantages."""
    g = torch.Generator().manual_seed(seed)
    b, p, r = 8, 3, 5
    prompts = torch.randint(1, 11, (b, p), generator=g)
    responses = torch.randint(1, 11, (b, r), generator=g)
    lengths = torch.tensor([5, 3, 4, 1, 5, 2, 5, 3])
    response_mask = (torch.arange(r)[None] < lengths[:, None]).long()
    attention_mask = torch.cat([torch.ones(b, p, dtype=torch.long), response_mask], 1)
    data = TensorDict({"prompts": prompts, "responses": responses, "attention_mask": attention_mask,
                       "response_mask": response_mask}, batch_size=[b])  # fmt: skip
    with torch.no_grad():
        old = _response_logp(model, data)
    # the rollout engine's log-probs differ from the trainer's (mismatch), so the first step is off-policy too
    data["old_log_probs"] = old + 1.5 * torch.randn(old.shape, generator=g)
    data["advantages"] = torch.randn(b, 1, generator=g).expand(b, r).contiguous()
    return data


def _response_logp(model: _TinyLM, data: TensorDict) -> torch.Tensor:
    ids = torch.cat([data["prompts"], data["responses"]], 1)
    lp = model(ids)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    p = data["prompts"].shape[1]
    return lp[:, p - 1 :]


def _flat_logp(model: _TinyLM, data: TensorDict) -> torch.Tensor:
    """The model output as verl's engine hands it to the loss: log-probs of every real token, unpadded."""
    ids = torch.cat([data["prompts"], data["responses"]], 1)
    lp = model(ids)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    lp = torch.cat([lp, torch.zeros(ids.shape[0], 1)], 1)
    return lp[data["attention_mask"].bool()]


def _train(config: ActorConfig, steps: int = 3, micro: int = 4) -> list[torch.Tensor]:
    """verl's actor update (FSDPEngine.forward_backward_batch + optimizer_step) on one process: per optimizer step,
    global token / sequence counts, micro-batches through verl's ppo_loss, gradient clipping at 1, AdamW."""
    model = _TinyLM()
    data = _rollout(model)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(data["response_mask"].sum()), global_batch_size=data.batch_size[0])
    params = []
    for _ in range(steps):
        opt.zero_grad()
        for start in range(0, data.batch_size[0], micro):
            mb = data[start : start + micro]
            loss, _ = ppo_loss(config, {"log_probs": _flat_logp(model, mb)}, mb)
            loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        params.append(torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()]))
    return params


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("name", list(COUNTERPARTS))
def test_actor_loss_path_matches_verls_counterpart_over_optimizer_steps(name, mode):
    """Three optimizer steps of two micro-batches each: the parameters stay equal to verl's own loss's after every step."""
    theirs = _train(_theirs(name, mode))
    ours = _train(_ours(name, mode))
    start = torch.cat([p.detach().reshape(-1) for p in _TinyLM().parameters()])
    for step, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert float((a - b).abs().max()) <= 1e-5, (name, mode, step)
    assert float((theirs[-1] - start).abs().max()) > 0.05  # the model did move


@pytest.mark.parametrize("name", NO_COUNTERPART)
def test_surrogates_without_counterpart_run_verls_actor_path_as_the_recipe(name):
    """First micro-batch of verl's ppo_loss equals the recipe's surrogate aggregated like verl (global token count)."""
    model = _TinyLM()
    data = _rollout(model)
    n_tokens = int(data["response_mask"].sum())
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=n_tokens, global_batch_size=8)
    mb = data[0:4]
    loss, metrics = ppo_loss(_ours(name), {"log_probs": _flat_logp(model, mb)}, mb)
    logp = _response_logp(model, mb)
    mask = mb["response_mask"].bool()
    mat, used, _ = build(name).surrogate.per_token(PolicyTerms(logp, mb["old_log_probs"], mb["advantages"], mask))
    assert torch.allclose(loss, torch.where(used, mat, 0.0).sum() / n_tokens, rtol=1e-5)
    assert any(k.startswith("actor/tb_") for k in metrics)


# -- configuration ----------------------------------------------------------------------------------


def test_ready_yaml_config_passes_verls_own_loader():
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    from llm_scale.integrations.configs import CONFIG_DIR

    overrides = ["actor_rollout_ref.model.path=/nonexistent/model", "trainer.n_gpus_per_node=1", "data.train_batch_size=16",
                 "actor_rollout_ref.actor.ppo_mini_batch_size=16", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
                 "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
                 "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4"]  # fmt: skip
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="tb_dg_gac", overrides=overrides)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert isinstance(actor.policy_loss, plugin.StabilizerPolicyLossConfig)
    assert (actor.policy_loss.loss_mode, actor.policy_loss.stabilizer_params) == ("tb_dg", {"eta": 1.0})
    assert build(actor.policy_loss.gradient_transforms).transforms[0].t_low == 0.1
    assert core_algos.get_policy_loss_fn(actor.policy_loss.loss_mode) is core_algos.POLICY_LOSS_REGISTRY["tb_dg"]
    assert (actor.clip_ratio, actor.clip_ratio_c, actor.loss_agg_mode) == (0.2, 3.0, "token-mean")
    assert cfg.algorithm.adv_estimator == "grpo"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [(dict(loss_mode="tb_nope"), "loss_mode='tb_nope' is not a stabilizer loss"),
     (dict(loss_mode="tb_dg", stabilizer_params={"etaa": 1.0}), "unknown parameter 'etaa'"),
     (dict(loss_mode="vanilla", stabilizer_params={"eta": 1.0}), "needs a tb_* loss_mode"),
     (dict(loss_mode="tb_dg", gradient_transforms="gac(t_lo=0.1)"), "unknown parameter 't_lo'")],
)  # fmt: skip
def test_bad_policy_loss_config_fails_when_built_with_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        plugin.StabilizerPolicyLossConfig(**kwargs)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_plugin_that_cannot_load_says_so_at_verl_start_up():
    """The installed entry point is imported by `import verl`; a broken plugin logs one error line, and the
    tb_* name then raises that cause instead of verl's "Unsupported loss mode"."""
    code = (
        "import sys; sys.modules['llm_scale.integrations.verl'] = None\n"  # the plugin module cannot be imported
        "import verl\n"
        "from verl.trainer.ppo import core_algos\n"
        "try:\n"
        "    core_algos.get_policy_loss_fn('tb_dg')(None, None, None, None)\n"
        "except RuntimeError as exc:\n"
        "    print('RAISED', exc)\n"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_PLUGINS": "auto"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    errors = [line for line in out.stderr.splitlines() if "plugin failed to load" in line]
    assert len(errors) == 1, out.stderr[-2000:]
    assert "tb_* policy losses are unavailable" in errors[0] and "llm_scale.integrations.verl" in errors[0]
    assert "RAISED verl policy loss 'tb_dg' is unavailable" in out.stdout, out.stdout + out.stderr[-2000:]


def test_gradient_transforms_run_as_an_optimizer_pre_hook_only_after_a_tb_loss():
    torch.manual_seed(0)
    actor, critic = torch.nn.Linear(7, 7), torch.nn.Linear(7, 1)
    opt_actor = torch.optim.AdamW(actor.parameters(), lr=0.1)
    opt_critic = torch.optim.AdamW(critic.parameters(), lr=0.1)
    cfg = _actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_pg", gradient_transforms="clip_norm(max_norm=0.001)"))
    old, _, adv, mask = _batch(4)
    old, adv, mask = old[:5], adv[:5], mask[:5]
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
        assert float(plugin._HOOKS.last_metrics["grad_norm"]) > 0.001
        assert opt_actor.param_groups[0]["lr"] == 0.1
    finally:
        plugin._HOOKS.reset()


# -- the stabilizer's state through verl's checkpoint manager --------------------------------------

GAC_SPEC = "gac(t_low=0.0)"  # every positively aligned step is projected: the reference gradient matters from step 2 on


@pytest.fixture
def process_group():
    """A one-process gloo group, as verl's checkpoint managers need one."""
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()
        plugin._HOOKS.reset()
        plugin._HOOKS.recipes.clear()
        plugin._HOOKS.stepped.clear()


def _forget_plugin_state() -> None:
    """What a fresh worker process starts with: no recipes built, no hooks."""
    plugin._HOOKS.reset()
    plugin._HOOKS.recipes.clear()
    plugin._HOOKS.pending_state.clear()
    plugin._HOOKS.stepped.clear()


def _tiny_llama():
    """A one-layer HF Llama with vocabulary 16, the same weights every call."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=16, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=2, max_position_embeddings=16)  # fmt: skip
    return LlamaForCausalLM(cfg)


def _fsdp_actor():
    """A tiny HF causal LM sharded with FSDP2 on CPU, its SGD optimizer and verl's FSDP checkpoint manager."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    model = _tiny_llama()
    fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    return model, opt, FSDPCheckpointManager(model=model, optimizer=opt, lr_scheduler=None, processing_class=None, checkpoint_config=None)


def _actor_step(model, opt, step: int) -> dict[str, float]:
    """One update through the registered tb_pg loss with gac as verl's optimizer hook; step ``step``'s advantages are fixed by its seed."""
    ids = torch.randint(0, 16, (6, 6), generator=torch.Generator().manual_seed(100))  # the same prompts, new advantages
    g = torch.Generator().manual_seed(100 + step)
    logits = model(input_ids=ids).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    adv = torch.randn(6, 1, generator=g).expand(6, 5).contiguous()
    mask = torch.ones(6, 5, dtype=torch.bool)
    cfg = _actor(plugin.StabilizerPolicyLossConfig(loss_mode="tb_pg", gradient_transforms=GAC_SPEC))
    opt.zero_grad()
    loss, _ = core_algos.get_policy_loss_fn("tb_pg")(logp.detach(), logp, adv, mask, "token-mean", cfg, None)
    loss.backward()
    opt.step()
    return dict(plugin._HOOKS.last_metrics)


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().full_tensor().reshape(-1) if hasattr(p, "full_tensor") else p.detach().reshape(-1)
                      for p in model.parameters()])  # fmt: skip


def _assert_resumes_exactly(make, ckpt, metrics, straight) -> None:
    """A fresh worker (``make()`` -> model, optimizer, checkpointer) loads ``ckpt`` and takes steps 3 and 4: GAC acts
    as in the uninterrupted run (``metrics``) and the parameters equal its (``straight``) bit for bit."""
    _forget_plugin_state()
    model, opt, checkpointer = make()
    checkpointer.load_checkpoint(ckpt)
    resumed = []
    for k in (3, 4):
        assert _actor_step(model, opt, k)["projected"] == metrics[k - 1]["projected"]
        resumed.append(_flat(model))
    assert all(torch.equal(a, b) for a, b in zip(resumed, straight, strict=True))


def test_transform_state_round_trips_through_verls_fsdp_checkpoint_manager(tmp_path, process_group, caplog):
    """4 steps straight vs 2 steps, verl's save_checkpoint, a fresh actor loading it with verl's load_checkpoint:
    steps 3 and 4 are bit-identical. The checkpoint without the state file gives one warning line and other steps."""
    model, opt, manager = _fsdp_actor()
    metrics = [_actor_step(model, opt, k) for k in (1, 2)]
    ckpt = str(tmp_path / "global_step_2" / "actor")
    manager.save_checkpoint(ckpt, global_step=2)
    state_file = plugin.state_path(ckpt, 1, 0)
    assert os.path.isfile(state_file) and os.path.isfile(os.path.join(ckpt, "model_world_size_1_rank_0.pt"))
    straight = []
    for k in (3, 4):
        metrics.append(_actor_step(model, opt, k))
        straight.append(_flat(model))
    assert [m["projected"] for m in metrics] == [0.0, 1.0, 1.0, 1.0], [(m["grad_cos_prev"], m["projected"]) for m in metrics]

    _assert_resumes_exactly(_fsdp_actor, ckpt, metrics, straight)

    os.remove(state_file)
    _forget_plugin_state()
    model, opt, manager = _fsdp_actor()
    plugin._HOOKS.recipe(GAC_SPEC)  # the worker built its config (and recipe) before loading, as verl's workers do
    with caplog.at_level("WARNING", logger=plugin.LOGGER.name):
        manager.load_checkpoint(ckpt)
    warned = [r.getMessage() for r in caplog.records if "holds no stabilizer state" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0] and GAC_SPEC in warned[0]
    assert _actor_step(model, opt, 3)["projected"] == 0.0  # no reference gradient: nothing to project against
    assert float((_flat(model) - straight[0]).abs().max()) > 1e-6


class _EngineWithOwnCheckpointer:
    """A stand-in with the checkpoint methods of verl's torchtitan and automodel engines: their own files (in the
    parent of verl's actor directory, as torchtitan's ``step-N``), no ``world_size`` / ``rank`` attributes, and
    the optimizer behind a container (torchtitan's ``OptimizersContainer.optimizers``)."""

    def __init__(self, model, opt) -> None:
        self.module, self.optimizer = model, types.SimpleNamespace(optimizers=[opt])

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None, **kwargs):
        os.makedirs(os.path.dirname(local_path), exist_ok=True)
        torch.save({"model": self.module.state_dict(), "optim": self.optimizer.optimizers[0].state_dict()},
                   os.path.join(os.path.dirname(local_path), f"step-{global_step}.pt"))

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True, **kwargs):
        step = int(os.path.basename(os.path.dirname(local_path)).split("_")[-1])
        state = torch.load(os.path.join(os.path.dirname(local_path), f"step-{step}.pt"), weights_only=True)
        self.module.load_state_dict(state["model"])
        self.optimizer.optimizers[0].load_state_dict(state["optim"])


def test_engines_with_their_own_checkpointers_carry_the_transform_state(tmp_path, process_group):
    """The torchtitan / automodel engines are wrapped like the managers (where importable); through the same
    wrapper, 2 steps + save + a fresh engine's load gives steps 3 and 4 bit-identical to 4 steps straight."""
    assert set(plugin.WIRED_CHECKPOINTS) >= {"FSDPCheckpointManager"}
    assert {name for _, name in plugin.CHECKPOINTING} >= {"TorchTitanEngine", "AutomodelEngine"}
    cls = type("Engine", (_EngineWithOwnCheckpointer,), {})
    plugin.wrap_checkpointing(cls)
    plugin.wrap_checkpointing(cls)  # twice: still one state file per save

    def engine():
        model = _tiny_llama()
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        return model, opt, cls(model, opt)

    model, opt, eng = engine()
    metrics = [_actor_step(model, opt, k) for k in (1, 2)]
    ckpt = str(tmp_path / "global_step_2" / "actor")
    eng.save_checkpoint(ckpt, global_step=2)
    assert os.path.isfile(plugin.state_path(ckpt, 1, 0))
    straight = []
    for k in (3, 4):
        metrics.append(_actor_step(model, opt, k))
        straight.append(_flat(model))
    assert metrics[2]["projected"] == 1.0
    _assert_resumes_exactly(engine, ckpt, metrics, straight)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
def test_logged_pg_loss_is_vanillas_and_the_surrogate_value_has_its_own_name(mode):
    """Through verl's actor loss (ppo_loss): tb_ppo's logged actor/pg_loss is vanilla's, number for number; the
    surrogate's own value is actor/tb_surrogate_loss (equal to it here: no rollout weights in this batch)."""
    model = _TinyLM()
    data = _rollout(model)
    tu.assign_non_tensor(data, dp_size=1, batch_num_tokens=int(data["response_mask"].sum()), global_batch_size=8)
    logged = {}
    for who, config in (("ours", _ours("ppo", mode)), ("theirs", _theirs("ppo", mode))):
        _, metrics = ppo_loss(config, {"log_probs": _flat_logp(model, data[0:4])}, data[0:4])
        logged[who] = {k: float(v.aggregate() if hasattr(v, "aggregate") else v) for k, v in metrics.items() if k in ("actor/pg_loss", "actor/tb_surrogate_loss")}
    assert abs(logged["theirs"]["actor/pg_loss"]) > 1e-3
    assert logged["ours"]["actor/pg_loss"] == pytest.approx(logged["theirs"]["actor/pg_loss"], rel=1e-6)
    assert logged["ours"]["actor/tb_surrogate_loss"] == pytest.approx(logged["ours"]["actor/pg_loss"], rel=1e-6)


def test_surrogate_value_leaves_out_verls_rollout_weights():
    old, new, adv, mask = _batch(1)
    w = torch.rand(old.shape, generator=torch.Generator().manual_seed(3)) + 0.5
    fn = core_algos.get_policy_loss_fn("tb_ppo")
    loss_w, metrics_w = fn(old, new, adv, mask, "token-mean", _ours("ppo"), w)
    loss, _ = fn(old, new, adv, mask, "token-mean", _ours("ppo"), None)
    assert metrics_w["actor/tb_surrogate_loss"] == pytest.approx(float(loss.detach()), rel=1e-6)
    assert abs(float(loss_w.detach()) - float(loss.detach())) > 1e-3
