"""What a plan refuses or says before training: an lr that overflows float32, lags past the run's length, group
advantages without groups, saved loops it resumes or cannot, the disk a stop's checkpoints need; a checkpoint that
does not fit on disk; the recipe list and the validate table naming what they show."""

from __future__ import annotations

import json

import pytest

from testbed import sweep as sweep_mod
from testbed.cli import main
from testbed.config import RunConfig
from testbed.plan import plan_sweep
from testbed.results import ResultStore
from testbed.runner import Interrupted, Runner
from testbed.util.errors import RunFailed, UsageError
from testbed.validate import format_card
from tests.integration.test_stop_resume import _stop_after


def one_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_an_lr_that_overflows_float32_is_refused_at_validation(tmp_path, capsys):
    assert main(["run", "--task", "bandit", "--steps", "3", "--lr", "1e300", "--out", str(tmp_path / "o")]) == 2
    assert one_error(capsys) == ("error: lr 1e+300 is too large for float32 parameters (every update would overflow "
                                 "them); lr must be at most 1e+38")
    assert not (tmp_path / "o").exists()
    assert plan_sweep([RunConfig(task="bandit", steps=3, lr=1e38)], tmp_path / "p").todo  # the bound itself passes


@pytest.mark.parametrize("delay, lag", [("uniform:5000", 5000), ("bounded:5000", 5000), ("geometric:0.001,5000", 5000)])
def test_lags_past_the_run_are_warned(tmp_path, delay, lag):
    plan = plan_sweep([RunConfig(task="bandit", steps=100, delay=delay)], tmp_path / "o")
    (line,) = plan.warnings
    assert line.startswith(f"delay {delay!r} with 100 steps: its lags reach {lag}, past the run's length")
    assert plan_sweep([RunConfig(task="bandit", steps=100, delay="uniform:50")], tmp_path / "o").warnings == []


def test_grpo_without_groups_is_warned(tmp_path):
    (line,) = plan_sweep([RunConfig(task="bandit", steps=10, recipe="grpo", group_size=1)], tmp_path / "o").warnings
    assert "recipe 'grpo' normalises advantages within prompt groups, but group_size is 1" in line
    assert plan_sweep([RunConfig(task="bandit", steps=10, recipe="vcpo", group_size=1)], tmp_path / "o").warnings == []


def _mnist(n: int = 4, delay: str = "fixed:20") -> list[RunConfig]:
    return [RunConfig(task="mnist", delay=delay, steps=60, log_every=20, seed=s) for s in range(n)]


def test_dry_run_counts_the_checkpoint_a_stop_writes(tmp_path):
    """The plan's checkpoint share of the disk is at least what saving the loop really writes."""
    configs = _mnist()
    plan = plan_sweep(configs, tmp_path / "o", loop_size=4)
    runner = Runner(configs)
    stop = _stop_after(30)
    with pytest.raises(Interrupted):
        runner.run(stop=stop)
    runner.save(tmp_path / "loop.pt")
    size = (tmp_path / "loop.pt").stat().st_size
    assert size <= plan.checkpoint_disk <= 4 * size  # an upper bound, not a wild one
    assert f"{plan.checkpoint_disk}" and "of it for the loops a stop saves" in plan.describe()


def test_saved_loops_are_announced_resumed_or_dropped(tmp_path):
    configs = _mnist(2)
    out = tmp_path / "o"
    store = ResultStore(out)
    plan = plan_sweep(configs, out, loop_size=2, create=True)
    (out / "checkpoints").mkdir()
    store.checkpoint([c.run_id for c in configs]).write_bytes(b"x")  # this plan's one loop
    (out / "checkpoints" / "loop-0123456789ab.pt").write_bytes(b"x")  # a loop of another grouping
    plan = plan_sweep(configs, out, loop_size=2)
    assert plan.saved_loops[0] == 1 and [p.name for p in plan.saved_loops[1]] == ["loop-0123456789ab.pt"]
    lines = plan.reuse_lines()
    assert lines[0].startswith("1 saved loop(s) in") and lines[0].endswith("resume at their step")
    assert lines[1].startswith("1 saved loop(s) in") and "--workers or --loop-size changed" in lines[1]
    regrouped = plan_sweep(configs, out, loop_size=1)  # the saved loop of two no longer matches
    assert regrouped.saved_loops[0] == 0 and len(regrouped.saved_loops[1]) == 2


