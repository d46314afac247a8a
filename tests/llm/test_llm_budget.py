"""``python -m llm_scale budget``: the cut completion is the one the budget draws, and its statistics."""

from __future__ import annotations

import json
import math

import pytest
import torch

from llm_scale.budget import Proportion, cut_at, effect
from llm_scale.cli import main
from llm_scale.fingerprint import model_label
from llm_scale.models import load_policy, stop_ids
from llm_scale.sampler import Sampler
from llm_scale.tasks import build_task


def _sampler(budget: int, temperature: float = 1.0) -> tuple[torch.nn.Module, Sampler]:
    task = build_task("arithmetic")
    model, tok = load_policy("tiny", alphabet=task.alphabet, seed=3)
    return model.eval(), Sampler(task, tok, "compact", 5, 8, 4, budget, temperature, eos_ids=stop_ids(model, tok))


def test_the_first_b_tokens_of_a_longer_draw_are_the_draw_with_budget_b():
    model, short = _sampler(6)
    _, long = _sampler(24)
    with torch.no_grad():
        a, b = short.batch(model, 2, 0), long.batch(model, 2, 0)
    ids, mask, cut = cut_at(b.completion_ids, b.completion_mask, 6, short.eos_ids)
    width = a.completion_ids.shape[1]
    assert torch.equal(a.completion_mask, mask[:, :width]) and not mask[:, width:].any()
    assert torch.equal(a.completion_ids[a.completion_mask], ids[:, :width][mask[:, :width]])
    assert torch.equal(a.rewards, short.rewards(short.problems(2), 4, ids, mask))
    assert cut.any() and not cut.all()  # the comparison covers cut and finished completions
    assert torch.equal(cut, a.completion_mask.sum(-1).eq(6) & ~torch.isin(a.completion_ids, torch.tensor(short.eos_ids)).any(-1))


def test_cut_flags_a_completion_without_a_stop_token_among_the_kept_tokens():
    ids = torch.tensor([[5, 2, 9, 9], [5, 6, 7, 8], [2, 0, 0, 0]])  # 2 is the stop token
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.bool)
    assert cut_at(ids, mask, 1, [2])[2].tolist() == [True, True, False]
    assert cut_at(ids, mask, 2, [2])[2].tolist() == [False, True, False]
    assert cut_at(ids, mask, 4, [2, 8])[2].tolist() == [False, False, False]


def test_effect_counts_and_exact_intervals():
    at_b, at_l = torch.tensor([0.0, 1, 1, 0, 0.5]), torch.tensor([1.0, 1, 0, 0, 0.5])
    e = effect("sampled", at_b, at_l, torch.tensor([1, 0, 1, 0, 0], dtype=torch.bool), torch.zeros(5, dtype=torch.bool), 6, 24)
    assert (e.changed.k, e.lowered.k, e.raised.k, e.truncated_at_budget.k, e.truncated_at_longer.k) == (2, 1, 1, 2, 0)
    assert e.reward_at_budget == pytest.approx(0.5) and e.reward_at_longer == pytest.approx(0.5)
    none = Proportion.of(0, 32)  # Clopper-Pearson: upper = 1 - (alpha / 2)^(1 / n)
    assert none.low == 0 and none.high == pytest.approx(1 - 0.025 ** (1 / 32))
    every = Proportion.of(32, 32)
    assert every.high == 1 and every.low == pytest.approx(0.025 ** (1 / 32))
    assert all(math.isnan(x) for x in (Proportion.of(0, 0).value, Proportion.of(0, 0).low))


def test_budget_command_scores_greedy_completions_as_evaluation_does(tmp_path, capsys):
    out = tmp_path / "budget"
    args = ["budget", "--model", "tiny", "--task", "arithmetic", "--prompts", "8", "--eval-size", "40",
            "--micro-batch-size", "16", "--seed", "5", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    record = json.loads((out / "tiny__arithmetic.json").read_text())
    assert (record["budget"], record["longer"], record["prompt_style"]) == (6, 24, "compact")
    sampled, greedy = record["effects"]
    assert (sampled["kind"], sampled["changed"]["n"], greedy["kind"], greedy["changed"]["n"]) == ("sampled", 32, "greedy", 40)
    for e in (sampled, greedy):  # rewards are 0 or 1 here: every change lowers or raises
        assert e["changed"]["k"] == e["lowered"]["k"] + e["raised"]["k"]
        assert e["truncated_at_longer"]["k"] <= e["truncated_at_budget"]["k"]
    task = build_task("arithmetic")
    model, tok = load_policy("tiny", alphabet=task.alphabet, seed=5)
    evaluation = Sampler(task, tok, "compact", 5, 8, 4, 6, eos_ids=stop_ids(model, tok))
    assert greedy["reward_at_budget"] == pytest.approx(evaluation.evaluate(model.eval(), evaluation.eval_problems(40), 16))
    assert greedy["truncated_at_budget"]["k"] > 0
    assert record["command"].startswith("python -m llm_scale budget --model tiny")
    assert "reward changed by the cut" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--longer", "6"], "--longer must exceed the budget under test (6 tokens), got 6"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be in 1..65536, got 0"),
    (["--temperature", "0"], "--temperature must be in (0, 100], got 0.0"),
    (["--task", "nosuch"], "unknown task 'nosuch'"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    assert main(["budget", "--model", "tiny", "--task", "arithmetic", *args, "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not (tmp_path / "b").exists()


def test_a_runs_saved_policy_is_named_after_its_run(tmp_path):
    assert model_label(str(tmp_path / "stale" / "final")) == "stale-final"
    assert model_label(str(tmp_path / "stale" / "final") + "/") == "stale-final"
    assert model_label(str(tmp_path / "my_model")) == "my_model" and model_label("x/m.gguf") == "m"
    assert model_label("tiny") == "tiny" and model_label("smollm2-135m-instruct") == "smollm2-135m-instruct"
