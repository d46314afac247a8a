"""Executors: where the jobs of a sweep (its loops) and of the figures run.

An executor calls a module-level function on each of a list of argument tuples, at most ``workers`` at a
time, each call (a *job*) in a worker process with ``threads`` torch threads, and returns the results in
order. Two implementations, chosen with ``--executor {local,ray}``:

* `LocalPool`: spawned worker processes on this machine (``concurrent.futures``); workers end with their
  parent (testbed/util/workers.py).
* `RayExecutor`: each job is a Ray task with ``num_cpus=1``, on a Ray cluster (``--address ADDR``) or on a
  Ray instance started on this machine for the command. Ray is an optional extra (``pip install -e
  ".[ray]"``), imported only when this executor runs. Jobs read and write the same output directory as the
  local pool's, so on a cluster that directory must be on storage every node sees.

A job does the same work under either (the sweep's `testbed.sweep._train`: same run ids, results and saved
loops), so a sweep interrupted under one executor resumes under the other.

Inside a job, `stop_requested` tells whether the command was asked to stop (Ctrl-C or SIGTERM,
testbed/util/stopping.py): the sweep's loops then save themselves after their current step; jobs not started are
not started, and `Executor.run` raises KeyboardInterrupt once the running ones have returned. `add_done`
adds to the command's count of finished work (fractions of runs), which its progress bar shows while jobs
run. A job that raises has its exception raised by `run` (the sweep's jobs record a failing run themselves
and do not raise); a worker process that dies raises `WorkerLost`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import importlib.util
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from testbed.util.errors import UsageError
from testbed.util.stopping import StopRequest, note_in_worker, stop_on_signals, workers_start_ignoring_sigint
from testbed.util.workers import IMPORTS_ENV, die_with_parent

NAMES = ("local", "ray")
POLL_S = 0.5  # how often the parent looks at its jobs, and a Ray job at the stop request and its count


class WorkerLost(Exception):
    """A worker process died while running a job (killed, or out of memory)."""


class Executor(Protocol):
    name: str

    def start(self, workers: int) -> None:
        """Be ready to run jobs on ``workers`` workers (bad settings -> UsageError, before anything is written)."""
        ...

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], workers: int, threads: int = 1,
            on_done: Callable[[float], None] | None = None) -> list[Any]:
        """``[fn(*job) for job in jobs]``, the calls in worker processes, at most ``workers`` at a time.
        ``on_done(total)``: called in this process with the jobs' count of work done (`add_done`) as it grows."""
        ...


# -- inside a job ---------------------------------------------------------------------------------------------


def _nothing(share: float) -> None:
    pass


_STOP: Callable[[], bool] = StopRequest()  # in a worker process: the command's stop request
_ADD: Callable[[float], None] = _nothing  # in a worker process: adds to the command's count of work done


def _set_job(stop: Callable[[], bool], add: Callable[[float], None]) -> None:
    global _STOP, _ADD
    _STOP, _ADD = stop, add


def stop_requested() -> bool:
    """In a job: whether the command was asked to stop (the job's loop saves itself and raises KeyboardInterrupt)."""
    return _STOP()


def add_done(share: float) -> None:
    """In a job: add ``share`` (a fraction of a run, or whole runs) to the command's count of work done."""
    _ADD(share)


# -- local process pool ---------------------------------------------------------------------------------------


def _pool_init(threads: int, parent: int, done: Any, stop: Any) -> None:
    import torch

    request = StopRequest(stop)
    _set_job(request, lambda share: _add_shared(done, share))
    note_in_worker(request)
    die_with_parent(parent)
    torch.set_num_threads(threads)


def _add_shared(done: Any, share: float) -> None:
    with done.get_lock():
        done.value += share


