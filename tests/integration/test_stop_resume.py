"""Stopping a sweep without losing work (testbed/util/stopping.py): Ctrl-C stops every loop in progress between two
steps and saves it; rerunning the same command resumes it and gives exactly the results of an uninterrupted
sweep."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.checkpoint import CheckpointError
from testbed.config import RunConfig
from testbed.results import read_frame
from testbed.runner import Interrupted, Runner
from testbed.sweep import run_sweep
from testbed.tasks import make_task

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _loop_configs(steps: int = 40) -> list[RunConfig]:
    return [RunConfig(task="mnist", recipe=recipe, steps=steps, log_every=10, seed=seed, delay="bounded:8,4",
                      regime="async_grpo", group_size=5, minibatches=2)
            for seed, recipe in ((0, "grpo"), (1, "gac"), (2, "tis(c=2)+ess_lr"))]


def _without_wall(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if "wall" not in k} for row in rows]


def _stop_after(n: int):
    calls = [0]

    def stop() -> bool:
        calls[0] += 1
        return calls[0] == n

    return stop


def test_a_loop_stopped_between_steps_resumes_bit_identically(tmp_path):
    reference = Runner(_loop_configs()).run()
    runner = Runner(_loop_configs())
    with pytest.raises(Interrupted) as stopped:
        runner.run(stop=_stop_after(17))
    assert stopped.value.step == 16 and runner.next_step == 17
    path = tmp_path / "loop.pt"
    runner.save(path)
    ids = [c.run_id for c in _loop_configs()]
    resumed = Runner.load(path, make_task("mnist"), ids)
    assert resumed is not None and resumed.next_step == 17
    results = resumed.run()
    for ref, res in zip(reference, results, strict=True):
        assert res.status == ref.status == "ok"
        # str: rows hold tensors and NaN, which == does not compare as values
        assert str(_without_wall(res.rows)) == str(_without_wall(ref.rows))
        assert str(res.steps) == str(ref.steps)  # per optimizer step: cosines, ESS, GAC's actions
    assert results[0].info["wall_s"] > 0


def test_a_saved_loop_is_used_only_by_its_own_runs(tmp_path):
    runner = Runner(_loop_configs())
    with pytest.raises(Interrupted):
        runner.run(stop=_stop_after(3))
    path = tmp_path / "loop.pt"
    runner.save(path)
    ids = [c.run_id for c in _loop_configs()]
    task = make_task("mnist")
    with pytest.raises(CheckpointError, match="it holds other runs"):
        Runner.load(path, task, ids[:2])  # another loop's runs
    with pytest.raises(CheckpointError, match="it holds other runs"):
        Runner.load(path, task, [c.run_id for c in _loop_configs(steps=41)])  # other configs
    cut = tmp_path / "cut.pt"
    cut.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=r"it cannot be read \(damaged"):
        Runner.load(cut, task, ids)  # a damaged file: trained afresh
    assert not list(tmp_path.glob(".*.tmp"))


def test_ctrl_c_in_a_one_process_sweep_saves_the_loop_and_the_rerun_is_exact(tmp_path, monkeypatch, capsys):
    configs = _loop_configs(steps=30)
    run_sweep(configs, tmp_path / "ref", progress=False)
    publish = Runner.publish

    def interrupt_at_step_12(self, t):
        publish(self, t)
        if t == 12:
            signal.raise_signal(signal.SIGINT)  # what a terminal's Ctrl-C does

    monkeypatch.setattr(Runner, "publish", interrupt_at_step_12)
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt):
        run_sweep(configs, out, progress=False)
    err = capsys.readouterr().err
    assert "stopping:" in err and "saved 3 run(s) at step 13 of 30" in err
    assert len(list((out / "checkpoints").glob("loop-*.pt"))) == 1 and not list((out / "runs").glob("*.json"))
    monkeypatch.setattr(Runner, "publish", publish)
    run_sweep(configs, out, progress=False)
    assert "resuming 3 run(s) at step 13 of 30" in capsys.readouterr().err
    assert (out / "results.csv").read_bytes() == (tmp_path / "ref" / "results.csv").read_bytes()
    assert not (out / "checkpoints").exists()


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="sends the terminal's Ctrl-C to a process group")
def test_ctrl_c_of_a_two_worker_sweep_saves_every_loop_in_progress_and_the_rerun_is_exact(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[base]\ntask = "mnist"\nrecipe = "pg"\nsteps = 400\nlog_every = 100\nseeds = 8\n')
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TESTBED_PROGRESS_INTERVAL": "0"}
    cmd = [sys.executable, "-m", "testbed", "sweep", str(sweep), "--out", str(out), "--workers", "2", "--loop-size", "4"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stderr:  # "runs: 0.3/8 (4%), ..." once the workers have taken steps
            if line.startswith("runs: ") and float(line.split()[1].split("/")[0]) > 0:
                break
        t0 = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 130, err
        assert time.monotonic() - t0 < 30, "stopping took longer than a few steps"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    saved = list((out / "checkpoints").glob("loop-*.pt"))
    finished = list((out / "runs").glob("*.json"))
    assert err.count("saved 4 run(s) at step") == len(saved) >= 1, err
    assert len(finished) + 4 * len(saved) <= 8 and "Traceback" not in err
    rerun = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert rerun.stderr.count("resuming 4 run(s) at step") == len(saved)
    configs = [RunConfig(task="mnist", recipe="pg", steps=400, log_every=100, seed=s) for s in range(8)]
    run_sweep(configs, tmp_path / "ref", progress=False)
    ours, ref = read_frame(out / "results.csv"), read_frame(tmp_path / "ref" / "results.csv")
    assert ours.sort_values(["run_id", "step"]).reset_index(drop=True).equals(
        ref.sort_values(["run_id", "step"]).reset_index(drop=True))
    assert not (out / "checkpoints").exists()


def test_a_shared_store_keeps_the_saved_loops_of_other_commands(tmp_path):
    """The figures cache is one store for many commands: finishing one command leaves another's saved loop."""
    other = tmp_path / "checkpoints" / "loop-0123456789ab.pt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"another command's loop")
    configs = [RunConfig(task="bandit", steps=4, log_every=2, seed=0)]
    run_sweep(configs, tmp_path, progress=False, shared=True)
    assert other.is_file()


def test_a_loop_resumed_on_another_machine_records_both(tmp_path, monkeypatch):
    from testbed import runner as runner_module
    from testbed.machine import describe, trained_by
    from testbed.results import ResultStore
    from testbed.util.provenance import machine

    configs = _loop_configs(steps=12)
    runner = Runner(configs)
    with pytest.raises(Interrupted):
        runner.run(stop=_stop_after(5))
    path = tmp_path / "loop.pt"
    runner.save(path)
    other = {**machine(), "cpu": "Another CPU", "cpu_capability": "AVX512"}
    monkeypatch.setattr(runner_module, "machine", lambda: other)
    resumed = Runner.load(path, make_task("mnist"), [c.run_id for c in configs])
    results = resumed.run()
    trained_on = results[0].info["trained_on"]
    assert [p["from_step"] for p in trained_on] == [0, 5]
    assert [describe(p["machine"]) for p in trained_on] == [describe(machine()), describe(other)]
    store = ResultStore(tmp_path / "out")
    store.save(results[0])
    assert trained_by(store.record(configs[0].run_id)) == f"{describe(machine())} then {describe(other)}"
    # the same machine again adds nothing: a loop resumed where it stopped names one machine
    again = Runner(configs)
    with pytest.raises(Interrupted):
        again.run(stop=_stop_after(3))
    assert "trained_on" not in again.run()[0].info