def test_a_checkpoint_that_does_not_fit_is_one_line(tmp_path, monkeypatch):
    def full(self, path):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file")

    monkeypatch.setattr(Runner, "save", full)
    configs = _mnist(2)
    stop = _stop_after(5)
    with pytest.raises(RunFailed) as failed:
        sweep_mod._train(configs, ResultStore(tmp_path), {}, stop=stop)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("cannot save the loop of 2 run(s) at step 4 in")
    assert "no space left on the disk" in message and "this loop starts over when the command is rerun" in message


def test_list_names_each_recipe_with_its_kind_and_formula(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "  tis (surrogate): Truncated importance sampling: objective sg(clip(w, lo, c)) * A * log pi_theta\n" in out
    assert "  vcpo (recipe): VCPO (arXiv 2602.17616)" in out and "  gac_projection (transform): " in out


def test_validate_table_names_its_metric():
    cell = {"task": "mnist", "staleness": "fixed:4", "metric": "test_reward", "recipe_value": 0.8, "pg_value": 0.5,
            "sync_value": 0.9, "score": 0.75, "status": "ok"}
    text = format_card({"cells": [cell], "recipe": "dg", "score": 0.75, "threshold": 0.5, "passed": True})
    assert text.splitlines()[0].startswith("recipe, pg, sync: final held-out test_reward (mean of the last two")
    with pytest.raises(UsageError):
        plan_sweep([], "x")


def _bandit(n: int = 2) -> list[RunConfig]:
    return [RunConfig(task="bandit", delay="fixed:2", steps=20, log_every=10, seed=s) for s in range(n)]


def test_a_saved_loop_that_cannot_be_used_is_announced_and_trained_afresh(tmp_path, capsys):
    configs = _bandit()
    store = ResultStore(tmp_path)
    checkpoint = store.checkpoint([c.run_id for c in configs])
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"not a checkpoint")
    assert sweep_mod._train(configs, store, {}) == ["ok", "ok"]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"not resuming the saved loop {str(checkpoint)!r}: it cannot be read (damaged, or saved by a "
                    "version that wrote another format); its 2 run(s) start over")
    assert not checkpoint.exists()


def test_a_saved_loop_of_other_code_is_not_resumed(tmp_path, capsys):
    configs = _bandit()
    store = ResultStore(tmp_path)
    stop = _stop_after(6)
    with pytest.raises(KeyboardInterrupt):
        sweep_mod._train(configs, store, {}, stop=stop)
    checkpoint = store.checkpoint([c.run_id for c in configs])
    code_file = checkpoint.with_suffix(".code.json")
    code = json.loads(code_file.read_text())
    assert len(code) == 2 and set(code[0]) == {"advantage auto", "surrogate pg", "task bandit", "loop"}
    code_file.write_text(json.dumps([{**c, "surrogate pg": "edited"} for c in code]))
    capsys.readouterr()
    assert sweep_mod._train(configs, store, {}) == ["ok", "ok"]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith("the code of surrogate pg changed since it was saved; its 2 run(s) start over")
    assert not checkpoint.exists() and not code_file.exists()


def test_lag_max_stays_an_integer_beside_a_diverged_loop_mate(tmp_path):
    from testbed.state import RunResult

    store = ResultStore(tmp_path)
    a, b = _bandit()
    store.save(RunResult(a.resolved(), [{"step": 10, "lag_max": 2, "reward": 0.5}], "ok", {}))
    store.save(RunResult(b.resolved(), [{"step": 10, "lag_max": 2, "reward": 0.5}, {"step": 11, "diverged_at": 11}],
                         "diverged", {}))
    store.finish([a, b])
    text = (tmp_path / "results.csv").read_text()
    header = text.splitlines()[0].split(",")
    rows = [line.split(",") for line in text.splitlines()[1:]]
    assert [r[header.index("lag_max")] for r in rows] == ["2", "2", ""]
    assert [r[header.index("diverged_at")] for r in rows] == ["", "", "11"]
