"""The TRL plugin inside TRL's own trainer loop: exactly TRL's loss where the recipe reduces to it, every
GRPOConfig setting honoured or refused, gradient transforms, and TRL's experimental asynchronous trainer.

Tiny models built from config (tests/llm/trl_fixtures.py), CPU, nothing downloaded. "Plain GRPO" is
``trl.GRPOTrainer`` itself run with the same seed and config, so both see the same completions.
"""

from __future__ import annotations

import dataclasses
import math
import shutil
import warnings
from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("trl", reason="the TRL plugin needs the 'trl' extra: pip install -e '.[trl]'")

from transformers import TrainerCallback, TrainingArguments
from trl import GRPOConfig, GRPOTrainer

from llm_scale.integrations import hooks
from llm_scale.integrations import trl as plugin
from llm_scale.integrations.trl import StabilizerGRPOTrainer, compose_recipe
from testbed.stabilizers import PolicyTerms, Recipe, build

from . import trl_fixtures as fx

pytestmark = pytest.mark.integration

OFF_POLICY = dict(steps_per_generation=4, num_iterations=2, max_steps=6)  # 1 generation, 8 optimizer steps' worth
LOSS_TYPES = ("dapo", "grpo", "bnpo", "dr_grpo", "luspo")


def _max_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    assert len(a) == len(b) > 0
    return max(float((x - y).abs().max()) for x, y in zip(a, b, strict=True))


def _scale(grads: list[torch.Tensor]) -> float:
    return max(float(g.abs().max()) for g in grads)


# -- the loss equals TRL's wherever the recipe reduces to it --------------------------------------


@pytest.mark.parametrize("accumulation", [1, 2, 4])
@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_ppo_recipe_has_plain_grpo_gradient_for_every_loss_type_and_accumulation(tmp_path, loss_type, accumulation):
    """Same effective batch split into 1, 2 or 4 micro-batches: every optimizer step's gradient equals TRL's.

    Completion lengths vary (1 to 6 tokens), so dapo's window-wide token normaliser differs from a
    per-micro-batch token mean: this failed for accumulation > 1 before the loss followed loss_type.
    """
    plain = fx.train_grads(tmp_path, loss_type=loss_type, gradient_accumulation_steps=accumulation)
    ours = fx.train_grads(tmp_path, StabilizerGRPOTrainer, recipe="ppo", loss_type=loss_type, gradient_accumulation_steps=accumulation)
    assert len(ours) == 2
    assert _max_diff(ours, plain) <= 1e-6 * _scale(plain)


def test_dapo_gradient_does_not_depend_on_the_accumulation_split(tmp_path):
    """TRL's own property, now ours: dapo normalises by the tokens of the whole accumulation window."""
    grads = [fx.train_grads(tmp_path, StabilizerGRPOTrainer, recipe="pg", gradient_accumulation_steps=k)[0] for k in (1, 2, 4)]
    assert float(grads[0].norm()) > 0.1
    for g in grads[1:]:
        assert float((g - grads[0]).abs().max()) <= 1e-5 * float(grads[0].abs().max())


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_off_policy_batches_match_plain_grpo(tmp_path, loss_type, accumulation):
    """steps_per_generation = 4 and num_iterations = 2: 6 optimizer steps on one generation (ratios != 1)."""
    plain = fx.train_grads(tmp_path, loss_type=loss_type, gradient_accumulation_steps=accumulation, **OFF_POLICY)
    trainer, recorder = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="ppo", loss_type=loss_type,
                                   gradient_accumulation_steps=accumulation, **OFF_POLICY)  # fmt: skip
    trainer.train()
    assert len(recorder.grads) == 6
    assert _max_diff(recorder.grads, plain) <= 1e-6 * _scale(plain)
    ratio_max = max(row.get("stabilizer/ratio_max", 1.0) for row in trainer.state.log_history)
    assert ratio_max > 1.01  # the later steps are off-policy: the equality covers the clipped ratio


# -- every honoured setting: our gradient equals TRL's, and the setting changes TRL's -------------

