"""The command line: runs write a tidy table and config; bad input is one clear error, exit 2, no files."""

import json
import subprocess
import sys
import types

import pandas as pd
import pytest

from testbed.cli import main

pytestmark = pytest.mark.integration


def test_run_writes_table_and_config(tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["run", "--task", "contextual_bandit", "--recipe", "tis(c=2)", "--delay", "uniform:3", "--steps", "12",
                 "--seeds", "2", "--log-every", "4", "--N", "3", "--task-arg", "K=4", "--out", str(out),
                 "--friction", "reward(p=0.1)", "--no-progress"])
    assert code == 0
    table = pd.read_csv(out / "results.csv")
    assert len(table) == 2 * 3  # 2 seeds x 3 logged steps
    assert table["seed"].tolist() == [0, 0, 0, 1, 1, 1] and table["step"].tolist() == [4, 8, 12] * 2
    assert set(table["recipe"]) == {"tis(c=2)"} and set(table["task.N"]) == {3} and set(table["task.K"]) == {4}
    assert table["test_error"].between(0, 1).all() and (table["status"] == "ok").all()
    config = json.loads((out / "config.json").read_text())
    assert len(config["runs"]) == 2 and config["command"] == "run"
    assert "final_test_error" in capsys.readouterr().out
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    mean, std = table.groupby("seed")["test_error"].last().agg(["mean", "std"])
    assert f"{mean:.3f} +- {std:.3f} (n=2)" in printed and "consecutive-gradient cosine" in printed
    assert main(["report", str(tmp_path / "nothing")]) == 2


BAD = [
    (["run", "--recipe", "nope"], "unknown recipe or component 'nope'"),
    (["run", "--delay", "fixed:-5"], "bad staleness spec 'fixed:-5'"),
    (["run", "--delay", "gaussian:3"], "allowed forms"),
    (["run", "--friction", "bug(frac=2)"], "bug.frac must be in [0, 1]"),
    (["run", "--task", "nope"], "unknown task 'nope'"),
    (["run", "--task", "mnist", "--data-dir", "/no/such/dir"], "does not exist"),
    (["run", "--task-arg", "width=3"], "unknown option 'width' for task 'mnist'"),
    (["run", "--task-arg", "hidden"], "expects KEY=VALUE"),
    (["run", "--hidden", "many"], "option hidden must be an integer, got 'many'"),
    (["run", "--recipe", "tis(c=abc)"], "tis: c must be a number, got 'abc'"),
    (["run", "--task", "token_reversal(H=abc)"], "option H must be an integer"),
    (["run", "--steps", "0"], "steps must be"),
    (["run", "--seeds", "0"], "--seeds must be >= 1"),
    (["run", "--batch-size", "10", "--n-actors", "20"], "must be >= n_actors"),
    (["sweep", "/no/such/sweep.toml"], "does not exist"),
    (["frobnicate"], "unknown command 'frobnicate'"),
]


@pytest.mark.parametrize("argv, fragment", BAD)
def test_bad_input_is_one_clear_error_and_writes_nothing(tmp_path, capsys, argv, fragment):
    out = tmp_path / "out"
    extra = ["--out", str(out)] if argv[0] == "run" or argv[0] == "sweep" else []
    assert main(argv + extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and fragment in err[0]
    assert not out.exists()


def test_argparse_errors_also_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--steps", "many"])
    assert info.value.code == 2
    assert "invalid int value" in capsys.readouterr().err


def test_bad_sweep_file_writes_nothing(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(f'out = "{tmp_path / "out"}"\n[grid]\nrecipe = ["pg", "nope"]\n')
    assert main(["sweep", str(path)]) == 2
    assert "unknown recipe or component 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_validate_dispatches_lazily(monkeypatch, capsys):
    seen = []
    fake = types.ModuleType("testbed.validate")
    fake.cli = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "testbed.validate", fake)
    assert main(["validate", "--scorecard", "x.json"]) == 0 and seen == [["--scorecard", "x.json"]]
    monkeypatch.setitem(sys.modules, "testbed.validate", None)  # as if the module were missing
    assert main(["validate"]) == 2
    assert "`validate` is not available" in capsys.readouterr().err


def test_demo_writes_table_and_plot(tmp_path):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--steps", "20", "--recipes", "pg,dg", "--delays", "sync,fixed:5",
                 "--workers", "1", "--no-progress"])
    assert code == 0
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 4 and set(summary["delay"]) == {"sync", "fixed:5"}
    assert (out / "demo.png").stat().st_size > 10_000 and (out / "demo.pdf").exists()


@pytest.mark.slow  # a fresh interpreter importing torch
def test_module_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", "--recipe", "nope", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown recipe or component 'nope'")
