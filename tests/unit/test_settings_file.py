"""The experiments' one settings-file reader (testbed/util/settings_file.py): the same tables from TOML and YAML,
one-line errors naming the file, and the same runs whichever syntax a testbed sweep or an LLM study is written in."""

from __future__ import annotations

import pytest

from testbed.util.errors import UsageError
from testbed.util.settings_file import read_settings

TOML = "[train]\neval_every = 2\nsteps = 4\n[search]\neta = [2, 4]\nlr = [1e-3, 3e-4]\nseeds = [0, 1]\n"
YAML = "train:\n  eval_every: 2\n  steps: 4\nsearch:\n  eta: [2, 4]\n  lr: [1.0e-3, 3.0e-4]\n  seeds: [0, 1]\n"


def test_toml_and_yaml_read_the_same_tables(tmp_path):
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "a.yaml").write_text(YAML)
    assert read_settings(tmp_path / "a.toml") == read_settings(tmp_path / "a.yaml") == {
        "train": {"eval_every": 2, "steps": 4}, "search": {"eta": [2, 4], "lr": [1e-3, 3e-4], "seeds": [0, 1]}}


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("missing.toml", None, "study file '{p}' does not exist"),
        ("a.json", "{}", "unknown extension '.json'"),
        ("bad.toml", "[train\n", "study file '{p}' is malformed"),
        ("list.yaml", "- 1\n- 2\n", "must hold a table/mapping at top level, got list"),
    ],
)
def test_unusable_files_are_usage_errors_naming_the_file(tmp_path, name, text, message):
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(UsageError) as info:
        read_settings(path, "study file")
    assert message.format(p=path) in str(info.value)
    with pytest.raises(UsageError, match="is a directory"):
        read_settings(tmp_path, "study file")


def test_a_study_in_yaml_plans_the_runs_of_its_toml(tmp_path):
    from llm_scale.study import load_sweep, search_runs

    (tmp_path / "s.toml").write_text(TOML)
    (tmp_path / "s.yml").write_text(YAML)
    keys = [[r.key for r in search_runs(load_sweep(tmp_path / f))] for f in ("s.toml", "s.yml")]
    assert keys[0] == keys[1] and len(set(keys[0])) == 2 * 2 * (1 + 2)  # lr x seed x (sync, stale at each eta)
