"""Faults: a read-only or full output directory is one clear error before training; a full disk while
working is exit 1 with finished runs kept; a SIGKILLed sweep leaves no orphaned workers and resumes
exactly; one sweep per directory; an internal error is exit 1 with its traceback in a log file."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import testbed.limits as limits_mod
import testbed.results as results_mod
import testbed.util.files as files_mod
from testbed.cli import main
from testbed.results import ResultStore, read_frame

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RUN = ["run", "--task", "bandit", "--steps", "4", "--log-every", "2", "--seeds", "3", "--loop-size", "1",
       "--no-progress"]


def one_error(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "Traceback" not in captured.err, captured
    return err[0]


@pytest.fixture
def readonly_dir(tmp_path):
    """A directory nobody may write into: mode 0555 for a normal user; for root (whom modes do not stop), the
    immutable attribute (chattr +i)."""
    path = tmp_path / "ro"
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        yield path
        path.chmod(0o755)
        return
    if subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root on a file system without chattr +i: no way to make a read-only directory")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@pytest.mark.parametrize("sub", ["", "new/deeper"])
def test_read_only_output_directory_is_refused_before_training(readonly_dir, capsys, monkeypatch, sub):
    monkeypatch.setattr("testbed.sweep.Runner", lambda cfgs: pytest.fail("training started"))
    out = readonly_dir / sub if sub else readonly_dir
    assert main([*RUN, "--out", str(out)]) == 2
    line = one_error(capsys)
    assert line.startswith(f"error: --out {str(out)!r}") and ("permission denied" in line or "read-only" in line)
    assert list(readonly_dir.iterdir()) == []


def test_full_disk_is_refused_before_training(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("testbed.sweep.Runner", lambda cfgs: pytest.fail("training started"))
    real_write = os.write

    def full(fd, data):  # the kernel's answer on a full disk, for the probe file only
        if os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[-1].startswith(".write-test."):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(limits_mod.os, "write", full)
    assert main([*RUN, "--out", str(tmp_path / "a" / "b")]) == 2
    assert one_error(capsys) == f"error: --out {str(tmp_path / 'a' / 'b')!r} is not writable: the disk is full (no " \
                                "space left on device)"
    assert list(tmp_path.iterdir()) == []  # the directories it made for the check are gone again


def test_results_that_cannot_fit_on_disk_are_refused_with_the_estimate(tmp_path, capsys, monkeypatch):
    class Usage:
        free = 50_000

    monkeypatch.setattr(limits_mod.shutil, "disk_usage", lambda path: Usage)
    assert main([*RUN, "--out", str(tmp_path / "o")]) == 2
    line = one_error(capsys)
    assert "the results of 3 run(s) need about" in line and "on disk under" in line and "but 48.8 KiB is free" in line
    assert not (tmp_path / "o").exists()


def test_disk_filling_up_while_working_is_exit_1_and_resumable(tmp_path, capsys, monkeypatch):
    out = tmp_path / "o"
    real, calls = results_mod.atomic_write_text, []

    def filling(path, text):
        calls.append(path)
        if len(calls) > 7:  # config.json, then three files per run: the third run cannot be saved
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, text)

    for module in (results_mod, files_mod):  # the store's JSON records, and its tables through atomic_write_frame
        monkeypatch.setattr(module, "atomic_write_text", filling)
    assert main([*RUN, "--out", str(out)]) == 1
    line = one_error(capsys)
    assert line.startswith("error: No space left on device (") and "finished runs are saved" in line
    assert len(list((out / "runs").glob("*.json"))) == 2
    for module in (results_mod, files_mod):
        monkeypatch.setattr(module, "atomic_write_text", real)
    assert main([*RUN, "--out", str(out)]) == 0  # space freed: the rerun finishes the last run
    assert read_frame(out / "summary.csv")["status"].tolist() == ["ok"] * 3
    assert main([*RUN, "--out", str(tmp_path / "fresh")]) == 0
    assert (out / "results.csv").read_bytes() == (tmp_path / "fresh" / "results.csv").read_bytes()


def test_internal_error_outside_a_run_is_exit_1_with_a_log(tmp_path, capsys, monkeypatch):
    def broken(self, configs, fmt="csv", shared=False):
        raise KeyError("no such column")

    monkeypatch.setattr(ResultStore, "finish", broken)
    out = tmp_path / "o"
    assert main([*RUN, "--out", str(out)]) == 1
    line = one_error(capsys)
    assert line.startswith("error: internal error (KeyError: 'no such column'); traceback in ")
    log = Path(line.rsplit("traceback in ", 1)[1])
    assert log.parent == out and "Traceback" in log.read_text() and "KeyError: 'no such column'" in log.read_text()


def test_one_sweep_per_directory(tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    with open(out / ".lock", "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242")
        held.flush()
        assert main([*RUN, "--out", str(out)]) == 2
        assert one_error(capsys) == f"error: another process (pid 4242) is writing to {str(out)!r}; wait for it to " \
                                    "finish or choose another --out"
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    assert main([*RUN, "--out", str(out)]) == 0  # the lock died with its holder


def test_temporary_files_of_a_killed_writer_are_cleaned_up(tmp_path):
    out = tmp_path / "o"
    (out / "runs").mkdir(parents=True)
    stale = [out / ".results.csv.abc.tmp", out / "runs" / ".123.csv.xyz.tmp"]
    for path in stale:
        path.write_text("partial")
    assert main([*RUN, "--out", str(out)]) == 0
    assert not any(p.exists() for p in stale)


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(entry.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its exit status is left


def _wait(condition, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process ids from /proc")
def test_a_worker_ends_when_its_parent_is_killed(tmp_path):
    script = ("import multiprocessing as mp, os, sys, time\n"
              "from tests.integration.sleeper_child import sleep_forever\n"
              "if __name__ == '__main__':\n"
              "    p = mp.get_context('spawn').Process(target=sleep_forever, args=(os.getpid(),))\n"
              "    p.start(); print(p.pid, flush=True); time.sleep(600)\n")
    (tmp_path / "parent.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen([sys.executable, str(tmp_path / "parent.py")], stdout=subprocess.PIPE, text=True, env=env,
                              cwd=ROOT, start_new_session=True)
    try:
        child = int(parent.stdout.readline())
        assert _alive(child)
        time.sleep(0.5)  # the child has armed its watchdog
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait(lambda: not _alive(child), 5.0), "the worker outlived its killed parent"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


@pytest.mark.slow  # three sweeps in fresh interpreters with worker processes: about 40 s
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads process ids from /proc")
def test_sigkill_of_a_two_worker_sweep_orphans_nothing_and_rerun_is_exact(tmp_path):
    sweep = tmp_path / "s.toml"
    sweep.write_text('[base]\ntask = "mnist"\nsteps = 150\nlog_every = 50\n[grid]\nrecipe = ["pg", "dg"]\n'
                     'seed = [0, 1, 2, 3, 4, 5]\n')
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "testbed", "sweep", str(sweep), "--out", str(out), "--workers", "2", "--loop-size",
           "1", "--no-progress"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        assert _wait(lambda: len(list((out / "runs").glob("*.json"))) >= 2, 240), "no run finished"
        workers = [p for p in _children(proc.pid) if _alive(p)]
        assert len(workers) >= 2  # the two workers (and multiprocessing's resource tracker)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        assert _wait(lambda: not any(_alive(p) for p in workers), 5.0), "worker processes outlived the sweep"
        finished = sorted(p.name for p in (out / "runs").glob("*.json"))
        assert 2 <= len(finished) < 12
        time.sleep(2)
        assert sorted(p.name for p in (out / "runs").glob("*.json")) == finished  # nobody writes after the kill
    finally:  # whatever happened, nothing of this sweep's process group is left running
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    rerun = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    reference = subprocess.run([*cmd[:6], str(tmp_path / "ref"), "--workers", "1", "--no-progress"], env=env, cwd=ROOT,
                               capture_output=True, text=True, timeout=600)
    assert reference.returncode == 0, reference.stderr
    assert (out / "results.csv").read_bytes() == (tmp_path / "ref" / "results.csv").read_bytes()
    summary = read_frame(out / "summary.csv")
    assert len(summary) == 12 and summary["run_id"].is_unique and set(summary["status"]) == {"ok"}
    assert len(list((out / "runs").glob("*.json"))) == 12 and not list(out.rglob("*.tmp"))


def test_figures_disk_refusal_names_the_figures_options(tmp_path, capsys, monkeypatch):
    """The testbed's refusal names --out and --log-every; ``figures`` has neither and says --cache / --quick."""
    from figures.__main__ import main as figures_main

    class Usage:
        free = 50_000

    monkeypatch.setattr(limits_mod.shutil, "disk_usage", lambda path: Usage)
    assert figures_main(["mnist_delay", "--quick", "--out", str(tmp_path / "f"), "--cache", str(tmp_path / "c")]) == 2
    line = one_error(capsys)
    assert "on disk under" in line and "but 48.8 KiB is free" in line
    assert line.endswith("free some space, choose another --cache, or use --quick") and "--log-every" not in line


def test_a_read_only_directory_has_one_wording_with_and_without_dry_run(readonly_dir, capsys):
    lines = []
    for extra in ([], ["--dry-run"]):
        assert main([*RUN, "--out", str(readonly_dir / "new"), *extra]) == 2
        lines.append(one_error(capsys))
    assert lines[0] == lines[1] and lines[0].startswith(f"error: --out {str(readonly_dir / 'new')!r} is not writable: ")
    assert list(readonly_dir.iterdir()) == []
