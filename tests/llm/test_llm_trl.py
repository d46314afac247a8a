"""The TRL plugin: a GRPOTrainer subclass with a recipe's loss trains a locally built tiny model."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="the TRL plugin needs the 'trl' extra: pip install -e '.[trl]'")

from datasets import Dataset
from trl import GRPOConfig

from llm_scale.integrations.trl import StabilizerGRPOTrainer
from llm_scale.models import char_tokenizer, tiny_model
from llm_scale.tasks import Copy
from testbed.stabilizers import PolicyTerms, build

pytestmark = pytest.mark.integration


def _trainer(tmp_path, recipe: str, steps: int, **overrides) -> StabilizerGRPOTrainer:
    task = Copy()
    tokenizer = char_tokenizer(task.alphabet)
    model = tiny_model(tokenizer, seed=0)
    prompts = [f"{d}=" for d in "0123456789"] * 20

    def reward(completions, prompts, **_):
        return [float(c.strip()[:1] == p[0]) for c, p in zip(completions, prompts, strict=True)]

    args = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=64, num_generations=8, max_completion_length=2,
        max_steps=steps, learning_rate=3e-3, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
        beta=0.0, seed=0, temperature=1.0, disable_tqdm=True, dataloader_num_workers=0, lr_scheduler_type="constant",
    )  # fmt: skip
    args.update(overrides)
    return StabilizerGRPOTrainer(
        model=model, reward_funcs=reward, args=GRPOConfig(**args), train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer, recipe=recipe,
    )  # fmt: skip


def test_loss_is_the_recipes_surrogate(tmp_path):
    """On a batch TRL prepared, the subclass's loss equals recipe.loss on the same per-token terms."""
    trainer = _trainer(tmp_path, "dg(eta=0.5)", steps=1)
    batch = trainer._generate_and_score_completions(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, batch)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1)
    attn = torch.cat([batch["prompt_mask"], batch["completion_mask"]], 1)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, batch["completion_ids"].size(1))
    terms = PolicyTerms(logp, logp.detach(), batch["advantages"], batch["completion_mask"].bool())
    expected = build("dg(eta=0.5)").loss(terms).loss / trainer.args.gradient_accumulation_steps
    assert torch.allclose(loss, expected, rtol=1e-5, atol=1e-7)


def test_grpo_subclass_trains_tiny_model_with_recipe(tmp_path):
    """A few dozen steps of dg + clip_norm: the callback clips every step, and the copy reward rises."""
    trainer = _trainer(tmp_path, "dg+clip_norm(max_norm=0.5)", steps=60, max_grad_norm=0.0)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.train()
    history = trainer.stabilizer_callback.step.history
    assert len(history) == 60 and all("grad_norm" in h for h in history)
    assert any(h["clipped"] == 1.0 for h in history)
    rewards = [row["reward"] for row in trainer.state.log_history if "reward" in row]
    assert len(rewards) == 60
    first, last = sum(rewards[:8]) / 8, sum(rewards[-8:]) / 8
    assert last > first + 0.2, (first, last)
    assert any(not torch.equal(v, trainer.model.state_dict()[k]) for k, v in before.items())
    assert any(k.startswith("stabilizer/") for row in trainer.state.log_history for k in row)
