"""Policies: a tiny random causal LM with a local character tokenizer, or any Hugging Face causal LM.

``load_policy("tiny", alphabet)`` builds a 2-layer Llama and a character-level tokenizer (a
`tokenizers` WordLevel model over ``alphabet`` wrapped in ``PreTrainedTokenizerFast``) from config
alone: no file is read and nothing is downloaded. Any other name is a local directory or a hub id;
a hub id that is neither cached nor reachable fails within seconds with a message saying so
(``HF_HUB_OFFLINE=1`` skips the network entirely), instead of retrying for a minute.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class ModelLoadError(RuntimeError):
    """The model or tokenizer named on the command line cannot be loaded."""


@dataclass
class TinyConfig:
    """Shape of the tiny Llama (defaults: ~0.1M parameters; learns the copy task on CPU in seconds)."""

    hidden_size: int = 64
    num_layers: int = 2
    num_heads: int = 4
    intermediate_size: int = 128
    max_positions: int = 512


def char_tokenizer(alphabet: str) -> Any:
    """A character-level fast tokenizer over the distinct characters of ``alphabet`` plus <pad>/<bos>/<eos>/<unk>."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *chars])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def tiny_model(tokenizer: Any, config: TinyConfig | None = None, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised (from ``seed``) small LlamaForCausalLM sized to ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = config or TinyConfig()
    cfg = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=c.hidden_size,
        intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers,
        num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_heads,
        max_position_embeddings=c.max_positions,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=False,
        attention_dropout=0.0,
    )
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = LlamaForCausalLM(cfg)
    finally:
        torch.random.set_rng_state(state)
    return model


def _resolve_remote(name: str) -> None:
    """Fail fast, with a clear message, when ``name`` is not cached and the hub cannot supply it."""
    from huggingface_hub import HfApi, try_to_load_from_cache

    cached = try_to_load_from_cache(name, "config.json")
    if isinstance(cached, str):
        return
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        raise ModelLoadError(
            f"model {name!r} is not a local directory and is not in the Hugging Face cache, and "
            "HF_HUB_OFFLINE is set; pass a local path, download the model first, or use --model tiny"
        )
    try:
        HfApi().model_info(name, timeout=10)
    except Exception as exc:  # network errors, unknown repos, gated repos
        kind = type(exc).__name__
        if "NotFound" in kind or "Gated" in kind or "Validation" in kind:
            why = f"the hub has no accessible model {name!r} ({kind})"
        else:
            why = f"cannot reach the Hugging Face hub to download {name!r} ({kind}: {str(exc)[:200]})"
        raise ModelLoadError(
            f"{why}; pass a local directory, a cached hub id, or --model tiny for the built-in tiny model"
        ) from None


def load_policy(
    name: str,
    *,
    alphabet: str = "",
    tiny: TinyConfig | None = None,
    seed: int = 0,
    dtype: torch.dtype | None = None,
) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) for ``name``: ``"tiny"``, a local directory, or a hub id.

    The tokenizer gets a pad token (its eos) if it has none. Raises `ModelLoadError` with a clear
    message when the model cannot be loaded.
    """
    if name == "tiny":
        tokenizer = char_tokenizer(alphabet or "0123456789")
        return tiny_model(tokenizer, tiny, seed), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local = Path(name).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise ModelLoadError(f"{str(local)!r} exists but holds no config.json: not a Hugging Face model directory")
        source = str(local)
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelLoadError(f"model path {name!r} does not exist; --model takes tiny, a local directory or a hub id")
    else:
        _resolve_remote(name)
        source = name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype) if dtype else AutoModelForCausalLM.from_pretrained(source)
    except Exception as exc:
        raise ModelLoadError(f"cannot load model {name!r}: {type(exc).__name__}: {str(exc)[:300]}") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"tokenizer of {name!r} has no eos token; generation could not stop")
    return model, tokenizer