HONOURED = {
    "clip_range": ("ppo", dict(epsilon=0.1, epsilon_high=0.28)),
    "entropy_coef": ("ppo", dict(entropy_coef=0.05)),
    "adaptive_entropy": ("ppo", dict(use_adaptive_entropy=True, entropy_coef=0.02, entropy_target=5.0)),
    "top_entropy_quantile": ("ppo", dict(top_entropy_quantile=0.5)),
    "off_policy_mask": ("ppo", dict(off_policy_mask_threshold=0.001)),
    "mask_truncated": ("ppo", dict(mask_truncated_completions=True)),
    "kl": ("ppo", dict(beta=0.5)),
    "kl_without_bias_correction": ("ppo", dict(beta=0.5, use_bias_correction_kl=False)),
    "gspo_sequence_level": ("gspo", dict(importance_sampling_level="sequence", epsilon=3e-3, epsilon_high=4e-3)),
    "cispo_loss_type": ("cispo", dict(loss_type="cispo", epsilon_high=1.05)),
}


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    """Plain GRPO without any of the settings, per loss type (off-policy loop)."""
    cache: dict[str, list[torch.Tensor]] = {}

    def get(loss_type: str) -> list[torch.Tensor]:
        if loss_type not in cache:
            cache[loss_type] = fx.train_grads(tmp_path_factory.mktemp("base"), loss_type=loss_type, **OFF_POLICY)
        return cache[loss_type]

    return get


@pytest.mark.parametrize("name", list(HONOURED))
@pytest.mark.parametrize("loss_type", ["dapo", "grpo"])
def test_honoured_setting_changes_the_gradient_exactly_as_in_trl(tmp_path, baselines, name, loss_type):
    recipe, settings = HONOURED[name]
    settings = {"loss_type": loss_type, **settings}
    plain = fx.train_grads(tmp_path, **OFF_POLICY, **settings)
    ours = fx.train_grads(tmp_path, StabilizerGRPOTrainer, recipe=recipe, **OFF_POLICY, **settings)
    assert _max_diff(ours, plain) <= 1e-6 * _scale(plain), name
    base = baselines(settings["loss_type"])
    assert _max_diff(plain, base) > 1e-4 * _scale(base), f"{name} does not change TRL's gradient here"


def _batch(trainer: GRPOTrainer, shift: float = 0.0, seed: int = 0) -> dict:
    """One micro-batch TRL prepared, with old_per_token_logps moved by up to ``shift`` nats per token."""
    trainer.model.train()
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    batch = dict(batch)
    if shift:
        ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
        attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
        with torch.no_grad():
            logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, batch["completion_ids"].size(1))
        g = torch.Generator().manual_seed(seed)
        batch["old_per_token_logps"] = logp + shift * (2 * torch.rand(logp.shape, generator=g) - 1)
    return batch


def _loss_and_grad(trainer: GRPOTrainer, batch: dict) -> tuple[float, torch.Tensor]:
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # set by train() otherwise
    trainer.model.train()
    trainer.model.zero_grad()
    loss = trainer._compute_loss(trainer.model, batch)
    loss.backward()
    grad = torch.cat([p.grad.reshape(-1) for p in trainer.model.parameters() if p.grad is not None])
    return float(loss), grad


@pytest.mark.parametrize(
    "settings",
    [dict(delta=2.0), dict(epsilon=0.1, epsilon_high=0.3, delta=1.5), dict(off_policy_mask_threshold=0.05),
     dict(importance_sampling_level="sequence", loss_type="grpo"), dict(loss_type="cispo", epsilon_high=2.0)],
    ids=["delta", "asymmetric+delta", "off_policy_mask", "gspo", "cispo"],
)  # fmt: skip
def test_far_off_policy_batch_matches_trl_loss_and_gradient(tmp_path, settings):
    """Old log-probs moved by up to 2 nats: clipping, dual clip (delta) and masks all bind; still TRL's numbers."""
    recipe = {"sequence": "gspo", "cispo": "cispo"}.get(settings.get("importance_sampling_level", settings.get("loss_type")), "ppo")
    plain, _ = fx.trainer(tmp_path, **settings)
    ours, _ = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe=recipe, **settings)
    batch = _batch(plain, shift=2.0)
    loss_p, grad_p = _loss_and_grad(plain, batch)
    loss_o, grad_o = _loss_and_grad(ours, batch)
    assert math.isclose(loss_o, loss_p, rel_tol=1e-5, abs_tol=1e-7)
    assert float((grad_o - grad_p).abs().max()) <= 1e-5 * float(grad_p.abs().max())
    metrics = ours._metrics["train"]
    assert metrics["stabilizer/ratio_max"][-1] > 2.0  # far off-policy indeed


