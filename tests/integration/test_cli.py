"""The command line: runs write a tidy table and config; bad input is one clear error, exit 2, no files
(the full table of bad inputs is tests/integration/test_bad_input.py); warnings for legal but pointless
settings; --dry-run; the demo's conclusion and caption; output for people and file permissions."""

import json
import os
import stat
import subprocess
import sys
import types

import pandas as pd
import pytest

from testbed.cli import main, split_top
from testbed.results import read_frame

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
    assert {"epochs", "minibatches", "group_size", "lr", "optimizer", "proximal"} <= set(table.columns)
    assert not table.map(lambda v: isinstance(v, str) and v.startswith("tensor(")).any().any()  # metrics are numbers
    config = json.loads((out / "config.json").read_text())
    assert len(config["runs"]) == 2 and config["command"] == "run"
    printed = capsys.readouterr().out
    assert "final_test_error" in printed and f"python -m testbed report {out}" in printed
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out
    mean, std = table.groupby("seed")["test_error"].last().agg(["mean", "std"])
    assert f"{mean:.3f} +- {std:.3f} (n=2)" in printed and "grad_cos_prev" in printed
    assert "2 runs in" in printed and "2 ok" in printed and "same in every run: task=contextual_bandit" in printed


def test_argparse_errors_are_one_line_exit_2(capsys):
    assert main(["run", "--steps", "many"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["error: --steps must be an integer >= 1, got 'many'"]
    assert main(["run", "--steps"]) == 2
    assert capsys.readouterr().err.splitlines() == ["error: --steps: expected one argument"]
    assert main(["run", "--lr", "-1e-3"]) == 2  # a negative number in float notation is a value, not an option
    assert capsys.readouterr().err.splitlines() == ["error: --lr must be a finite number > 0, got '-1e-3'"]


def test_numbers_use_the_spec_grammar(tmp_path, capsys):
    assert main(["run", "--task", "bandit", "--steps", "1e3", "--log-every", "5e2", "--dry-run",
                 "--out", str(tmp_path / "o")]) == 0
    assert "1 run(s)" in capsys.readouterr().out and not (tmp_path / "o").exists()


def test_bad_sweep_file_writes_nothing(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(f'out = "{tmp_path / "out"}"\n[grid]\nrecipe = ["pg", "nope"]\n')
    assert main(["sweep", str(path)]) == 2
    assert "unknown recipe or component 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_dry_run_checks_everything_and_writes_nothing(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text('[base]\ntask = "bandit"\nsteps = 50\n[grid]\nrecipe = ["pg", "dg"]\nseed = [0, 1, 2]\n')
    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--dry-run", "--workers", "2"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("dry run: 6 run(s), 0 already finished") and "would be created" in text
    assert "2 worker(s)" in text and "nothing written" in text and not out.exists()


@pytest.mark.parametrize(
    "argv, warning",
    [
        (["--recipe", "group"], "recipe 'group' normalises advantages within prompt groups, but group_size is 1"),
        (["--recipe", "dr_grpo"], "recipe 'dr_grpo' normalises advantages within prompt groups"),
        (["--recipe", "opob+tis"], "recipe 'opob+tis' normalises advantages within prompt groups"),
        (["--delay", "fixed:50"], "delay 'fixed:50' with 20 steps: lags are clamped to the step"),
        (["--delay", "uniform:3+mixed:0.5"], "+mixed has no effect on task 'bandit' (one token per sample)"),
    ],
)
def test_legal_but_pointless_settings_are_warned_about(tmp_path, capsys, argv, warning):
    assert main(["run", "--task", "bandit", "--steps", "20", *argv, "--dry-run", "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and warning in err[0]


def test_no_warning_for_the_default_advantage_or_real_groups(tmp_path, capsys):
    for argv in (["--recipe", "pg"], ["--recipe", "vcpo"], ["--recipe", "mean"],
                 ["--recipe", "group", "--group-size", "4", "--batch-size", "32"]):
        assert main(["run", "--task", "bandit", "--steps", "20", *argv, "--dry-run", "--out", str(tmp_path)]) == 0
        assert capsys.readouterr().err == ""


def test_group_advantage_at_group_size_1_still_learns(tmp_path, capsys):
    """The warned-about setting is legal: without groups the whole batch is one group (a batch z-score), so
    advantages are not zero and the policy learns."""
    out = tmp_path / "o"
    assert main(["run", "--task", "contextual_bandit", "--recipe", "group", "--steps", "30", "--log-every", "30",
                 "--lr", "0.1", "--no-progress", "--out", str(out)]) == 0
    assert "warning: recipe 'group'" in capsys.readouterr().err
    summary = read_frame(out / "summary.csv")
    assert summary["final_test_reward"].iloc[0] > 0.5 > summary["chance_reward"].iloc[0]


def test_validate_dispatches_lazily(monkeypatch, capsys):
    seen = []
    fake = types.ModuleType("testbed.validate")
    fake.cli = lambda argv: seen.append(argv) or 0
    monkeypatch.setitem(sys.modules, "testbed.validate", fake)
    assert main(["validate", "--scorecard", "x.json"]) == 0 and seen == [["--scorecard", "x.json"]]
    monkeypatch.setitem(sys.modules, "testbed.validate", None)  # as if the module were missing
    assert main(["validate"]) == 2
    assert "`validate` is not available" in capsys.readouterr().err


def test_demo_writes_table_plot_caption_and_a_conclusion(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(["demo", "--out", str(out), "--steps", "20", "--recipes", "pg,dg", "--delays", "sync,fixed:5",
                 "--workers", "1", "--no-progress"])
    assert code == 0
    summary = pd.read_csv(out / "summary.csv")
    assert len(summary) == 4 and set(summary["delay"]) == {"sync", "fixed:5"}
    assert (out / "demo.png").stat().st_size > 10_000 and (out / "demo.pdf").exists()
    caption = (out / "demo.caption.txt").read_text()
    assert caption.startswith("MNIST as a 10-action contextual bandit") and "20 learner steps" in caption
    assert "one panel per staleness setting" in caption and "chance (guessing: test error 0.90)" in caption
    text = capsys.readouterr().out
    assert caption.strip() in text
    final = {(r.recipe, r.delay): r.final_test_error for r in summary.itertuples()}
    (lo, best), (hi, worst) = sorted((final[(r, "sync")], r) for r in ("pg", "dg"))
    assert "What ran: 2 recipe(s) (pg, dg) x 2 staleness setting(s) (sync, fixed:5) on MNIST" in text
    if f"{lo:.3f}" != f"{hi:.3f}":
        assert f"At sync the final test error ranges from {lo:.3f} ({best}: best) to {hi:.3f} ({worst}: worst)" in text
    else:
        assert f"At sync the final test error is {lo:.3f} (" in text
    change = {r: final[(r, "fixed:5")] - final[(r, "sync")] for r in ("pg", "dg")}
    most = max(change, key=change.get)
    assert f"going from sync to fixed:5, the error of {most} changes most ({change[most]:+.3f})" in text
    assert "One seed per cell" in text
    assert text.rstrip().endswith(f"Next: python -m testbed report {out}   (every setting, statuses, gradient cosines)")


def test_progress_is_plain_lines_when_not_a_terminal(tmp_path, capsys):
    """capsys is not a terminal: one plain line per interval and at the end, no carriage returns."""
    assert main(["run", "--task", "bandit", "--steps", "5", "--seeds", "3", "--loop-size", "1",
                 "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and err.splitlines()[-1].startswith("runs: 3/3 (100%), 0:00:0")


def test_result_files_get_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        assert main(["run", "--task", "bandit", "--steps", "3", "--no-progress", "--out", str(tmp_path / "o"),
                     "--format", "parquet"]) == 0
    finally:
        os.umask(old)
    files = [p for p in (tmp_path / "o").rglob("*") if p.is_file() and p.name != ".lock"]
    assert len(files) >= 6
    assert {oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {"0o644"}


def test_split_top_keeps_commas_inside_specs():
    assert split_top("pg, tis(c=2, agg=token-mean),fixed:3") == ["pg", "tis(c=2, agg=token-mean)", "fixed:3"]
    assert split_top("pg,,dg") == ["pg", "", "dg"]


@pytest.mark.slow  # a fresh interpreter importing torch
def test_module_entry_point(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "testbed", "run", "--recipe", "nope", "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown recipe or component 'nope'")
    assert len(proc.stderr.splitlines()) == 1 and proc.stdout == ""