class LocalPool:
    """Spawned worker processes on this machine; a stop request reaches them through a shared event."""

    name = "local"

    def start(self, workers: int) -> None:
        pass  # worker processes are started by `run`

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], workers: int, threads: int = 1,
            on_done: Callable[[float], None] | None = None) -> list[Any]:
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Value("d", 0.0)  # work done in the workers (`add_done`)
        with stop_on_signals(StopRequest(ctx.Event())) as stop, \
                cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_pool_init,
                                       initargs=(threads, os.getpid(), done, stop.event)) as pool:
            with workers_start_ignoring_sigint():  # submitting starts the worker processes
                futures = [pool.submit(fn, *job) for job in jobs]
            shown = 0.0
            try:
                pending = set(futures)
                while pending:
                    finished, pending = cf.wait(pending, timeout=POLL_S, return_when=cf.FIRST_COMPLETED)
                    for fut in finished:
                        if not fut.cancelled() and not isinstance(fut.exception(), KeyboardInterrupt):
                            fut.result()  # a worker's exception surfaces here
                    if stop():
                        for fut in pending:
                            fut.cancel()
                    value = float(done.value)
                    if on_done is not None and value > shown:
                        on_done(value)
                        shown = value
            except cf.process.BrokenProcessPool:
                raise WorkerLost("a worker process died unexpectedly (killed, or out of memory?)") from None
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
            if stop():
                raise KeyboardInterrupt
            return [f.result() for f in futures]


# -- Ray ------------------------------------------------------------------------------------------------------


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UsageError("--executor ray needs Ray, which is not installed: pip install -e \".[ray]\" "
                         "(or pip install \"ray>=2.40\"); allowed without it: --executor local") from None
    return ray


class _Shared:
    """A Ray actor (no CPU of its own): the command's stop request and count of work done, for its jobs."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Ready for the next run of jobs: not stopped, nothing done."""
        self.stopped: bool = False
        self.done: float = 0.0

    def stop(self) -> None:
        self.stopped = True

    def is_stopped(self) -> bool:
        return self.stopped

    def add(self, share: float) -> None:
        self.done += share

    def total(self) -> float:
        return self.done


class _RayChannel:
    """In a Ray job: the stop request (the parent's, asked of the actor at most every `POLL_S` seconds, or a
    SIGINT seen by this worker) and the count of work done (sent to the actor at most every `POLL_S`)."""

    def __init__(self, shared: Any) -> None:
        self.shared = shared
        self.local = StopRequest()
        self.stopped = False
        self.pending = 0.0
        self.asked = self.sent = time.monotonic()

    def __call__(self) -> bool:
        import ray

        if not self.stopped and time.monotonic() - self.asked >= POLL_S:
            self.stopped = ray.get(self.shared.is_stopped.remote())
            self.asked = time.monotonic()
        return self.stopped or self.local()

    def add(self, share: float) -> None:
        self.pending += share
        if time.monotonic() - self.sent >= POLL_S:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            self.shared.add.remote(self.pending)
            self.pending = 0.0
        self.sent = time.monotonic()


def _ray_job(fn: Callable[..., Any], args: tuple[Any, ...], threads: int, parent: dict[str, Any],
             shared: Any) -> tuple[str, Any]:
    """One job in a Ray worker: ("ok", result), ("stopped", None) or ("raised", exception). ``parent``: what a
    spawned local worker inherits from the command (`_parent`), taken where it exists on this node."""
    import torch

    if os.path.isdir(parent["cwd"]):  # relative paths (--out, --cache) mean what they mean to the command
        os.chdir(parent["cwd"])
    sys.path[:0] = [p for p in parent["path"] if p not in sys.path and os.path.isdir(p)]
    if parent["imports"]:  # the user's modules (--import); a Ray worker serves one command after another
        os.environ[IMPORTS_ENV] = parent["imports"]
    else:
        os.environ.pop(IMPORTS_ENV, None)
    torch.set_num_threads(threads)
    channel = _RayChannel(shared)
    _set_job(channel, channel.add)
    old = None
    if threading.current_thread() is threading.main_thread():  # a SIGINT stops the loop after its step
        old = signal.signal(signal.SIGINT, lambda signum, frame: channel.local.set())
    try:
        return "ok", fn(*args)
    except KeyboardInterrupt:
        return "stopped", None
    except Exception as exc:
        return "raised", exc
    finally:
        channel.flush()
        _set_job(StopRequest(), _nothing)
        if old is not None:
            signal.signal(signal.SIGINT, old)


