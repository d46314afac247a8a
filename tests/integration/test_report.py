"""Results read back exactly (run ids of every dangerous shape) and `testbed report` on any mix of statuses,
never pooling runs that differ in a setting."""

from __future__ import annotations

import pandas as pd
import pytest

import testbed.sweep as sweep_mod
from testbed.cli import main
from testbed.config import RunConfig
from testbed.report import report
from testbed.results import read_frame
from testbed.sweep import expand, run_sweep

pytestmark = pytest.mark.integration

# Run ids a hash could produce that type inference would mangle (all digits, digits-e-digits, leading zeros,
# a hex-looking number), and words CSV readers turn into missing values or booleans.
DANGEROUS_IDS = ["123456789012", "6373307046e6", "000000001234", "0000000e0000", "1e5", "0x1f", "1_000", "nan",
                 "NaN", "inf", "-inf", "None", "NA", "null", "True", "007"]


@pytest.fixture
def dangerous_ids(monkeypatch):
    """Run ids by seed: seed i gets DANGEROUS_IDS[i] (the real ids are config hashes)."""
    monkeypatch.setattr(RunConfig, "run_id", property(lambda self: DANGEROUS_IDS[self.seed]))
    return DANGEROUS_IDS


def test_run_ids_of_every_dangerous_shape_round_trip(tmp_path, dangerous_ids, capsys, monkeypatch):
    out = tmp_path / "out"
    n = len(dangerous_ids)
    assert main(["run", "--task", "bandit", "--steps", "4", "--log-every", "2", "--seeds", str(n), "--no-progress",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    hazard = pd.read_csv(out / "summary.csv")["run_id"].tolist()  # what type inference makes of them
    assert hazard != dangerous_ids
    summary = read_frame(out / "summary.csv")
    assert summary["run_id"].tolist() == dangerous_ids  # every id, as written, in order
    assert summary["final_test_error"].notna().all() and summary["final_step"].tolist() == [4] * n
    table = read_frame(out / "results.csv")
    assert table["run_id"].tolist() == [i for i in dangerous_ids for _ in range(2)]
    assert table.groupby("run_id", sort=False)["step"].apply(list).tolist() == [[2, 4]] * n
    assert main(["report", str(out), "--runs"]) == 0
    text = capsys.readouterr().out
    assert f"{n} runs in {out}: {n} ok" in text and f"(n={n})" in text
    listing = text.split("\nruns:\n")[1].split("\n\n")[0].splitlines()
    lines = {line.split()[0]: line for line in listing}
    assert set(lines) == set(dangerous_ids)  # every id listed verbatim, none lost or merged
    for seed, run_id in enumerate(dangerous_ids):
        final = summary.loc[seed, "final_test_error"]
        assert lines[run_id].endswith(f"seed={seed}: ok, final_test_error {final:.3f}")

    monkeypatch.setattr(sweep_mod, "Runner", lambda cfgs: pytest.fail("a finished run was trained again"))
    assert main(["run", "--task", "bandit", "--steps", "4", "--log-every", "2", "--seeds", str(n), "--no-progress",
                 "--out", str(out)]) == 0  # every run is recognised as done by its id
    assert read_frame(out / "summary.csv")["run_id"].tolist() == dangerous_ids


def table_of(text: str) -> list[list[str]]:
    """The words of the report's table lines (header first)."""
    lines = text.split(" by setting (")[1].split("\n\n")[0].splitlines()[1:]
    return [ln.split() for ln in lines if not ln.startswith("grad_cos_prev:")]


def test_report_when_every_run_diverged(tmp_path):
    configs = expand({"base": {"task": "contextual_bandit", "steps": 30, "log_every": 5, "batch_size": 8, "lr": 1e38,
                               "seeds": 2}})
    run_sweep(configs, tmp_path, progress=False)
    summary = read_frame(tmp_path / "summary.csv")
    assert summary["status"].tolist() == ["diverged", "diverged"]
    text = report(tmp_path)
    assert "2 runs in" in text and "0 ok, 2 diverged" in text
    assert table_of(text) == [["setting", "final_test_error", "runs", "ok", "diverged"],
                              ["(all", "runs)", "n/a", "2", "0", "2"]]
    at = summary["diverged_at"].astype(int).tolist()
    for run_id, step in zip(summary["run_id"], at, strict=True):
        assert f"  {run_id} seed=" in text and f": diverged at step {step}" in text


def test_report_never_pools_two_learning_rates_as_seeds(tmp_path):
    configs = expand({"base": {"task": "contextual_bandit", "steps": 20, "log_every": 10, "batch_size": 8, "seeds": 2},
                      "grid": {"lr": [0.05, 0.5]}})
    run_sweep(configs, tmp_path, progress=False)
    summary = read_frame(tmp_path / "summary.csv")
    text = report(tmp_path)
    assert table_of(text)[0] == ["lr", "final_test_error", "runs", "ok", "grad_cos_prev"]
    for lr in (0.05, 0.5):
        errs = summary[summary["lr"] == lr]["final_test_error"]
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(f"{lr:.4g} "))
        assert f"{errs.mean():.3f} +- {errs.std():.3f} (n=2)" in line
    pooled = summary["final_test_error"]
    assert "(n=4)" not in text and f"{pooled.mean():.3f} +- {pooled.std():.3f}" not in text
    assert "same in every run: task=contextual_bandit, recipe=pg" in text and "lr=" not in text.split("\n")[1]


def test_report_on_a_mix_of_ok_collapsed_diverged_and_failed_runs(tmp_path, monkeypatch):
    real = sweep_mod.Runner

    def fail_sgd(cfgs):
        if any(c.optimizer == "sgd" for c in cfgs):
            raise MemoryError("simulated")
        return real(cfgs)

    monkeypatch.setattr(sweep_mod, "Runner", fail_sgd)
    configs = expand({"base": {"task": "mnist", "steps": 20, "log_every": 10},
                      "grid": {"lr": [1e-3, 1e3, 1e38], "optimizer": ["adam", "sgd"]}})
    run_sweep(configs, tmp_path, progress=False)
    summary = read_frame(tmp_path / "summary.csv")
    status = dict(zip(zip(summary["lr"], summary["optimizer"]), summary["status"], strict=True))
    assert status[(1e-3, "adam")] == "ok" and status[(1e3, "adam")] == "collapsed"
    assert status[(1e38, "adam")] == "diverged" and {status[(lr, "sgd")] for lr in (1e-3, 1e3, 1e38)} == {"failed"}
    collapsed = summary[summary["status"] == "collapsed"].iloc[0]
    assert collapsed["chance_reward"] == pytest.approx(0.1) and collapsed["final_entropy"] < 0.05
    assert collapsed["final_test_reward"] <= 0.1 + 0.1 * 0.9
    text = report(tmp_path)
    assert "6 runs in" in text and "1 ok, 1 collapsed, 1 diverged, 3 failed" in text
    assert "failed: MemoryError: simulated" in text and "collapsed: held-out reward" in text
    assert table_of(text)[0] == ["lr", "optimizer", "final_test_error", "runs", "ok", "collapsed", "diverged", "failed",
                                 "grad_cos_prev"]


def test_report_on_tables_without_expected_columns(tmp_path, capsys):
    (tmp_path / "summary.csv").write_text("run_id,status\nabc,ok\n")  # no config, no metric
    assert main(["report", str(tmp_path)]) == 0
    assert "1 runs in" in capsys.readouterr().out
    (tmp_path / "summary.csv").write_text("run_id,status,recipe,final_test_error\nabc,ok,pg,oops\n")
    assert main(["report", str(tmp_path)]) == 0
    assert "n/a" in capsys.readouterr().out
    (tmp_path / "summary.csv").write_text("recipe,delay\npg,sync\n")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "lacks column(s) run_id, status" in err[0]
