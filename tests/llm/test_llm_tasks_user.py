"""A user's own task (``--task package.module:factory``) and prompt files (parquet / JSONL, verl's layout)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from llm_scale.cli import main
from llm_scale.tasks import PromptFile, build_task

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "llm_scale.md"  # "Your own task and data"
TINY = ["--model", "tiny", "--mode", "sync", "--prompts-per-step", "4", "--group-size", "4", "--tensorboard", "off",
        "--no-progress", "--no-save-final", "--seed", "3"]  # fmt: skip


def readme_example() -> str:
    text = GUIDE.read_text()
    block = text.split("<!-- user-task-example -->", 1)[1]
    return re.search(r"```python\n(.*?)```", block, re.S).group(1)


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_tasks.py").write_text(readme_example())
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my_tasks"
    sys.modules.pop("my_tasks", None)


def test_readme_user_task_trains_on_the_tiny_model(tmp_path, user_module):
    task = build_task(f"{user_module}:make(digits=3)")
    assert task.name == "parity" and task.digits == 3
    import random

    p = task.sample(random.Random(0))
    assert task.reward(p, p.answer) == 1.0 and task.reward(p, str(1 - int(p.answer))) == 0.0
    out = tmp_path / "run"
    assert main(["train", *TINY, "--task", f"{user_module}:make(digits=3)", "--lr", "3e-3", "--steps", "40",
                 "--out", str(out)]) == 0  # fmt: skip
    rows = (out / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    reward = [float(r.split(",")[header.index("reward_mean")]) for r in rows[1:]]
    assert len(reward) == 40
    assert sum(reward[-10:]) / 10 > sum(reward[:10]) / 10 + 0.2  # learns the parity of the last digit


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_xyz:make", "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
    ("my_tasks:nothing", "module 'my_tasks' has no callable 'nothing'"),
    ("my_tasks:make(bogus=1)", "make(bogus=1) failed: TypeError"),
    ("json:dumps", "dumps() failed: TypeError"),
    ("my_tasks:Problem(question='q', compact='c', answer='a')", "the factory's result lacks name, alphabet"),
    ("my-tasks:make", "a user task is package.module:factory"),
])
def test_bad_user_task_is_one_line_exit_2(tmp_path, user_module, capsys, spec, message):
    assert main(["train", *TINY, "--task", spec, "--steps", "1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err
    assert not (tmp_path / "o").exists()


def _verl_rows() -> list[dict]:
    return [{"data_source": "toy", "prompt": [{"role": "user", "content": f"What is {a} + {a}?"}], "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(2 * a)}, "extra_info": {"index": a}}
            for a in range(10)]  # fmt: skip


def test_verl_parquet_layout_trains(tmp_path):
    import pandas as pd

    path = tmp_path / "train.parquet"
    pd.DataFrame(_verl_rows()).to_parquet(path)
    task = build_task(f"prompts(path='{path}')")
    assert isinstance(task, PromptFile) and len(task.rows) == 10
    p = task.rows[3]
    assert p.compact == "What is 3 + 3?" and p.answer == "6" and "####" in task.prompt(p, "chat")
    assert task.reward(p, "3 + 3 = 6\n#### 6") == 1.0 and task.reward(p, "#### 7") == 0.0
    out = tmp_path / "run"
    assert main(["train", *TINY, "--task", "prompts", "--data", str(path), "--max-new-tokens", "4", "--steps", "2",
                 "--out", str(out)]) == 0  # fmt: skip
    assert json.loads((out / "summary.json").read_text())["steps"] == 2


def test_jsonl_with_named_columns_and_text_answers(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps({"q": f"Spell {w}.", "meta": {"gold": w}}) for w in ("cat", "dog")) + "\n")
    task = build_task(f"prompts(path='{path}', prompt_key=q, answer_key='meta.gold')")
    p = task.rows[1]
    assert (p.compact, p.answer) == ("Spell dog.", "dog")
    assert task.reward(p, "I spell it: #### dog ") == 1.0 and task.reward(p, "#### cat") == 0.0 and task.reward(p, "dog") == 1.0


def test_prompt_file_errors_are_one_line(tmp_path, capsys):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"prompt": "hi"}) + "\n")
    cases = [
        (f"prompts(path='{path}')", "row 0 of train.jsonl has no column 'reward_model.ground_truth'; columns: prompt"),
        (f"prompts(path='{tmp_path / 'missing.parquet'}')", "not found"),
        (f"prompts(path='{tmp_path / 'x.csv'}')", "not found"),
    ]
    (tmp_path / "y.csv").write_text("a,b\n")
    cases.append((f"prompts(path='{tmp_path / 'y.csv'}')", "'y.csv' is neither .parquet nor .jsonl"))
    for spec, message in cases:
        assert main(["train", *TINY, "--task", spec, "--steps", "1", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err