class RayExecutor:
    """Each job a Ray task (``num_cpus=1``). ``address``: an existing cluster's; None: a Ray instance is started
    on this machine with ``num_cpus`` CPUs (default: the first run's ``workers``), once per process."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        if importlib.util.find_spec("ray") is None:
            _ray()  # the one-line error
        self.address = address
        self.num_cpus = num_cpus
        self._shared: Any = None

    def _channel(self) -> Any:
        """The `_Shared` actor of this executor's runs: made once and reset for each run (an actor is a process of
        its own; making one per run cost about half a second per sweep), made anew if it has gone."""
        ray = _ray()
        if self._shared is not None:
            try:
                ray.get(self._shared.reset.remote())
                return self._shared
            except ray.exceptions.RayError:
                self._shared = None
        self._shared = ray.remote(num_cpus=0)(_Shared).remote()
        return self._shared

    def start(self, workers: int) -> None:
        """Connect to the cluster at ``address`` (unreachable -> UsageError), or start Ray on this machine; once
        per process (a Ray already initialized in this process is used as it is)."""
        ray = _ray()
        if self.address:
            _check_reachable(self.address)
        if ray.is_initialized():
            return
        quiet = {"log_to_driver": False, "configure_logging": True, "logging_level": "ERROR"}
        if self.address:
            ray.init(address=self.address, **quiet)
        else:
            ray.init(num_cpus=self.num_cpus or workers, include_dashboard=False, **quiet)

    def run(self, fn: Callable[..., Any], jobs: Sequence[tuple[Any, ...]], workers: int, threads: int = 1,
            on_done: Callable[[float], None] | None = None) -> list[Any]:
        self.start(workers)
        ray = _ray()
        shared = self._channel()
        task = ray.remote(num_cpus=1, max_retries=0)(_ray_job)
        parent = {"cwd": os.getcwd(), "path": [p for p in sys.path if p], "imports": os.environ.get(IMPORTS_ENV)}
        results: list[Any] = [None] * len(jobs)
        running: dict[Any, int] = {}
        queue = list(range(len(jobs)))
        shown, told = 0.0, False
        with stop_on_signals(StopRequest()) as stop:
            try:
                while queue or running:
                    while queue and len(running) < workers and not stop():
                        i = queue.pop(0)
                        running[task.remote(fn, jobs[i], threads, parent, shared)] = i
                    if not running:
                        break
                    ready, _ = ray.wait(list(running), num_returns=1, timeout=POLL_S)
                    for ref in ready:
                        i = running.pop(ref)
                        try:
                            kind, value = ray.get(ref)
                        except ray.exceptions.RayError as exc:
                            raise WorkerLost(f"a Ray worker died unexpectedly ({type(exc).__name__}: killed, or "
                                             "out of memory?)") from None
                        if kind == "raised":
                            raise value
                        results[i] = value
                    if stop() and not told:
                        ray.get(shared.stop.remote())
                        told = True
                    if on_done is not None:
                        value = float(ray.get(shared.total.remote()))
                        if value > shown:
                            on_done(value)
                            shown = value
            except BaseException:
                for ref in running:
                    ray.cancel(ref, force=True)
                raise
        if stop():
            raise KeyboardInterrupt
        return results


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A cluster address ``HOST:PORT`` (or ``ray://HOST:PORT``) that accepts no connection -> UsageError (Ray
    itself retries for minutes). ``auto`` and addresses of other forms are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise UsageError(f"--address {address!r}: no Ray cluster answers there ({exc.strerror or exc}); give the "
                         "address of a running cluster's head (HOST:PORT), or leave --address out to start Ray "
                         "on this machine") from None


# -- choosing one ---------------------------------------------------------------------------------------------

_DEFAULT: list[Executor] = []


def make(name: str, address: str | None = None, num_cpus: int | None = None) -> Executor:
    """The executor ``name`` (`NAMES`); ``address`` only with ray. Bad input -> UsageError, one line."""
    if name not in NAMES:
        raise UsageError(f"--executor must be one of {', '.join(NAMES)}, got {name!r}")
    if name == "local":
        if address:
            raise UsageError(f"--address {address!r} is for --executor ray (a Ray cluster's address); the local "
                             "pool takes none")
        return LocalPool()
    return RayExecutor(address, num_cpus)


def default() -> Executor:
    """This process's executor: the one `using` set, else the local pool."""
    return _DEFAULT[-1] if _DEFAULT else LocalPool()


@contextlib.contextmanager
def using(executor: Executor) -> Iterator[Executor]:
    """Inside: `default` is ``executor`` (a command's ``--executor`` for everything it runs)."""
    _DEFAULT.append(executor)
    try:
        yield executor
    finally:
        _DEFAULT.remove(executor)
