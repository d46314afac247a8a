"""Trainer processes that a study starts, and that end with it.

`train_job` is one study run as a job of an executor (testbed/util/executor.py: the local process pool or Ray):
it starts the trainer, waits for it, and interrupts it at the study's deadline or when the study is asked to stop.

`start_trainer` starts ``python -m llm_scale ARGV`` in a process group of its own (so that the study can
signal a trainer with everything the trainer started) and, on Linux, with the parent-death signal armed
(``prctl(PR_SET_PDEATHSIG, SIGTERM)``): when the study is killed, even by SIGKILL, the kernel ends its
trainers, so no orphan goes on writing to a run directory that a rerun would write to as well (each
trainer also holds its directory's writer lock, testbed/util/files.py `one_writer`). `stop_trainers`
interrupts every trainer still running (SIGINT to its group: it stops after its current update and keeps
its last checkpoint, which the next study resumes), waits for them, and kills those that do not end.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from typing import IO, Any

from testbed.util.executor import add_done, stop_requested
from testbed.util.workers import set_parent_death_signal

_RUNNING: list[subprocess.Popen] = []


def _arm_parent_death(parent: int) -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux); exit at once if it already has."""
    set_parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(1)


def start_trainer(argv: list[str], stdout: IO[Any], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python -m llm_scale *argv`` (output to ``stdout``) in its own process group, to end with this
    process (module docstring)."""
    parent = os.getpid()
    proc = subprocess.Popen([sys.executable, "-m", "llm_scale", *argv], stdout=stdout, stderr=subprocess.STDOUT,
                            env=env, start_new_session=True,
                            preexec_fn=lambda: _arm_parent_death(parent))
    _RUNNING[:] = [p for p in _RUNNING if p.poll() is None] + [proc]
    return proc


def running() -> list[subprocess.Popen]:
    """The trainers started here that have not ended."""
    return [p for p in _RUNNING if p.poll() is None]


def stop_trainers(timeout_s: float = 60.0) -> int:
    """Interrupt every running trainer (SIGINT to its group), wait up to ``timeout_s`` for each, kill those that do not end.
    Returns how many were running."""
    procs = running()
    for proc in procs:
        _signal(proc, signal.SIGINT)
    for proc in procs:
        _wait_or_kill(proc, timeout_s)
    _RUNNING.clear()
    return len(procs)


def interrupt(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """SIGINT to ``proc``'s group (a trainer stops after its current update and keeps its last checkpoint); kill
    the group if it has not ended after ``timeout_s``."""
    _signal(proc, signal.SIGINT)
    _wait_or_kill(proc, timeout_s)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _wait_or_kill(proc: subprocess.Popen, timeout_s: float) -> None:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _signal(proc, signal.SIGKILL)
        proc.wait()


def train_job(argv: list[str], log_path: str, env: dict[str, str], deadline: float, poll_s: float = 1.0) -> str:
    """Run ``python -m llm_scale *argv`` (output appended to ``log_path``) to its end, in a job of an executor:
    "exited" once it ends by itself; "interrupted" when the wall clock (``time.time()``) passes ``deadline`` or
    the command is asked to stop (`stop_requested`) first (the trainer is interrupted and keeps its last
    checkpoint); "not started" when the deadline had passed before it could start."""
    if time.time() >= deadline or stop_requested():
        return "not started"
    with open(log_path, "a") as log:
        proc = start_trainer(argv, log, env)
        while proc.poll() is None:
            if time.time() >= deadline or stop_requested():
                interrupt(proc)
                add_done(1.0)
                return "interrupted"
            time.sleep(poll_s)
    add_done(1.0)  # the command's count of ended runs (its progress line)
    return "exited"
