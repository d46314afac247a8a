"""Stopping a sweep without losing work.

The first Ctrl-C (SIGINT) or SIGTERM asks every loop in progress to stop after its current learner step:
the loop is then whole (every run at the same version) and saves itself (`testbed.state.Interrupted`,
`Runner.save`, in ``OUT/checkpoints/``); loops not yet started are not started; finished runs are on disk
already. Rerunning the same command resumes each saved loop at its step and finishes it exactly as an
uninterrupted one would have. A second Ctrl-C stops at once (the loops in progress then start over).

A terminal's Ctrl-C reaches every process of the foreground group, the sweep's worker processes included:
a worker only notes it (`note_in_worker`), and the parent's request reaches workers that did not see the
signal (a ``kill -INT`` of the parent alone, a SIGTERM) through a shared event.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

STOPPING = ("stopping: the loops in progress save themselves after their current step (finished runs are saved); "
            "Ctrl-C again to stop at once")


class StopRequest:
    """Whether a stop was asked, in this process or (through ``event``, a multiprocessing Event) by the parent."""

    def __init__(self, event: Any = None) -> None:
        self.event = event
        self.local = False

    def __call__(self) -> bool:
        return self.local or (self.event is not None and self.event.is_set())

    def set(self) -> None:
        self.local = True
        if self.event is not None:
            self.event.set()


@contextlib.contextmanager
def stop_on_signals(request: StopRequest) -> Iterator[StopRequest]:
    """While inside: the first SIGINT or SIGTERM sets ``request`` (and says so on stderr), a second SIGINT raises
    KeyboardInterrupt. Outside the main thread (where signals cannot be caught) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handle(signum: int, frame: Any) -> None:
        if request.local and signum == signal.SIGINT:
            raise KeyboardInterrupt
        if not request.local:
            print(STOPPING, file=sys.stderr, flush=True)
        request.set()

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def workers_start_ignoring_sigint() -> Iterator[None]:
    """Processes started inside begin with SIGINT ignored (an ignored signal stays ignored across exec, and Python
    then installs no KeyboardInterrupt handler), so a Ctrl-C while a worker is still importing cannot raise there;
    the worker installs `note_in_worker` when it is ready. Main thread only; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def note_in_worker(request: StopRequest) -> None:
    """In a sweep's worker process: a SIGINT sets ``request`` instead of raising in the middle of a step."""
    signal.signal(signal.SIGINT, lambda signum, frame: request.set())