def test_delta_is_the_dual_clip_and_binds(tmp_path):
    """With delta = 2 the loss of negative-advantage tokens whose ratio exceeds 2 is capped: the loss changes."""
    with_delta, _ = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="ppo", delta=2.0)
    without, _ = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="ppo")
    assert with_delta.recipe.surrogate.dual_clip == 2.0 and without.recipe.surrogate.dual_clip is None
    batch = _batch(with_delta, shift=2.0)
    loss_d, _ = _loss_and_grad(with_delta, batch)
    loss_n, _ = _loss_and_grad(without, batch)
    assert with_delta._metrics["train"]["stabilizer/dual_clip_frac"][-1] > 0.0
    assert loss_d < loss_n - 1e-3


# -- vLLM's correction weights and behaviour log-probs --------------------------------------------


def _as_vllm(trainer: GRPOTrainer, correction: bool = True) -> None:
    """Make a CPU trainer take the vLLM branch of the loss (the batch below carries vLLM's fields)."""
    trainer.use_vllm = True
    trainer.vllm_importance_sampling_correction = correction


def _vllm_batch(trainer: GRPOTrainer) -> dict:
    batch = _batch(trainer, shift=1.0)
    g = torch.Generator().manual_seed(5)
    old = batch["old_per_token_logps"]
    batch["sampling_per_token_logps"] = old + 0.5 * torch.randn(old.shape, generator=g)
    seq = ((old - batch["sampling_per_token_logps"]) * batch["completion_mask"]).sum(-1, keepdim=True)
    batch["importance_sampling_ratio"] = torch.exp(seq).clamp(max=3.0)  # TRL's sequence_truncate weights
    return batch


def test_vllm_correction_weights_multiply_the_recipe_loss_as_in_trl(tmp_path):
    plain, _ = fx.trainer(tmp_path)
    ours, _ = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="ppo")
    batch = _vllm_batch(plain)
    _as_vllm(plain)
    _as_vllm(ours)
    loss_p, grad_p = _loss_and_grad(plain, batch)
    loss_o, grad_o = _loss_and_grad(ours, batch)
    assert math.isclose(loss_o, loss_p, rel_tol=1e-5)
    assert float((grad_o - grad_p).abs().max()) <= 1e-5 * float(grad_p.abs().max())
    ours.vllm_importance_sampling_correction = False
    assert not math.isclose(_loss_and_grad(ours, batch)[0], loss_p, rel_tol=1e-3)  # the weights did matter


def test_sampler_behaviour_uses_vllm_logprobs_in_the_recipe(tmp_path):
    """behavior='sampler': tis's weight is min(pi / mu_vllm, 2); hand-computed with dapo's normaliser."""
    ours, _ = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="tis(c=2)", behavior="sampler")
    batch = _vllm_batch(ours)
    _as_vllm(ours, correction=False)
    loss, _ = _loss_and_grad(ours, batch)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    with torch.no_grad():
        logp, _, _ = ours._get_per_token_logps_and_entropies(ours.model, ids, attn, batch["completion_ids"].size(1))
    mask = batch["completion_mask"].float()
    w = torch.exp(logp - batch["sampling_per_token_logps"]).clamp(max=2.0)
    window = batch["num_items_in_batch"] * ours.args.gradient_accumulation_steps / ours.args.steps_per_generation
    expected = (-(w * batch["advantages"][:, None] * logp) * mask).sum() / window
    assert math.isclose(loss, float(expected), rel_tol=1e-5)


# -- refused settings: one clear line naming the setting ------------------------------------------

REFUSED = [
    ("pg", dict(loss_type="sapo"), "GRPOConfig.loss_type='sapo'"),
    ("pg", dict(loss_type="vespo"), "GRPOConfig.loss_type='vespo'"),
    ("ppo", dict(loss_type="cispo", epsilon_high=5.0), "GRPOConfig.loss_type='cispo'"),
    ("cispo", dict(loss_type="cispo"), "GRPOConfig.epsilon_high=None"),
    ("ppo", dict(importance_sampling_level="sequence"), "GRPOConfig.importance_sampling_level='sequence'"),
    ("dg", dict(epsilon=0.3), "GRPOConfig.epsilon=0.3"),
    ("tis", dict(epsilon_high=0.28), "GRPOConfig.epsilon_high=0.28"),
    ("gspo", dict(delta=3.0), "GRPOConfig.delta=3.0"),
    ("ppo", dict(delta=1.1), "GRPOConfig.delta=1.1"),
    ("ppo(eps=0.1)", dict(epsilon=0.3), "GRPOConfig.epsilon=0.3 conflicts with eps_low=0.1"),
    ("vcpo", dict(), "advantage 'opob'"),
    ("gspo(agg=seq-mean-token-mean)", dict(importance_sampling_level="sequence"), "GRPOConfig.loss_type"),
]


