"""What the trainer measures, on constructed cases: staleness ESS apart from drift, gradient cosines with the kind
of pair (NaN when undefined), zero-advantage groups and dynamic sampling, sampler / learner precision under
autocast, thread budgets, gradient buffers, and the learner and rollout side never sharing a tokenizer."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from llm_scale import config as config_module
from llm_scale.learner import Learner, LearnerSettings, informative_rows, select_rows, step_summary
from llm_scale.trainer import Trainer
from testbed.stabilizers import build
from testbed.stabilizers import fingerprint as fp

from .conftest import tiny_config

pytestmark = pytest.mark.integration


def _linear_learner() -> Learner:
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return Learner(model, build("pg"), opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0), LearnerSettings())


def _set_grads(learner: Learner, scale: float, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    for p in learner.model.parameters():
        p.grad = scale * torch.randn(p.shape, generator=g)
    return [p.grad.clone() for p in learner.model.parameters()]


def test_cosine_pairs_record_their_kind_and_a_zero_gradient_gives_nan():
    learner = _linear_learner()
    _set_grads(learner, 0.0, 0)
    first = learner._grad_stats(same_batch=False)
    assert first["grad_cos_kind"] == "none" and math.isnan(first["grad_cos_prev"])
    _set_grads(learner, 1.0, 1)
    after_zero = learner._grad_stats(same_batch=True)  # the previous gradient was zero: undefined, not 0
    assert after_zero["grad_cos_kind"] == "within" and math.isnan(after_zero["grad_cos_prev"])
    a = torch.cat([g.reshape(-1) for g in _set_grads(learner, 1.0, 1)])  # the same gradient again: cosine 1
    same = learner._grad_stats(same_batch=True)
    assert same["grad_cos_prev"] == pytest.approx(1.0, abs=1e-12)
    b = torch.cat([g.reshape(-1) for g in _set_grads(learner, 2.0, 2)])
    across = learner._grad_stats(same_batch=False)
    assert across["grad_cos_kind"] == "across"
    assert across["grad_cos_prev"] == pytest.approx(float(a @ b / (a.norm() * b.norm())), abs=1e-6)
    assert across["grad_cos_prev"] == pytest.approx(fp.cosine(a, b), abs=1e-6)  # the shared definition


def test_step_summary_means_ignore_undefined_cosines_and_split_by_kind():
    steps = [
        {"kind": "across", "grad_cos_prev": 0.5, "grad_norm_raw": 1.0},
        {"kind": "within", "grad_cos_prev": float("nan"), "grad_norm_raw": 0.0},
        {"kind": "within", "grad_cos_prev": 0.2, "grad_norm_raw": 2.0},
        {"kind": "within", "grad_cos_prev": -0.4, "grad_norm_raw": 3.0},
    ]
    out = step_summary(steps)
    assert out["grad_cos_across"] == 0.5
    assert out["grad_cos_within"] == pytest.approx(-0.1)
    assert out["zero_grad_frac"] == 0.25
    assert math.isnan(step_summary([{"kind": "none", "grad_cos_prev": float("nan"), "grad_norm_raw": 1.0}])["grad_cos_within"])


def test_trainer_logs_each_optimizer_step_with_its_kind(tmp_path):
    """K x N = 2 x 2 steps per update: the first step of each update pairs across batches, the other three within."""
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", steps=3, epochs=2, minibatches=2))
    trainer.run()
    steps = pd.read_csv(tmp_path / "run" / "grad_steps.csv")
    assert list(steps["update"]) == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert list(steps["kind"]) == ["none", "within", "within", "within"] + ["across", "within", "within", "within"] * 2
    rows = pd.read_csv(tmp_path / "run" / "metrics.csv")
    for u in (1, 2):
        across = steps[(steps["update"] == u) & (steps["kind"] == "across")]["grad_cos_prev"]
        within = steps[(steps["update"] == u) & (steps["kind"] == "within")]["grad_cos_prev"]
        assert rows.loc[u, "grad_cos_across"] == pytest.approx(across.mean(), nan_ok=True)
        assert rows.loc[u, "grad_cos_within"] == pytest.approx(within.dropna().mean(), nan_ok=True)
    assert math.isnan(rows.loc[0, "grad_cos_across"])


def test_staleness_ess_is_behaviour_vs_proximal_and_drift_is_within_the_batch(tmp_path):
    """On-policy: staleness ESS 1, drift ESS 1 at the first step only. A shifted behaviour: the closed-form ESS."""
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", epochs=2, minibatches=2, lr=0.05))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    batch.rewards = torch.arange(batch.rewards.numel(), dtype=torch.float32) % 3  # every group informative
    on = trainer.learner.update(batch, 0)
    assert on["staleness_ess"] == pytest.approx(1.0, abs=1e-5)
    assert on["mismatch_abs_max"] < 1e-5
    # the first of the 4 steps is on the proximal policy itself (ESS 1); the policy then moves within the batch
    assert on["drift_ess_min"] < on["drift_ess"] < 1.0 - 1e-4
    assert on["drift_ess"] >= 0.25 + 0.75 * on["drift_ess_min"] - 1e-9
    # behaviour = proximal - c_i on one token of sequence i: sequence weights w_i = exp(c_i)
    batch = trainer.sampler.batch(trainer.model, 1, 1)
    with torch.no_grad():
        proximal, _ = trainer.learner.token_logp(batch, slice(None))
    c = torch.linspace(0.0, 1.0, batch.rewards.numel())
    first = batch.completion_mask.float().argmax(-1)
    shifted = proximal.clone()
    shifted[torch.arange(len(c)), first] -= c
    batch.behavior_logp = torch.where(batch.completion_mask, shifted, batch.behavior_logp)
    batch.versions = torch.full_like(batch.versions, 0)  # sampled one version ago: not a mismatch case
    out = trainer.learner.update(batch, 1)
    w = torch.exp(c.double())
    assert out["staleness_ess"] == pytest.approx(float(w.sum() ** 2 / (len(w) * (w**2).sum())), rel=1e-4)
    assert math.isnan(out["mismatch_abs_max"])  # no token sampled by the learner's current weights


def test_zero_advantage_fraction_and_dynamic_sampling(tmp_path):
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    groups = torch.arange(3).repeat_interleave(4)
    assert informative_rows(rewards, groups).tolist() == [True] * 4 + [False] * 8
    assert fp.zero_advantage_frac(rewards, groups) == pytest.approx(2 / 3)
    with_nan = rewards.clone()
    with_nan[0] = math.nan  # a group with a NaN reward has no usable advantage: counted constant, dropped
    assert not informative_rows(with_nan, groups).any() and fp.zero_advantage_frac(with_nan, groups) == 1.0
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", prompts_per_step=3, dynamic_sampling=True))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    batch.rewards = rewards
    out = trainer.learner.update(batch, 0)
    assert out["zero_adv_frac"] == pytest.approx(2 / 3) and out["dropped_seq_frac"] == pytest.approx(2 / 3)
    assert out["optimizer_steps"] == 1.0
    kept = select_rows(batch, informative_rows(rewards, groups))
    assert kept.completion_ids.shape[0] == 4 and kept.rewards.tolist() == [1.0, 1.0, 0.0, 1.0]
    batch.rewards = torch.zeros(12)  # nothing informative: no optimizer step at all
    none = trainer.learner.update(batch, 1)
    assert none["optimizer_steps"] == 0.0 and none["dropped_seq_frac"] == 1.0


def test_without_dynamic_sampling_zero_advantage_groups_give_a_zero_gradient_and_nan_cosines(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", recipe="grpo", minibatches=2))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    batch.rewards = torch.zeros_like(batch.rewards)
    out = trainer.learner.update(batch, 0)
    assert out["zero_adv_frac"] == 1.0 and out["zero_grad_frac"] == 1.0
    assert math.isnan(out["grad_cos_within"])


def test_sampler_runs_under_the_learners_autocast_and_the_mismatch_is_logged(tmp_path):
    """Sync under bf16 autocast: the sampler in bf16 too; the remaining sampler / learner gap is measured, and it is
    smaller than with a float32 sampler (what the trainer did before both sides shared the precision). Whether the
    bf16 sampler and learner agree exactly depends on the CPU's bf16 kernels, so the matched gap may be zero."""
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", mode="sync", autocast="bf16"))
    assert trainer.sampler.autocast == trainer.rollout_sampler.autocast == "bf16"
    matched = trainer.learner.update(trainer.rollout_sampler.batch(trainer.model, 0, 0), 0)
    trainer.rollout_sampler.autocast = "off"
    mixed = trainer.learner.update(trainer.rollout_sampler.batch(trainer.model, 1, 1), 1)
    assert 0 <= matched["mismatch_abs_mean"] < mixed["mismatch_abs_mean"]
    assert matched["staleness_ess"] <= 1.0 and mixed["staleness_ess"] < 1.0  # the mixed sampler is off-policy: logged


