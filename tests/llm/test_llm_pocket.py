"""Pocket LMs (llm_scale/pocket.py): deterministic builds, the fetched models' load path, the answer format.

The default tests build ``pocket-tiny`` (seconds); the full ``pocket-arithmetic`` build is behind ``slow``.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from llm_scale import cli
from llm_scale.models import ModelLoadError, load_policy, prompt_style, stop_ids
from llm_scale.pocket import ANSWERS, POCKET_MODELS, build_pocket, known_pairs, pocket_tokenizer, sft_example
from llm_scale.tasks import build_task, completion_budget

SAME_BYTES = ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "chat_template.jinja")  # fmt: skip


@pytest.fixture(scope="module")
def two_tiny_builds(tmp_path_factory):
    roots = [tmp_path_factory.mktemp(f"cache{i}") for i in range(2)]
    return [build_pocket("pocket-tiny", root, progress=False, log=lambda m: None) for root in roots]


def test_tiny_build_is_bit_for_bit_deterministic(two_tiny_builds):
    first, second = two_tiny_builds
    for name in SAME_BYTES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_build_records_its_label_size_and_cost(two_tiny_builds):
    source = json.loads((two_tiny_builds[0] / "source.json").read_text())
    spec = POCKET_MODELS["pocket-tiny"]
    h, i, v = spec.hidden_size, spec.intermediate_size, len(pocket_tokenizer())
    per_layer = 4 * h * h + 3 * h * i + 2 * h  # q k v o, gate up down, two RMSNorms
    assert source["n_params"] == spec.num_layers * per_layer + 2 * v * h + h  # untied embeddings, final norm
    assert source["label"].startswith("task-pretrained") and "not web-pretrained" in source["label"]
    assert source["build_cpu_s"] > 0 and source["torch_threads"] == 1


def test_a_second_build_keeps_the_present_model(two_tiny_builds):
    before = (two_tiny_builds[0] / "model.safetensors").stat().st_mtime_ns
    messages = []
    build_pocket("pocket-tiny", two_tiny_builds[0].parent, progress=False, log=messages.append)
    assert "already present" in messages[0]
    assert (two_tiny_builds[0] / "model.safetensors").stat().st_mtime_ns == before


def test_loads_by_name_through_the_fetched_models_path(two_tiny_builds, monkeypatch):
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    monkeypatch.setenv("STALENESS_TESTBED_MODELS", str(two_tiny_builds[0].parent))
    model, tok = load_policy("pocket-tiny")
    assert isinstance(model, LlamaForCausalLM)
    assert prompt_style("auto", "pocket-tiny", tok) == "chat"
    assert stop_ids(model, tok) == [tok.eos_token_id]
    direct = AutoModelForCausalLM.from_pretrained(str(two_tiny_builds[0])).eval()
    ids = tok("<bos>User: What is 3 + 4?\nAssistant: ", add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(model.eval()(ids).logits, direct(ids).logits)


def test_missing_pocket_model_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("STALENESS_TESTBED_MODELS", str(tmp_path))
    with pytest.raises(ModelLoadError, match="python -m llm_scale models build pocket-tiny"):
        load_policy("pocket-tiny")


def test_chat_template_and_fine_tuning_examples_are_the_trainers_prompts():
    spec = POCKET_MODELS["pocket-arithmetic"]
    task, tok = build_task(spec.task), pocket_tokenizer()
    rng = random.Random(0)
    known = known_pairs(spec)
    assert len(known) == round(0.45 * 21 * 21)
    for _ in range(50):
        ids, n_prompt = sft_example(spec, task, tok, rng, known)
        text = tok.decode(ids)
        prompt = tok.decode(ids[:n_prompt])
        assert prompt.startswith("<bos>User: What is ") and prompt.endswith("\nAssistant: ")
        assert ids[-1] == tok.eos_token_id and tok.eos_token_id not in ids[:-1]
        assert text.count("<bos>") == 1
    # the budget the trainer gives chat prompts: the longest reference "20 + 20 = 40" (12 characters) + end + 12
    assert completion_budget(task, "chat", tok) == 25


def test_answer_phrasings_and_their_rewards():
    """Equation-first and just-the-number phrasings earn the reward; 'The answer is N.' (no equation) does not."""
    task = build_task("arithmetic(max_operand=20)")
    problem = task.sample(random.Random(3))
    m = problem.meta
    rewards = {t: task.reward(problem, t.format(a=m["a"], op=m["op"], b=m["b"], c=problem.answer, ramble="Hmm, ok,"),
                              "chat") for t, _ in ANSWERS}  # fmt: skip
    assert rewards["The answer is {c}."] == 0.0
    assert all(r == 1.0 for t, r in rewards.items() if t != "The answer is {c}.")
    wrong = f"{m['a']} {m['op']} {m['b']} = {int(problem.answer) + 1}"
    assert task.reward(problem, wrong, "chat") == 0.0


def test_models_build_rejects_an_unknown_name_in_one_line(capsys):
    assert cli.main(["models", "build", "pocket-nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown pocket model 'pocket-nope'; allowed: pocket-arithmetic, pocket-tiny"]


@pytest.mark.slow
def test_full_pocket_build_is_deterministic(tmp_path):
    first = build_pocket("pocket-arithmetic", tmp_path / "a", progress=False, log=lambda m: None)
    second = build_pocket("pocket-arithmetic", tmp_path / "b", progress=False, log=lambda m: None)
    for name in SAME_BYTES:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_update_benchmark_skips_a_model_that_is_not_built(tmp_path, monkeypatch, capsys):
    from benchmarks.pocket_update import main

    monkeypatch.setenv("STALENESS_TESTBED_MODELS", str(tmp_path))
    assert main(["--out", str(tmp_path / "cost.json")]) == 0
    report = json.loads((tmp_path / "cost.json").read_text())
    assert report["skipped"] == "pocket-arithmetic is not built: python -m llm_scale models build pocket-arithmetic"
    assert "ratio_update" not in report
    assert main(["--rounds", "0"]) == 2 and "--rounds must be a positive integer, got 0" in capsys.readouterr().err


def test_learning_rate_schedule_per_phase():
    from llm_scale.pocket import phase_lr

    s = POCKET_MODELS["pocket-arithmetic"]
    w, p = s.warmup_steps, s.pretrain_steps
    assert phase_lr(0, s) == pytest.approx(s.lr / w) and phase_lr(w - 1, s) == pytest.approx(s.lr)
    assert phase_lr(p - 1, s) == pytest.approx(s.min_lr_ratio * s.lr)  # cosine end of pretraining
    assert phase_lr(p, s) == pytest.approx(s.sft_lr / w)  # fine-tuning warms up again to its own peak
    assert phase_lr(p + s.sft_steps - 1, s) == pytest.approx(s.min_lr_ratio * s.sft_lr)


def test_diagnose_reports_consistent_shares_and_zero_kl_to_itself(two_tiny_builds, monkeypatch):
    from llm_scale.pocket_design import diagnose

    monkeypatch.setenv("STALENESS_TESTBED_MODELS", str(two_tiny_builds[0].parent))
    out = diagnose([str(two_tiny_builds[0])], base="pocket-tiny", problems=16, sampled=4, group=2)
    base, same = out["pocket-tiny"], out[str(two_tiny_builds[0])]
    assert base["kl_to_base_per_token"] == 0.0 and abs(same["kl_to_base_per_token"]) < 1e-6  # the same weights
    assert same["greedy_accuracy"] == base["greedy_accuracy"] and same["entropy_per_token"] == base["entropy_per_token"]
    for kind in ("greedy", "sampled"):
        k, acc = base[f"{kind}_known_share"], base[f"{kind}_accuracy"]
        parts = [(k, base[f"{kind}_accuracy_known"]), (1 - k, base[f"{kind}_accuracy_unknown"])]
        assert acc == pytest.approx(sum(w * a for w, a in parts if w > 0))  # the split adds up
        assert base[f"{kind}_equation_wrong"] <= base[f"{kind}_writes_equation"] <= 1
