"""Policies: a tiny random causal LM with a local character tokenizer, or any Hugging Face causal LM.

``load_policy("tiny", alphabet)`` builds a 2-layer Llama and a character-level tokenizer (a
`tokenizers` WordLevel model over ``alphabet`` wrapped in ``PreTrainedTokenizerFast``) from config
alone: no file is read and nothing is downloaded. ``random:qwen2.5-0.5b`` builds a model with
Qwen2.5-0.5B's architecture (`ARCHITECTURES`) randomly initialised from its config, with the
character tokenizer padded to the model's vocabulary (for throughput and memory measurements
without hub access; it learns nothing useful). Any other name is a local directory or a hub id;
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
    """width of the residual stream (a multiple of 2 x num-heads)"""
    num_layers: int = 2
    """decoder layers"""
    num_heads: int = 4
    """attention heads"""
    intermediate_size: int = 128
    """MLP width"""
    max_positions: int = 512
    """longest prompt + completion"""

    def problems(self) -> list[str]:
        """What is wrong with this shape (empty when transformers will accept it)."""
        out = []
        for name, low, high in (("hidden_size", 2, 65536), ("num_layers", 1, 256), ("num_heads", 1, 1024),
                                ("intermediate_size", 1, 262144), ("max_positions", 2, 1 << 20)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                out.append(f"--tiny.{name.replace('_', '-')} must be an integer in [{low}, {high}], got {value!r}")
        if not out and self.hidden_size % (2 * self.num_heads):
            out.append(
                f"--tiny.hidden-size {self.hidden_size} must be a multiple of 2 x --tiny.num-heads "
                f"({2 * self.num_heads}): each head needs an even width for rotary positions"
            )
        return out


# Architectures built from config alone (random weights), by name after ``random:``.
ARCHITECTURES: dict[str, dict[str, Any]] = {
    # Qwen2.5-0.5B's published config (hidden 896, 24 layers, 14 query / 2 key-value heads, vocabulary 151,936).
    "qwen2.5-0.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False,
        attention_dropout=0.0,
    ),
}  # fmt: skip


def _filler(i: int) -> str:
    """A token name made of letters only (so it never reads as a number in a completion)."""
    letters = ""
    i += 1
    while i:
        i, r = divmod(i - 1, 26)
        letters = chr(97 + r) + letters
    return f"<~{letters}>"


def char_tokenizer(alphabet: str, vocab_size: int = 0) -> Any:
    """A character-level fast tokenizer over the distinct characters of ``alphabet`` plus <pad>/<bos>/<eos>/<unk>.

    ``vocab_size`` > the character count pads the vocabulary with filler tokens (``<~a>``, ``<~b>``,
    ...) that decode to letters only, so that a model with a large vocabulary can be paired with it.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(alphabet))
    names = [*SPECIALS, *chars]
    names += [_filler(i) for i in range(max(0, vocab_size - len(names)))]
    vocab = {tok: i for i, tok in enumerate(names)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>"
    )


def _seeded(build: Any, seed: int) -> torch.nn.Module:
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        return build()
    finally:
        torch.random.set_rng_state(state)


def tiny_model(tokenizer: Any, config: TinyConfig | None = None, seed: int = 0) -> torch.nn.Module:
    """A randomly initialised (from ``seed``) small LlamaForCausalLM sized to ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    c = config or TinyConfig()
    bad = c.problems()
    if bad:
        raise ModelLoadError(bad[0])
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
    return _seeded(lambda: LlamaForCausalLM(cfg), seed)


def random_model(
    arch: str, alphabet: str, seed: int = 0, dtype: torch.dtype | None = None, device: torch.device | str = "cpu"
) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer): architecture ``arch`` of `ARCHITECTURES`, randomly initialised from ``seed``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if arch not in ARCHITECTURES:
        raise ModelLoadError(f"unknown architecture random:{arch}; allowed: {', '.join('random:' + a for a in ARCHITECTURES)}")
    spec = dict(ARCHITECTURES[arch])
    tokenizer = char_tokenizer(alphabet, vocab_size=spec["vocab_size"])
    config = AutoConfig.for_model(
        spec.pop("model_type"), **spec, pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    def build() -> torch.nn.Module:
        with torch.device(device):  # initialised where it will run (seconds on a GPU, not a minute on a CPU)
            return AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)

    if torch.device(device).type == "cuda":
        with torch.random.fork_rng(devices=[torch.device(device)]):
            torch.manual_seed(seed)
            return build(), tokenizer
    return _seeded(build, seed), tokenizer


def n_params(model: torch.nn.Module) -> int:
    """Distinct parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters())


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
    device: torch.device | str = "cpu",
) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) for ``name``: ``"tiny"``, ``"random:ARCH"``, a local directory, or a hub id.

    The tokenizer gets a pad token (its eos) if it has none. Raises `ModelLoadError` with a clear
    message when the model cannot be loaded.
    """
    if name == "tiny":
        tokenizer = char_tokenizer(alphabet or "0123456789")
        return tiny_model(tokenizer, tiny, seed), tokenizer
    if name.startswith("random:"):
        return random_model(name.split(":", 1)[1], alphabet or "0123456789", seed, dtype, device)
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