@pytest.mark.parametrize(("recipe", "settings", "message"), REFUSED)
def test_refused_setting_raises_one_line_naming_it(tmp_path, recipe, settings, message):
    with pytest.raises(ValueError) as info:
        StabilizerGRPOTrainer(model=None, reward_funcs=fx.reward, args=fx.config(tmp_path, **settings), recipe=recipe)
    text = str(info.value)
    assert message in text and "\n" not in text


def test_sampler_behaviour_with_trl_correction_is_refused(tmp_path):
    args = SimpleNamespace(use_vllm=True, vllm_importance_sampling_correction=True, loss_type="dapo")
    with pytest.raises(ValueError, match="vllm_importance_sampling_correction=True"):
        compose_recipe("tis", args, behavior="sampler")
    with pytest.raises(ValueError, match="behavior='vllm' is not allowed"):
        compose_recipe("tis", args, behavior="vllm")


def test_agg_argument_is_refused_with_the_loss_type_to_use(tmp_path):
    with pytest.raises(TypeError, match=r"GRPOConfig\.loss_type"):
        StabilizerGRPOTrainer(model=None, args=fx.config(tmp_path), recipe="pg", agg="token-mean")


def test_clip_settings_reach_the_surrogate():
    def surrogate(recipe, **settings):
        args = SimpleNamespace(**{"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": None, "delta": None, **settings})
        return compose_recipe(recipe, args).surrogate

    s = surrogate("ppo", epsilon=0.1, epsilon_high=0.28, delta=4.0)
    assert (s.eps_low, s.eps_high, s.dual_clip) == (0.1, 0.28, 4.0)
    s = surrogate("gspo", epsilon=3e-4, epsilon_high=4e-4)
    assert (s.eps_low, s.eps_high) == (3e-4, 4e-4)
    s = surrogate("cispo", loss_type="cispo", epsilon_high=5.0)
    assert (s.eps_low, s.eps_high) == (1.0, 4.0)
    s = surrogate("ppo(eps=0.1)")  # a clip range written in the recipe wins over TRL's default
    assert (s.lo_eps, s.hi_eps) == (0.1, 0.1)
    s = surrogate("ppo(eps=0.3)", epsilon=0.3)  # both, equal: fine
    assert (s.lo_eps, s.hi_eps) == (0.3, 0.3)
    assert surrogate("dg").eta == 1.0  # no clip notion, TRL at its defaults: untouched
    base = build("pg")
    by_hand = Recipe("my-ppo", base.advantage, build("ppo(eps=0.1, dual_clip=2.0)").surrogate)  # non-defaults: written
    s = compose_recipe(by_hand, SimpleNamespace(loss_type="dapo", epsilon=0.2, epsilon_high=None, delta=None)).surrogate
    assert (s.lo_eps, s.hi_eps, s.dual_clip) == (0.1, 0.1, 2.0)


def test_every_grpo_config_field_is_classified():
    """A new GRPOConfig field in a later TRL fails here until it is honoured, composed or refused."""
    own = {f.name for f in dataclasses.fields(GRPOConfig)} - {f.name for f in dataclasses.fields(TrainingArguments)}
    overridden = {"learning_rate", "logging_steps", "gradient_checkpointing", "bf16", "lr_scheduler_kwargs",
                  "use_liger_kernel", "torch_empty_cache_steps"}  # fmt: skip
    missing = sorted((own | overridden) - set(plugin.GRPO_SETTINGS))
    assert not missing, f"GRPOConfig fields without a classification: {missing}"
    assert all(v.split(":")[0].split(" (")[0] in {"honoured", "composed", "no effect", "no effect on the loss"}
               for v in plugin.GRPO_SETTINGS.values())  # fmt: skip


# -- gradient transforms through TRL's callback ---------------------------------------------------


def test_gradient_transforms_clip_every_step_of_trls_loop(tmp_path):
    """dg + clip_norm(0.05): TRL's loop calls the transform before each of the 4 steps; it clips each."""
    trainer, recorder = fx.trainer(tmp_path, StabilizerGRPOTrainer, recipe="dg+clip_norm(max_norm=0.05)", max_steps=4)
    trainer.train()
    history = trainer.stabilizer_callback.step.history
    assert len(history) == 4 and all(h["clipped"] == 1.0 for h in history)
    norms = [float(h["grad_norm"]) for h in history]
    assert norms == pytest.approx([float(g.norm()) for g in recorder.grads], rel=1e-5)  # the recorder ran first
    logged = [row["stabilizer/grad_norm"] for row in trainer.state.log_history if "stabilizer/grad_norm" in row]
    assert logged == pytest.approx(norms, rel=1e-6)


