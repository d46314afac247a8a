"""One writer per run directory, and a study's trainers end with the study (llm_scale/processes.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.util.files import DirectoryBusy, one_writer

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ["train", "--model", "tiny", "--task", "copy", "--recipe", "pg", "--max-staleness", "1", "--steps", "100000"]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (ended, not yet reaped) counts as ended
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return True


def test_one_writer_refuses_a_second_with_the_pid(tmp_path):
    with one_writer(tmp_path):
        assert (tmp_path / ".lock").read_text() == str(os.getpid())
        r = subprocess.run([sys.executable, "-m", "llm_scale", *TRAIN[:-1], "5", "--out", str(tmp_path)], env=env(),
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"error: another process (pid {os.getpid()}) is writing to {str(tmp_path)!r}; "
                                         "wait for it to finish or give another --out")
    assert not (tmp_path / "metrics.csv").exists()
    # flock is per open file: a second holder in this very process is refused too
    with one_writer(tmp_path), pytest.raises(DirectoryBusy, match=f"pid {os.getpid()}"), one_writer(tmp_path):
        pass


PARENT = """
import sys, time
from llm_scale.processes import start_trainer
proc = start_trainer(sys.argv[1:], open(sys.argv[-1] + '.log', 'w'))
print(proc.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_killed_study_leaves_no_trainer_running(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", PARENT, *TRAIN, "--out", str(tmp_path / "run")], env=env(),
                              stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert alive(child) and os.getpgid(child) == child  # a process group of its own
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def test_stop_trainers_interrupts_them(tmp_path):
    from llm_scale.processes import running, start_trainer, stop_trainers

    out = tmp_path / "run"
    with open(tmp_path / "log", "w") as log:
        proc = start_trainer([*TRAIN, "--out", str(out)], log, env())
    deadline = time.monotonic() + 240
    while not (out / "metrics.csv").exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert running() == [proc]
    assert stop_trainers(timeout_s=60) == 1
    assert proc.returncode == 130 and running() == []
    assert "interrupted at update" in (tmp_path / "log").read_text()


def test_ctrl_c_of_the_study_is_one_line_and_stops_its_trainers(tmp_path, monkeypatch, capsys):
    import llm_scale.study
    from llm_scale import processes
    from llm_scale.cli import main

    with open(tmp_path / "log", "w") as log:
        proc = processes.start_trainer([*TRAIN, "--out", str(tmp_path / "run")], log, env())

    def interrupted(argv):
        deadline = time.monotonic() + 240
        while not (tmp_path / "run" / "metrics.csv").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        raise KeyboardInterrupt

    monkeypatch.setattr(llm_scale.study, "main", interrupted)
    assert main(["study", "sweep.toml"]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "study interrupted: every running trainer stopped at its last checkpoint; rerun the same command to resume"]
    assert proc.returncode == 130 and not alive(proc.pid)


def test_a_removed_lock_file_cannot_admit_a_second_writer(tmp_path, monkeypatch):
    """A writer that opened the lock file just before the finished writer removed it (and a third made a new one)
    gets the old file's lock, which is no longer the directory's: it refuses."""
    import fcntl

    with one_writer(tmp_path, remove=True):
        pass
    assert not (tmp_path / ".lock").exists()  # a finished writer leaves nothing
    real = fcntl.flock

    def racing(fh, op):  # between this writer's open and its lock: removed, and a newer lock file made
        (tmp_path / ".lock").unlink()
        (tmp_path / ".lock").write_text("999")
        return real(fh, op)

    monkeypatch.setattr(fcntl, "flock", racing)
    with pytest.raises(DirectoryBusy, match="writing to"), one_writer(tmp_path):
        pass


def test_a_study_job_runs_its_trainer_to_the_end_or_interrupts_it(tmp_path, monkeypatch):
    """`train_job`: a run that ends by itself -> "exited"; asked to stop while training -> its trainer gets SIGINT,
    stops after its update and keeps its checkpoint ("interrupted"); a deadline already past -> nothing starts."""
    import json

    from llm_scale import processes

    short = [*TRAIN[:-1], "2", "--out", str(tmp_path / "short")]
    assert processes.train_job(short, str(tmp_path / "short.log"), env(), time.time() + 600) == "exited"
    assert json.loads((tmp_path / "short" / "summary.json").read_text())["status"] == "finished"
    from llm_scale.trainer import CODE_FILE, code_changed, run_code
    from testbed.stabilizers import build

    recorded = json.loads((tmp_path / "short" / CODE_FILE).read_text())  # the code the run started with
    assert recorded == run_code(build("pg")) and set(recorded) == {"trainer", "advantage auto", "surrogate pg"}
    assert code_changed(tmp_path / "short", "pg") == []
    out = tmp_path / "long"
    monkeypatch.setattr(processes, "stop_requested", lambda: (out / "metrics.csv").exists())
    long = [*TRAIN, "--checkpoint-every", "1", "--out", str(out)]
    assert processes.train_job(long, str(tmp_path / "long.log"), env(), time.time() + 600, poll_s=0.2) == "interrupted"
    assert "interrupted at update" in (tmp_path / "long.log").read_text() and processes.running() == []
    assert processes.train_job(long, str(tmp_path / "late.log"), env(), time.time() - 1) == "not started"
    assert not (tmp_path / "late.log").exists()
