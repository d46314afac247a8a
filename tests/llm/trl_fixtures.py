"""Tiny TRL setups for the plugin tests: a 2-layer Llama and a character tokenizer built from config (no download).

Completions stop at a sampled <eos>, so their lengths vary: the token-count normalisations of TRL's
loss types then differ from per-micro-batch means, which is what the accumulation tests need.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from datasets import Dataset
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

ALPHABET = "0123456789="


def tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate(["<pad>", "<bos>", "<eos>", "<unk>", *ALPHABET])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")
    tok.padding_side = "left"
    return tok


def model(tok: PreTrainedTokenizerFast, seed: int = 0) -> LlamaForCausalLM:
    cfg = LlamaConfig(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id, tie_word_embeddings=False,
    )  # fmt: skip
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        net = LlamaForCausalLM(cfg)
        with torch.no_grad():  # a strong <eos> logit so that completion lengths vary a lot
            net.lm_head.weight[tok.eos_token_id] += 0.1 * net.model.embed_tokens.weight.std()
    finally:
        torch.random.set_rng_state(state)
    return net


def reward(completions: list[str], prompts: list[str], **_: Any) -> list[float]:
    """Copy the digit before '=' (1), partial credit for any digit (0.3)."""
    out = []
    for c, p in zip(completions, prompts, strict=True):
        c = c.strip()
        out.append(1.0 if c[:1] == p[0] else 0.3 if c[:1].isdigit() else 0.0)
    return out


def dataset(n: int = 64) -> Dataset:
    return Dataset.from_dict({"prompt": [f"{d}=" for d in "0123456789"] * (n // 10 + 1)})


def config(tmp_path: Any, **overrides: Any) -> GRPOConfig:
    """GRPOConfig for a CPU run; an effective batch of 16 completions (4 prompts x 4) per optimizer step by default."""
    accumulation = overrides.pop("gradient_accumulation_steps", 1)
    args = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=16 // accumulation, gradient_accumulation_steps=accumulation,
        num_generations=4, max_completion_length=6, max_steps=2, learning_rate=5e-2, logging_steps=1, report_to="none",
        use_cpu=True, bf16=False, save_strategy="no", seed=0, disable_tqdm=True, dataloader_num_workers=0,
        lr_scheduler_type="constant", activation_checkpointing=False, optim="sgd", max_grad_norm=0.0,
    )  # fmt: skip
    args.update(overrides)
    return GRPOConfig(**args)


class GradRecorder(TrainerCallback):
    """Keeps a flat copy of the gradient just before every optimizer step."""

    def __init__(self) -> None:
        self.grads: list[torch.Tensor] = []

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
        self.grads.append(torch.cat([p.grad.detach().reshape(-1).clone() for p in model.parameters() if p.grad is not None]))


def trainer(tmp_path: Any, cls: type = GRPOTrainer, seed: int = 0, **kwargs: Any) -> tuple[GRPOTrainer, GradRecorder]:
    """A trainer of class ``cls`` (GRPOTrainer or the plugin's subclass) with a gradient recorder."""
    extra = {k: kwargs.pop(k) for k in ("recipe", "behavior") if k in kwargs}
    tok = tokenizer()
    recorder = GradRecorder()
    policy: Any = model(tok, seed)
    if kwargs.get("beta", 0.0) != 0.0:  # TRL loads the reference model from a path, as the policy's twin
        path = Path(tmp_path) / f"tiny-model-{seed}"
        policy.save_pretrained(path)
        policy = str(path)
        kwargs.setdefault("model_init_kwargs", {"dtype": torch.float32})
    t = cls(
        model=policy, reward_funcs=reward, args=config(tmp_path, **kwargs), train_dataset=dataset(),
        processing_class=tok, callbacks=[recorder], **extra,
    )  # fmt: skip
    t.remove_callback(PrinterCallback)  # keep the test output quiet; log_history is still kept
    return t, recorder


def train_grads(tmp_path: Any, cls: type = GRPOTrainer, **kwargs: Any) -> list[torch.Tensor]:
    t, recorder = trainer(tmp_path, cls, **kwargs)
    t.train()
    return recorder.grads