# -- TRL version discipline -------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["1.15.2", "1.17.0", "2.0.0", "not-a-version"])
def test_unsupported_trl_version_is_refused_in_one_line(monkeypatch, version):
    monkeypatch.setattr(plugin.trl, "__version__", version)
    with pytest.raises(ImportError) as info:
        plugin.check_trl_version()
    message = str(info.value)
    assert "\n" not in message and f"trl {version} is installed" in message and "trl >=1.16.0,<1.17.0" in message


def test_supported_versions_and_the_installed_loss_pass_the_checks():
    for version in ("1.16.0", "1.16.3", "1.16.1.dev0"):
        plugin.check_trl_version(version)
    plugin.check_upstream("GRPOTrainer._compute_loss", GRPOTrainer._compute_loss)  # what the import itself checked


def test_changed_upstream_loss_is_refused_in_one_line(monkeypatch):
    """An upstream edit of the mirrored function, even one line, changes its fingerprint: the import refuses."""

    def edited(self, model, inputs):  # stands in for a TRL release whose _compute_loss differs
        return None

    with pytest.raises(ImportError) as info:
        plugin.check_upstream("GRPOTrainer._compute_loss", edited)
    assert "\n" not in str(info.value) and "is not the code llm_scale.integrations.trl mirrors" in str(info.value)


# -- logged values ---------------------------------------------------------------------------------


def _logged(trainer, key: str) -> list[float]:
    return [row[key] for row in trainer.state.log_history if key in row]


def test_logged_loss_is_grpo_trainers_and_the_surrogate_value_has_its_own_name(tmp_path):
    """ppo recipe, off-policy steps, accumulation 2 and a KL term: TRL's logged ``loss`` is GRPOTrainer's, step
    for step; ``stabilizer/surrogate_loss`` is the surrogate alone (it equals ``loss`` only without the KL term)."""
    settings = dict(gradient_accumulation_steps=2, beta=0.1, **OFF_POLICY)
    plain, _ = fx.trainer(tmp_path / "plain", **settings)
    plain.train()
    ours, _ = fx.trainer(tmp_path / "ours", StabilizerGRPOTrainer, recipe="ppo", **settings)
    ours.train()
    assert len(_logged(plain, "loss")) == 6
    assert _logged(ours, "loss") == pytest.approx(_logged(plain, "loss"), rel=1e-6, abs=1e-9)
    own = _logged(ours, "stabilizer/surrogate_loss")
    assert len(own) == 6 and max(abs(a - b) for a, b in zip(own, _logged(ours, "loss"), strict=True)) > 1e-4

    no_kl, _ = fx.trainer(tmp_path / "dg", StabilizerGRPOTrainer, recipe="dg", max_steps=3)
    no_kl.train()
    assert _logged(no_kl, "stabilizer/surrogate_loss") == pytest.approx(_logged(no_kl, "loss"), rel=1e-5, abs=1e-8)


# -- the recipe's state in TRL's checkpoints -----------------------------------------------------


class _ParamRecorder(TrainerCallback):
    """The flat parameters after every optimizer step, by global step."""

    def __init__(self) -> None:
        self.params: dict[int, torch.Tensor] = {}

    def on_step_end(self, args, state, control, model=None, **kw):
        self.params[state.global_step] = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


GAC_SPEC = "gac(t_low=0.05)"  # step 3's cosine to step 2's gradient is 0.08 on this setup: projected only with the state
SAVING = dict(max_steps=4, save_strategy="steps", save_steps=2)


def _resume(tmp_path, checkpoint, cls=StabilizerGRPOTrainer, **kwargs):
    trainer, _ = fx.trainer(tmp_path, cls, **SAVING, **kwargs)
    after = _ParamRecorder()
    trainer.add_callback(after)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train(resume_from_checkpoint=str(checkpoint))
    return trainer, after, [str(w.message) for w in caught if "stabilizer state" in str(w.message)]


