"""The GRPO trainer's features, each against a number that could fail: KL to a reference, entropy bonus,
lr schedule with warm-up, K epochs x N minibatches with the proximal policy, top-k / top-p with
their behaviour log-probs, bf16 autocast, gradient checkpointing, step-0 evaluation, the default logger."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch

from llm_scale.generation import sample_completions, sampling_logprobs
from llm_scale.learner import kl_penalty, lr_multiplier
from llm_scale.trainer import Trainer

from .conftest import tiny_config

pytestmark = pytest.mark.integration


def _run(cfg) -> tuple[Trainer, pd.DataFrame]:
    trainer = Trainer(cfg)
    trainer.run()
    return trainer, pd.read_csv(Path(cfg.out) / "metrics.csv")


# -- KL to a frozen reference ----------------------------------------------------------------------
def test_kl_estimators_closed_form_and_gradients():
    logp = torch.tensor([math.log(0.5), math.log(0.2)], requires_grad=True)
    ref = torch.tensor([math.log(0.25), math.log(0.2)])
    k1 = kl_penalty(logp, ref, "k1")
    k3 = kl_penalty(logp, ref, "k3")
    assert torch.allclose(k1, torch.tensor([math.log(2.0), 0.0]))
    assert torch.allclose(k3, torch.tensor([math.log(2.0) - 0.5, 0.0]))  # exp(r) - r - 1 at r = -log 2
    (grad,) = torch.autograd.grad(k3.sum(), logp)
    assert torch.allclose(grad, torch.tensor([0.5, 0.0]))  # d/dlogp = 1 - exp(ref - logp)
    (grad1,) = torch.autograd.grad(kl_penalty(logp, ref, "k1").sum(), logp)
    assert torch.allclose(grad1, torch.ones(2))
    far = kl_penalty(torch.tensor([-60.0]), torch.tensor([0.0]), "k3")
    assert torch.isfinite(far).all() and far.item() > 1e8  # clamped exp, no overflow
    with pytest.raises(ValueError, match="allowed: k1, k3"):
        kl_penalty(logp, ref, "k2")


def test_kl_is_zero_at_the_reference_and_a_larger_coefficient_keeps_the_policy_closer(tmp_path):
    kw = dict(task="arithmetic", steps=12, mode="sync", lr=3e-3)
    _, weak = _run(tiny_config(tmp_path, "weak", kl_coef=0.01, **kw))
    _, strong = _run(tiny_config(tmp_path, "strong", kl_coef=3.0, **kw))
    assert weak["kl"][0] == 0.0 and strong["kl"][0] == 0.0  # update 0: the policy is the reference
    assert (weak["kl"] >= 0).all() and (weak["kl"][-4:] > 0).all()  # k3 >= 0
    assert strong["kl"][-4:].mean() < 0.5 * weak["kl"][-4:].mean()


# -- entropy bonus -------------------------------------------------------------------------------------
def test_entropy_bonus_raises_entropy_and_nothing_moves_without_it_when_advantages_are_zero(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", lr=1e-3, temperature=0.2))  # sharp: room to rise
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    batch.rewards.zero_()  # every group advantage is exactly 0: only the entropy term can move the weights
    learner, m = trainer.learner, batch.completion_mask

    def entropy() -> float:
        with torch.no_grad():
            _, ent = learner.token_logp(batch, slice(None), entropy=True)
        return float(ent[m].mean())

    # the entropy is that of the tempered softmax, computed by hand from the logits
    with torch.no_grad():
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
        attn = torch.cat([batch.prompt_mask.long(), m.long()], 1)
        from llm_scale.generation import position_ids

        logits = trainer.model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
        p = torch.softmax(logits[:, -batch.completion_ids.shape[1] - 1 : -1].float() / 0.2, -1)
        by_hand = -(p * p.log()).sum(-1)[m].mean()
    assert entropy() == pytest.approx(float(by_hand), rel=1e-5)

    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    metrics = learner.update(batch, 0)  # entropy_coef = 0: zero gradient, AdamW moves nothing
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
    assert "entropy" not in metrics
    learner.s.entropy_coef = 0.1
    values = [entropy()]
    for step in range(1, 5):
        metrics = learner.update(batch, step)
        values.append(entropy())
    assert all(b > a for a, b in itertools.pairwise(values)) and values[-1] > values[0] + 0.1
    assert metrics["entropy"] == pytest.approx(values[-2], rel=1e-4)  # logged: the entropy at that step's forward


# -- learning-rate schedule ----------------------------------------------------------------------------
def test_lr_schedule_closed_form():
    f = lambda t, s: lr_multiplier(t, total=20, warmup=4, schedule=s, min_ratio=0.1)  # noqa: E731
    assert [f(t, "cosine") for t in range(4)] == [0.2, 0.4, 0.6, 0.8]
    assert f(4, "cosine") == 1.0 and f(4, "linear") == 1.0
    assert f(12, "cosine") == pytest.approx(0.55)  # progress 1/2: 0.1 + 0.9 * (1 + cos(pi/2)) / 2
    assert f(12, "linear") == pytest.approx(0.55)
    assert f(8, "linear") == pytest.approx(1 - 0.9 * 0.25)
    assert f(8, "cosine") == pytest.approx(0.1 + 0.9 * (1 + math.cos(math.pi / 4)) / 2)
    assert f(15, "constant") == 1.0


def test_logged_lr_follows_warmup_then_linear_decay(tmp_path):
    _, rows = _run(tiny_config(tmp_path, steps=8, lr=2e-3, warmup_steps=3, lr_schedule="linear", min_lr_ratio=0.25))
    expected = [2e-3 * lr_multiplier(t, total=8, warmup=3, schedule="linear", min_ratio=0.25) for t in range(8)]
    assert rows["lr"].tolist() == pytest.approx(expected, rel=1e-12)
    assert rows["lr"][0] == pytest.approx(2e-3 / 4) and rows["lr"][3] == pytest.approx(2e-3)


# -- K epochs x N minibatches: behaviour, proximal and current policies --------------------------------
def test_epochs_minibatches_use_the_policy_at_the_start_of_the_batch_as_proximal(tmp_path, monkeypatch):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", steps=3, max_staleness=1, lag_policy="fixed",
                                  epochs=2, minibatches=2, recipe="decoupled_ppo", lr=1e-2,
                                  entropy_coef=0.01))  # fmt: skip  (the entropy term moves the policy at every step)
    calls = []
    real = trainer.recipe.loss

    def spy(terms, agg, **kw):
        calls.append((terms.logp.detach().clone(), terms.behavior_logp.clone(), terms.proximal_logp.clone(), terms.mask))
        return real(terms, agg, **kw)

    monkeypatch.setattr(trainer.recipe, "loss", spy)
    trainer.run()
    assert len(calls) == 3 * 2 * 2  # updates x epochs x minibatches, one forward each
    for update in range(3):
        steps = calls[4 * update : 4 * update + 4]
        for i, (logp, behaviour, proximal, mask) in enumerate(steps):
            gap = (logp - proximal)[mask].abs().max()
            if i == 0:  # first optimizer step of the batch: current = proximal
                assert gap < 1e-5
            else:  # the policy has moved since the start of the batch
                assert gap > 1e-4
            stale = (behaviour - proximal)[mask].abs().max()
            assert (stale < 1e-5) if update == 0 else (stale > 1e-4)  # behaviour is one version old after update 0
    # every optimizer step happened: Adam's step count is updates x epochs x minibatches
    assert all(float(s["step"]) == 12 for s in trainer.learner.optimizer.state_dict()["state"].values())
    rows = pd.read_csv(Path(trainer.cfg.out) / "metrics.csv")
    assert (rows["optimizer_steps"] == 4).all()


# -- top-k / top-p ----------------------------------------------------------------------------------------
def test_sampling_logprobs_closed_form():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    p = lambda **kw: sampling_logprobs(logits, 1.0, **kw).exp()[0]  # noqa: E731
    assert torch.allclose(p(), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.allclose(p(top_p=0.75), torch.tensor([0.625, 0.375, 0.0, 0.0]))  # 0.5 + 0.3 reach 0.75
    assert torch.allclose(p(top_p=0.4), torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(p(top_k=3), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)
    assert torch.allclose(p(top_k=3, top_p=0.9), torch.tensor([0.5, 0.3, 0.15, 0.0]) / 0.95)  # 0.526 + 0.316 < 0.9
    assert torch.allclose(p(top_k=3, top_p=0.8), torch.tensor([0.625, 0.375, 0.0, 0.0]))  # top-p of the top-k law
    hot = sampling_logprobs(logits, 2.0, top_k=2).exp()[0]  # T = 2: p ~ sqrt(p)
    s = torch.sqrt(torch.tensor([0.5, 0.3]))
    assert torch.allclose(hot[:2], s / s.sum()) and hot[2:].sum() == 0


def test_top_k_top_p_rollouts_record_the_log_probs_of_the_truncated_distribution(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", temperature=0.8, top_k=3, top_p=0.9, prompts_per_step=8))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    m = batch.completion_mask
    with torch.no_grad():
        ids = torch.cat([batch.prompt_ids, batch.completion_ids], 1)
        attn = torch.cat([batch.prompt_mask.long(), m.long()], 1)
        from llm_scale.generation import position_ids

        logits = trainer.model(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn)).logits
        logits = logits[:, -batch.completion_ids.shape[1] - 1 : -1].float()
    full = torch.log_softmax(logits / 0.8, -1)
    mu = sampling_logprobs(logits, 0.8, top_k=3, top_p=0.9)
    taken = batch.completion_ids[..., None]
    assert torch.allclose(batch.behavior_logp[m], mu.gather(-1, taken)[..., 0][m], atol=1e-5)
    # every sampled token is inside the kept set, whose mass under the full softmax is the ratio pi / mu
    assert torch.isfinite(mu.gather(-1, taken)[..., 0][m]).all()
    kept_mass = (full.exp() * torch.isfinite(mu)).sum(-1)
    learner_logp, _ = trainer.learner.token_logp(batch, slice(None))
    ratio = (learner_logp.detach() - batch.behavior_logp).exp()
    assert torch.allclose(ratio[m], kept_mass[m], atol=1e-5)
    assert (kept_mass[m] < 1 - 1e-3).any()  # the truncation was real
    # top_k = 1 is greedy: behaviour log-prob exactly 0 and the argmax token
    ids1, keep1, logp1, _ = sample_completions(
        trainer.model, batch.prompt_ids, batch.prompt_mask, max_new_tokens=4, temperature=1.0, top_k=1,
        eos_ids=[], pad_id=0, generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    greedy, _, _, _ = sample_completions(trainer.model, batch.prompt_ids, batch.prompt_mask, max_new_tokens=4,
                                         temperature=0.0, eos_ids=[], pad_id=0)  # fmt: skip
    assert torch.equal(ids1, greedy) and (logp1[keep1] == 0).all()


# -- precision: bf16 autocast and gradient checkpointing -------------------------------------------------
def test_bf16_autocast_computes_in_bfloat16_and_keeps_float32_weights(tmp_path):
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic"))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    m = batch.completion_mask
    with torch.no_grad():
        exact, _ = trainer.learner.token_logp(batch, slice(None))
        trainer.learner.s.autocast = "bf16"
        low, _ = trainer.learner.token_logp(batch, slice(None))
    diff = (exact - low)[m].abs().max()
    assert 1e-4 < diff < 0.1  # bfloat16 rounding (8 bits of mantissa), not float32's
    trainer.learner.update(batch, 0)
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    assert all(s["exp_avg"].dtype == torch.float32 for s in trainer.learner.optimizer.state_dict()["state"].values())


def test_gradient_checkpointing_recomputes_layers_and_gives_the_same_gradients(tmp_path):
    grads, layer_calls = [], []
    for ckpt in (False, True):
        trainer = Trainer(tiny_config(tmp_path, f"c{ckpt}", task="arithmetic", grad_checkpointing=ckpt, kl_coef=0.0))
        batch = trainer.sampler.batch(trainer.model, 0, 0)
        calls = [0]
        layer = trainer.model.model.layers[0].mlp  # inside the checkpointed layer forward
        layer.register_forward_pre_hook(lambda *a, calls=calls: calls.__setitem__(0, calls[0] + 1))
        logp, _ = trainer.learner.token_logp(batch, slice(None))
        (logp * batch.completion_mask).sum().backward()
        grads.append([p.grad.clone() for p in trainer.model.parameters()])
        layer_calls.append(calls[0])
        assert not trainer.model.training  # back in eval mode after the forward
    assert layer_calls == [1, 2]  # with checkpointing the layer runs again in the backward pass
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads, strict=True))


# -- evaluation at step 0 and the default logger ----------------------------------------------------------
def test_evaluation_starts_at_version_0_with_the_untrained_model(tmp_path):
    cfg = tiny_config(tmp_path, task="arithmetic", steps=4, eval_every=2, eval_size=16)
    untrained = Trainer(cfg).evaluate()
    _run(cfg)
    evals = pd.read_csv(Path(cfg.out) / "eval.csv")
    assert list(evals["version"]) == [0, 2, 4]
    assert evals["eval_reward"][0] == untrained


def test_tensorboard_is_the_default_logger_and_the_llm_extra_installs_it(tmp_path):
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    llm_extra = re.search(r"^llm = \[(.*?)\]", text, re.MULTILINE | re.DOTALL).group(1)
    assert "tensorboard" in llm_extra
    pytest.importorskip("tensorboard")
    cfg = tiny_config(tmp_path, steps=5, tensorboard="auto")
    assert type(cfg).__dataclass_fields__["tensorboard"].default == "auto"
    _, rows = _run(cfg)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(cfg.out) / "tensorboard"))
    acc.Reload()
    logged = [e.value for e in acc.Scalars("reward_mean")]
    assert logged == pytest.approx(rows["reward_mean"].tolist(), rel=1e-6)