def test_learner_and_rollout_side_have_their_own_sampler_and_tokenizer(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", max_staleness=1, eval_every=1, steps=3))
    assert trainer.rollout_sampler is not trainer.sampler
    assert trainer.rollout_sampler.tokenizer is not trainer.sampler.tokenizer
    a, b = trainer.sampler, trainer.rollout_sampler
    assert a.encode(a.problems(0), 2, torch.device("cpu"))[0].equal(b.encode(b.problems(0), 2, torch.device("cpu"))[0])
    assert trainer.run()["status"] == "finished"  # evaluation in the learner's thread while the worker samples


def test_thread_budget_follows_affinity_and_omp_num_threads(monkeypatch):
    monkeypatch.setattr(config_module.os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert config_module.cpu_budget() == 3
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert config_module.cpu_budget() == 1
    assert config_module.TrainConfig(mode="sync").threads() == (1, 1)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    assert config_module.TrainConfig(mode="thread").threads() == (2, 1)  # 3 cores: 1 for the rollout side, 2 learner


def test_gradient_buffers_are_counted_and_checkpointed(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, recipe="gac", steps=2, checkpoint_every=2))
    assert trainer.gradient_buffers() == 2  # the cosine's and gac's
    summary = trainer.run()
    assert summary["gradient_buffers"] == 2 and summary["device"] == "cpu"
    saved = torch.load(tmp_path / "run" / "checkpoints" / "step_0000002" / "rng.pt", weights_only=True)["prev_grad"]
    assert sum(g.numel() for g in saved) == sum(p.numel() for p in trainer.model.parameters())
    off = Trainer(tiny_config(tmp_path, "off", grad_cosine=False))
    assert off.gradient_buffers() == 0


def test_split_half_gradient_terms_are_the_halves_own_gradients(tmp_path):
    """--grad-split-half: the step's gradient is the sum of its two halves of groups (the one-pass gradient up to
    rounding), grad_half_dot is <half 1, half 2> of the halves' gradients computed on their own (rescaled from each
    half's token mean to the minibatch's), and grad_dot_prev = cos x |g_t| |g_t-1|."""
    import copy

    from llm_scale.learner import split_halves

    cfg = dict(task="arithmetic", steps=2, prompts_per_step=4, group_size=4)
    split = Trainer(tiny_config(tmp_path, "split", grad_split_half=True, **cfg))
    plain = Trainer(tiny_config(tmp_path, "plain", **cfg))
    batch = split.sampler.batch(split.model, 0, 0)
    batch.rewards = torch.arange(batch.rewards.numel(), dtype=torch.float32) % 3  # every group informative
    models = [copy.deepcopy(split.model) for _ in range(2)]
    split.learner.update(batch, 0)
    plain.learner.update(batch, 0)
    g_split = torch.cat([p.grad.reshape(-1) for p in split.model.parameters()])
    g_plain = torch.cat([p.grad.reshape(-1) for p in plain.model.parameters()])
    assert torch.allclose(g_split, g_plain, rtol=1e-5, atol=1e-7)
    halves = []
    for rows, model in zip(split_halves(batch.group_ids), models, strict=True):
        part = select_rows(batch, rows)
        opt = torch.optim.SGD(model.parameters(), lr=0.0)
        learner = Learner(model, build("pg"), opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0),
                          LearnerSettings(grad_cosine=False))
        learner.update(part, 0)
        share = float(part.completion_mask.sum()) / float(batch.completion_mask.sum())  # token-mean weights
        halves.append(share * torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    (step,) = split.learner.steps
    assert step["grad_half_dot"] == pytest.approx(float(halves[0] @ halves[1]), rel=1e-4)
    assert torch.allclose(halves[0] + halves[1], g_split, rtol=1e-4, atol=1e-6)
    assert math.isnan(step["grad_dot_prev"])  # no previous step
    split.learner.update(split.sampler.batch(split.model, 1, 1), 1)
    (second,) = split.learner.steps
    norms = step["grad_norm_raw"] * second["grad_norm_raw"]
    assert second["grad_dot_prev"] == pytest.approx(second["grad_cos_prev"] * norms, rel=1e-6)


def test_split_half_settings_are_checked(tmp_path):
    with pytest.raises(config_module.UsageError, match="grad-split-half"):
        tiny_config(tmp_path, grad_split_half=True, grad_cosine=False).validate()
    with pytest.raises(config_module.UsageError, match="minibatch-split groups"):
        tiny_config(tmp_path, grad_split_half=True, minibatch_split="random").validate()
    with pytest.raises(config_module.UsageError, match="at least 2 prompt groups"):
        tiny_config(tmp_path, grad_split_half=True, prompts_per_step=2, minibatches=2).validate()