def test_gac_resumes_bit_identically_from_trls_checkpoint(tmp_path):
    """4 steps straight vs 2 steps, checkpoint, a new trainer resumed: steps 3 and 4 give the same parameters, bit for bit.

    Without the saved state the resumed gac has no reference gradient, leaves step 3 unprojected and
    the parameters differ: the equality is the state's doing, not a coincidence of this setup.
    """
    straight, _ = fx.trainer(tmp_path / "a", StabilizerGRPOTrainer, recipe=GAC_SPEC, **SAVING)
    before = _ParamRecorder()
    straight.add_callback(before)
    straight.train()
    projected = [row["stabilizer/projected"] for row in straight.state.log_history if "stabilizer/projected" in row]
    assert projected[2] == 1.0  # step 3 is projected against step 2's gradient
    checkpoint = tmp_path / "a" / "checkpoint-2"
    saved = torch.load(checkpoint / hooks.STATE_FILE, weights_only=True)
    assert saved["spec"] == GAC_SPEC and saved["recipe"]["transforms"][0]["prev"] is not None

    shutil.copytree(checkpoint, tmp_path / "b" / "checkpoint-2")
    resumed, after, warned = _resume(tmp_path / "b", tmp_path / "b" / "checkpoint-2", recipe=GAC_SPEC)
    assert not warned
    for step in (3, 4):
        assert torch.equal(after.params[step], before.params[step]), step
    logged = [row["stabilizer/projected"] for row in resumed.state.log_history if "stabilizer/projected" in row]
    assert logged[-2:] == projected[2:]  # the log history holds the checkpoint's first two steps too

    shutil.copytree(checkpoint, tmp_path / "c" / "checkpoint-2")
    (tmp_path / "c" / "checkpoint-2" / hooks.STATE_FILE).unlink()
    _, lost, warned = _resume(tmp_path / "c", tmp_path / "c" / "checkpoint-2", recipe=GAC_SPEC)
    assert len(warned) == 1 and "restarts its state" in warned[0] and "\n" not in warned[0]
    assert float((lost.params[3] - before.params[3]).abs().max()) > 1e-6


def test_plain_grpo_trainer_with_the_callback_restores_its_state(tmp_path):
    """The callback alone on TRL's own trainer: saved by on_save, found again at on_train_begin of a resumed run."""
    recipe = build(GAC_SPEC)
    trainer, _ = fx.trainer(tmp_path, GRPOTrainer, **SAVING)
    trainer.add_callback(plugin.GradientTransformCallback(recipe))
    trainer.train()
    reference = recipe.state_dict()["transforms"][0]
    fresh = build(GAC_SPEC)
    again, _ = fx.trainer(tmp_path, GRPOTrainer, max_steps=4, save_strategy="no")
    callback = plugin.GradientTransformCallback(fresh)
    again.add_callback(callback)
    again.state.global_step = 4
    callback.on_train_begin(again.args, again.state, again.control)
    restored = fresh.state_dict()["transforms"][0]
    assert callback.restored_from.endswith("checkpoint-4")
    assert restored["run"] == reference["run"] and restored["history"] == reference["history"]
    assert all(torch.equal(a, b) for a, b in zip(restored["prev"], reference["prev"], strict=True))


def test_state_of_another_recipe_is_refused(tmp_path):
    hooks.save_recipe_state(build("gac"), tmp_path)
    with pytest.raises(ValueError, match=r"is for recipe 'gac', not 'gac\(t_low=0.05\)'"):
        hooks.load_recipe_state(build(GAC_SPEC), tmp_path)
    (tmp_path / hooks.STATE_FILE).write_bytes(b"cut off")
    with pytest.raises(ValueError, match="is unreadable"):
        hooks.load_recipe_state(build("gac"), tmp_path)


# -- TRL's asynchronous trainer --------------------------------------------------------------------


