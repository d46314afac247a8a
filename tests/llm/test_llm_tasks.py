"""Tasks and answer extraction (the CLI's error messages: test_llm_cli.py)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from llm_scale.cli import main
from llm_scale.tasks import Arithmetic, Countdown, Problem, build_task, evaluate_expression, extract_answer


@pytest.mark.parametrize(
    "text, expected",
    [
        ("so 3 + 4 = 7\n#### 7", "7"),
        ("Natalia sold 48/2 = 24 clips.\n#### 1,224", "1224"),
        ("the answer is \\boxed{-12}.", "-12"),
        ("I think 12, no wait, 15.", "15"),
        ("$18.00 in total", "18"),
        ("2.50 dollars", "2.5"),
        ("no number here", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_arithmetic_rewards_exact_answers_only():
    task = Arithmetic(max_operand=20, ops="+-*")
    rng = random.Random(0)
    for _ in range(50):
        p = task.sample(rng)
        a, op, b = p.question.split()[2:5]
        value = {"+": int(a) + int(b.rstrip("?")), "-": int(a) - int(b.rstrip("?")), "*": int(a) * int(b.rstrip("?"))}[op]
        assert p.answer == str(value)
        assert task.reward(p, f" {value}") == 1.0
        assert task.reward(p, f"{value + 1}") == 0.0
        assert task.reward(p, f"{value} {value + 2}") == 0.0  # the last number is the answer


def test_countdown_problems_are_solvable_and_the_verifier_is_strict():
    task = Countdown(n_numbers=4, max_number=9, max_target=50)
    rng = random.Random(1)
    for _ in range(100):
        p = task.sample(rng)
        value, used = evaluate_expression(p.answer)
        assert value == p.meta["target"]
        pool = list(p.meta["numbers"])
        for x in used:  # the reference uses each given number at most once
            pool.remove(x)
        assert task.reward(p, p.answer) == 1.0
        assert task.reward(p, f"#### {p.answer}") == 1.0
    p = Problem("", "", "3*4+2", {"numbers": [3, 4, 2, 7], "target": 14})
    assert task.reward(p, "3*4+2") == 1.0
    assert task.reward(p, "(7*4)/2") == 1.0
    assert task.reward(p, "7+7") == 0.0  # 7 given once
    assert task.reward(p, "14") == 0.0  # not a given number
    assert task.reward(p, "3*4+2+0") == 0.0  # 0 not given
    assert task.reward(p, "2*7") == 1.0
    assert task.reward(p, "1/0") == 0.0
    assert task.reward(p, "(((") == 0.0


def test_gsm8k_loader(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [
        {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
        {"question": "What is 1,000 + 234?", "answer": "It is 1,234."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    task = build_task("gsm8k", data=str(path))
    assert [p.answer for p in task.rows] == ["7", "1234"]
    p = task.rows[1]
    assert task.reward(p, "1000 + 234 = 1234\n#### 1,234") == 1.0
    assert task.reward(p, "#### 1233") == 0.0
    assert "####" in task.prompt(p, "chat")
    path.write_text('{"question": "q"}\n')
    with pytest.raises(ValueError, match=r"train\.jsonl:1"):
        build_task("gsm8k", data=str(path))
    with pytest.raises(FileNotFoundError, match="not found"):
        build_task("gsm8k", data=str(tmp_path / "missing.jsonl"))


def test_task_parameters_are_type_checked():
    with pytest.raises(ValueError, match=r"arithmetic\(min_operand='abc'\): min_operand must be an integer, got str"):
        build_task("arithmetic(min_operand=abc)")
    with pytest.raises(ValueError, match=r"copy\(digits=1.5\): digits must be an integer, got float"):
        build_task("copy(digits=1.5)")
    with pytest.raises(ValueError, match=r"countdown\(n_numbers=True\)"):
        build_task("countdown(n_numbers=true)")
    assert build_task("arithmetic(max_operand=20, ops='+-')").max_operand == 20


def test_missing_hub_model_fails_fast_offline(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["train", "--model", "nobody/no-such-model-xyz", "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    assert "not in the Hugging Face cache, and HF_HUB_OFFLINE is set" in capsys.readouterr().err


@pytest.mark.parametrize(
    "completion, reward",
    [
        ("3 + 18 = 21 or 1.", 1.0),  # the last-number rule read 1
        ("3 + 18 = 21", 1.0),
        ("The equation and its result: 3 + 18 = 21", 1.0),
        ("21", 1.0),
        ("21.", 1.0),
        ("3 + 1", 0.0),  # a truncated echo: the last-number rule read 1... of an operand
        ("3 + 18", 0.0),  # a truncated echo whose last number is an operand
        ("13 + 18 = 21", 0.0),  # not the asked equation
        ("3 + 18 = 2", 0.0),
        ("3 + 18 = 211", 0.0),
        ("The answer is 21.", 0.0),  # no equation: the format the prompt asks for is missing
        ("The equation 3 + 18 is 21.", 1.0),
        ("3 + 18 equals 21", 1.0),
        ("The equation and its result are 3 + 18.", 0.0),  # an echo without a result
        ("3 + 18 = 22\n3 + 18 = 21", 0.0),  # the first statement counts
    ],
)
def test_arithmetic_strict_rule_on_prose(completion, reward):
    p = Problem("What is 3 + 18? Reply with one line: the equation and its result.", "3+18=", "21", {"a": 3, "op": "+", "b": 18})
    assert Arithmetic(max_operand=20).reward(p, completion) == reward
    assert Arithmetic(max_operand=20).reward(p, completion, style="chat") == reward


def test_equation_answer_operators_and_signs():
    from llm_scale.tasks import equation_answer

    assert equation_answer("7 × 6 = 42", 7, "*", 6) == "42"
    assert equation_answer("7 x 6 = 42", 7, "*", 6) == "42"
    assert equation_answer("3 − 8 = −5", 3, "-", 8) is None  # the unicode minus of the result is not a number sign
    assert equation_answer("3 - 8 = -5", 3, "-", 8) == "-5"
    assert equation_answer("13 - 8 = 5", 3, "-", 8) is None
    assert equation_answer("1,200 + 3 = 1,203", 200, "+", 3) is None  # 200 is part of a longer number


def test_compact_completions_keep_the_last_number_rule():
    p = Problem("", "3+18=", "21", {"a": 3, "op": "+", "b": 18})
    task = Arithmetic(max_operand=20)
    assert task.reward(p, "21") == 1.0 and task.reward(p, "1=21") == 1.0 and task.reward(p, "21=1") == 0.0
    assert task.reward(p, "1=21", style="compact") == 1.0


def test_completion_budget_follows_the_prompt_style():
    from llm_scale.models import char_tokenizer
    from llm_scale.tasks import BUDGET_PROBLEMS, completion_budget

    tok = char_tokenizer("0123456789+-*= ")
    task = Arithmetic(max_operand=20)
    assert completion_budget(task, "compact", tok) == Arithmetic.max_new_tokens == 6
    rng = random.Random(0)
    refs = [task.sample(rng) for _ in range(BUDGET_PROBLEMS)]
    longest = max(len(f"{p.meta['a']} + {p.meta['b']} = {p.answer}") for p in refs)  # one token per character
    assert completion_budget(task, "chat", tok) == longest + 1 + task.budget_slack
    assert completion_budget(task, "qa", tok) == completion_budget(task, "chat", tok)
    with pytest.raises(ValueError, match="unknown prompt style 'bogus'"):
        completion_budget(task, "bogus", tok)


def test_truncation_warning_threshold():
    from llm_scale.tasks import TRUNCATION_WARN_FRAC, truncation_warning

    assert TRUNCATION_WARN_FRAC == 0.25
    assert truncation_warning(16, 64, 23) is None  # exactly 25%: not more than the limit
    line = truncation_warning(17, 64, 23)
    assert line == ("warning: 17 of 64 completions (27%) hit the 23-token budget (more than 25%); their rewards may be "
                    "wrong: measure how many with python -m llm_scale budget, or raise --max-new-tokens")
    assert truncation_warning(0, 0, 23) is None


FIXTURE = Path(__file__).with_name("fixtures") / "smollm2_arithmetic_completions.jsonl"


def _fixture_rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def test_strict_rule_agrees_with_hand_labels_on_real_completions():
    """Real completions of SmolLM2-135M-Instruct (greedy and sampled; tests/llm/fixtures/make_smollm2_arithmetic.py),
    each labelled by hand: 1 when it states the correct result of the asked equation as its answer."""
    rows = _fixture_rows()
    assert len(rows) >= 30 and {r["decoding"] for r in rows} == {"greedy", "sampled"}
    task = Arithmetic(max_operand=20)
    disagree_strict, disagree_last = [], []
    for r in rows:
        p = Problem(r["question"], f"{r['a']}{r['op']}{r['b']}=", r["answer"], {"a": r["a"], "op": r["op"], "b": r["b"]})
        if task.reward(p, r["completion"], style="chat") != r["label"]:
            disagree_strict.append(r["completion"])
        if float(extract_answer(r["completion"]) == r["answer"]) != r["label"]:
            disagree_last.append(r["completion"])
    assert disagree_strict == []
    assert len(disagree_last) >= 1  # the last-number rule mis-scores some of these real completions
