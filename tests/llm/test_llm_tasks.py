"""Tasks and answer extraction (the CLI's error messages: test_llm_cli.py)."""

from __future__ import annotations

import json
import random

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