class _PackedLM(torch.nn.Module):
    """Stands in for the tree-attention model: log-probs from a bigram table (no FA3 kernel on CPU)."""

    def __init__(self, vocab: int = 12, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(vocab, vocab, generator=g))

    def forward(self, input_ids, position_ids, shift_labels, fused_lm_head, **_):
        logp_all = torch.log_softmax(self.table[input_ids], -1)
        labels = shift_labels.clamp(min=0)
        logp = logp_all.gather(-1, labels[..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return SimpleNamespace(log_probs=torch.where(shift_labels >= 0, logp, 0.0), entropy=entropy)


def _async_inputs(seed: int = 0) -> dict:
    from trl.experimental.async_grpo.async_grpo_trainer import DataCollatorForRollout
    from trl.experimental.async_grpo.packing import TreeRow

    g = torch.Generator().manual_seed(seed)
    row = TreeRow()
    for i, (n_prompt, n_completion) in enumerate([(3, 4), (3, 2), (2, 5), (4, 1)]):
        ids = torch.randint(0, 12, (n_prompt + n_completion,), generator=g)
        mask = torch.cat([torch.zeros(n_prompt, dtype=torch.long), torch.ones(n_completion, dtype=torch.long)])
        old = torch.where(mask.bool(), -2.5 + 1.5 * torch.randn(ids.shape, generator=g), 0.0)
        row.add({"input_ids": ids, "completion_mask": mask, "old_log_probs": old, "advantage": float(i % 2) - 0.3,
                 "group_id": i // 2, "metrics": {}})
    return DataCollatorForRollout(pad_token_id=0)([[row]])


def _async_trainer(cls, recipe=None):
    from accelerate import Accelerator

    t = cls.__new__(cls)  # the real constructor needs a vLLM server; the loss path needs only these
    t.epsilon_low, t.epsilon_high, t.aux_loss_enabled = 0.2, 0.2, False
    t.accelerator = Accelerator(cpu=True)
    t._metrics = {"train": defaultdict(list)}
    t.current_gradient_accumulation_steps = 2
    t._step_forward_tokens = t._step_trained_tokens = t._step_seq_len_weighted = t._step_samples = t._step_forward_s = 0.0
    if recipe is not None:
        t.recipe = compose_recipe(recipe, SimpleNamespace(epsilon=0.2, epsilon_high=None))
        t.stabilizer_callback = plugin.GradientTransformCallback(t.recipe)
    return t


def test_async_trainer_ppo_recipe_equals_trls_async_loss():
    from trl.experimental.async_grpo import AsyncGRPOTrainer

    inputs = _async_inputs()
    grads = []
    for trainer in (_async_trainer(AsyncGRPOTrainer), _async_trainer(plugin.StabilizerAsyncGRPOTrainer, "ppo")):
        model = _PackedLM()
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        grads.append((float(loss), model.table.grad.clone()))
    (loss_trl, g_trl), (loss_ours, g_ours) = grads
    assert math.isclose(loss_ours, loss_trl, rel_tol=1e-6)
    # the surrogate's own value, logged under its own name: the loss without the accumulation scaling
    assert math.isclose(trainer._metrics["train"]["stabilizer/surrogate_loss"][-1], 2 * loss_ours, rel_tol=1e-6)
    assert float((g_ours - g_trl).abs().max()) <= 1e-6 * float(g_trl.abs().max())
    assert float(g_trl.abs().max()) > 1e-3


def test_async_trainer_sequence_recipe_sees_whole_completions():
    """tis at sequence level: each completion's weight is min(prod_t pi/mu, 2) over its own tokens."""
    inputs = _async_inputs(seed=1)
    trainer = _async_trainer(plugin.StabilizerAsyncGRPOTrainer, "tis(level=sequence, c=2)")
    model = _PackedLM()
    loss = trainer.compute_loss(model, inputs)
    sel = inputs["token_index"] >= 0
    out = model(inputs["input_ids"], inputs["position_ids"], inputs["shift_labels"], True)
    logp = out.log_probs.flatten()[inputs["token_index"][sel]]
    seg, old, adv = inputs["segment_id"][sel], inputs["old_log_probs"][sel], inputs["advantages"][sel]
    seq_lr = torch.zeros(int(seg.max()) + 1).index_add_(0, seg, (logp - old).detach())
    w = torch.exp(seq_lr).clamp(max=2.0)[seg]
    expected = (-(w * adv * logp)).sum() / inputs["global_n_tokens"][0] / 2
    assert math.isclose(float(loss), float(expected), rel_tol=1e-5)
    assert 0.0 < float(torch.exp(seq_lr).clamp(max=2.0).min()) < 2.0  # weights genuinely differ per completion


def test_unpack_segments_round_trip():
    seg = torch.tensor([1, 0, 1, 2, 0, 1])
    vals = torch.arange(6.0, requires_grad=True)
    padded, mask, row, col = plugin.unpack_segments(vals, seg, 3)
    assert padded.tolist() == [[1.0, 4.0, 0.0], [0.0, 2.0, 5.0], [3.0, 0.0, 0.0]]
    assert mask.sum() == 6 and torch.equal(padded[row, col], vals.detach())
    padded.sum().backward()
    assert torch.equal(vals.grad, torch.ones(6))


def test_recipe_loss_matches_surrogate_on_hand_terms():
    """The surrogate the trainer calls is the registry's (guards the composition against a copy)."""
    s = compose_recipe("dg(eta=0.5)", SimpleNamespace(loss_type="dapo")).surrogate
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    terms = PolicyTerms(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 2, dtype=torch.bool))
    mat, _, _ = s.per_token(terms)
    w = torch.sigmoid(torch.tensor([1.0, 2.0]) / 0.5)
    assert torch.allclose(mat, -(w * logp.detach()), atol=1e-6)
    assert build("dg(eta=0.5)").surrogate == s


# -- resume from elsewhere, refusals, the host's metric names -------------------------------------


def test_plain_grpo_trainer_resumed_from_a_checkpoint_outside_output_dir_keeps_the_state(tmp_path):
    """The callback on TRL's own trainer, resumed with train(resume_from_checkpoint=<a copy elsewhere>) into an
    output_dir holding no checkpoint: the state comes from the path given to train(), with no warning."""
    recipe = build(GAC_SPEC)
    first, _ = fx.trainer(tmp_path / "a", GRPOTrainer, **SAVING)
    first.add_callback(plugin.GradientTransformCallback(recipe))
    first.train()
    elsewhere = tmp_path / "moved" / "ckpt"
    shutil.copytree(tmp_path / "a" / "checkpoint-2", elsewhere)
    saved = torch.load(elsewhere / hooks.STATE_FILE, weights_only=True)["recipe"]["transforms"][0]

    class Spy(plugin.GradientTransformCallback):
        def restore(self, checkpoint):
            found = super().restore(checkpoint)
            self.at_restore = self.recipe.state_dict()["transforms"][0]  # before any later step moves it on
            return found

    again, _ = fx.trainer(tmp_path / "b", GRPOTrainer, max_steps=3, save_strategy="no")
    callback = Spy(build(GAC_SPEC))
    again.add_callback(callback)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again.train(resume_from_checkpoint=str(elsewhere))
    assert not [w for w in caught if "stabilizer state" in str(w.message)]
    assert callback.restored_from == str(elsewhere)
    restored = callback.at_restore
    assert restored["history"] == saved["history"] and all(
        torch.equal(a, b) for a, b in zip(restored["prev"], saved["prev"], strict=True))


def test_a_transform_that_needs_batch_statistics_is_refused_on_a_plain_trainer_at_construction():
    with pytest.raises(ValueError) as info:
        plugin.GradientTransformCallback(build("gac+ess_lr"))
    assert "ess_lr" in str(info.value) and "StabilizerGRPOTrainer" in str(info.value) and "\n" not in str(info.value)
    assert plugin.GradientTransformCallback(build("gac+ess_lr"), batch_stats=True).active


def test_deepspeed_is_refused_in_one_line_at_train_begin(monkeypatch):
    callback = plugin.GradientTransformCallback(build("gac"))
    state = SimpleNamespace(global_step=0)
    with pytest.raises(ValueError) as info:
        callback.on_train_begin(SimpleNamespace(deepspeed="ds_zero2.json", output_dir="."), state, None)
    assert "DeepSpeed" in str(info.value) and "fsdp_version: 2" in str(info.value) and "\n" not in str(info.value)
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(ValueError, match="DeepSpeed"):
        callback.on_train_begin(SimpleNamespace(deepspeed=None, output_dir="."), state, None)
    monkeypatch.delenv("ACCELERATE_USE_DEEPSPEED")
    callback.on_train_begin(SimpleNamespace(deepspeed=None, output_dir="."), state, None)  # no DeepSpeed: fine


def test_ppo_recipe_logs_trls_clip_ratios_with_trls_values(tmp_path):
    """tb ppo off-policy: TRL's clip_ratio/* (low_mean, high_mean, region_mean, low_min, high_max) are logged, equal
    to GRPOTrainer's."""
    plain, _ = fx.trainer(tmp_path / "plain", **OFF_POLICY)
    plain.train()
    ours, _ = fx.trainer(tmp_path / "ours", StabilizerGRPOTrainer, recipe="ppo", **OFF_POLICY)
    ours.train()
    for key in ("clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min",
                "clip_ratio/high_max"):
        assert _logged(ours, key) and _logged(ours, key) == pytest.approx(_logged(plain, key), abs=1e-7), key
    assert max(_logged(plain, "clip_ratio/region_mean")) > 0  # the clip binds in this setup
