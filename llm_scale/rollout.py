"""The rollout side that runs ahead of the learner: weights in flight, admission, and the three modes.

The data flow is one way. The learner asks for batch k (`Rollouts.get`) and publishes its weights
after each update (`Rollouts.publish`); the rollout side owns a `Sampler` (task, tokenizer,
sampling, rewards; `sampler.Sampler`, which draws tokens with `generation.sample_completions`)
and never calls back. Three modes:

* ``sync``: batch k is generated on demand with the learner's own model (version k);
* ``thread``: a worker thread with its own copy of the weights generates ahead (exact,
  reproducible staleness with ``lag_policy="fixed"``; shares the learner's process and GIL);
* ``process``: the same worker in a separate process (its own interpreter, threads and, with
  ``rollout_device``, its own GPU); weights pass through shared memory (host shared memory, or
  the GPU's memory shared with CUDA IPC when the rollout side is on a GPU) and batches come back
  through a queue.

Admission (AReaL, arXiv 2505.24298): with batch size B, learner version i and N_r trajectories
generated, a new trajectory is admitted only while floor((N_r - 1) / B) <= i + eta; for whole
batches, batch k may start once k <= i + eta, so no token is more than eta versions stale when it
is trained on. Which weights the worker uses:

* ``lag_policy="latest"``: the newest published version (AReaL; the realised lag depends on timing);
* ``lag_policy="fixed"``: exactly version max(start, k - eta) (deterministic, hence reproducible and
  exactly resumable).

Weight versions kept: ONE published copy (the `WeightSlot`) plus the rollout side's working copy,
whatever eta. Under ``latest`` the slot is simply overwritten. Under ``fixed`` the learner, before
publishing version v, waits until the worker has taken version v - 1 when a batch not yet
generated still needs it (`Plan.still_needs`); the worker takes v - 1 when it starts batch
v - 1 + eta, which admission already allows, so this never deadlocks and the learner waits only
when the worker is the bottleneck anyway. A resumed run may start with eta + 1 batches already
generated (the checkpoint holds what was in flight, up to batch start + eta): their versions are
taken by no one, and the learner does not wait for them.

With ``partial_chunk = n > 0`` (latest only) the worker checks for newer weights every n tokens
and switches mid-sequence (re-encoding the prefix under the new weights), so one sequence spans
several versions (AReaL's partial rollouts); the per-token versions record which.
"""

from __future__ import annotations

import copy
import os
import queue as queue_module
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from testbed.util.workers import set_parent_death_signal

from .generation import NonFiniteRollout, RolloutBatch
from .sampler import Sampler

LAG_POLICIES = ("latest", "fixed")
MODES = ("sync", "thread", "process")


# -- weights ------------------------------------------------------------------------------------------
def model_tensors(model: torch.nn.Module) -> list[tuple[str, Tensor]]:
    """Parameters (tied ones once) then buffers: everything a copy of the model needs to match it."""
    return [*model.named_parameters(), *model.named_buffers()]


class _Box:
    """A thread-side stand-in for ``multiprocessing.Value``."""

    def __init__(self, value: int) -> None:
        self.value = value


class WeightSlot:
    """One published copy of the learner's weights (parameters and buffers) and its version.

    ``ctx`` None: for a worker thread (threading primitives). A multiprocessing context: for a
    worker process; host tensors are moved to shared memory, and GPU tensors travel to the child
    as CUDA IPC handles when the slot is pickled at process start.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, ctx: Any = None) -> None:
        self.names = [name for name, _ in model_tensors(model)]
        self.tensors = [t.detach().to(device, copy=True) for _, t in model_tensors(model)]
        if ctx is None:
            self.cond: Any = threading.Condition()
            self._version: Any = _Box(-1)
            self._taken: Any = _Box(-1)
            self.stop: Any = threading.Event()
        else:
            for t in self.tensors:
                if t.device.type == "cpu":
                    t.share_memory_()
            self.cond = ctx.Condition()
            self._version = ctx.Value("q", -1, lock=False)
            self._taken = ctx.Value("q", -1, lock=False)
            self.stop = ctx.Event()

    @property
    def version(self) -> int:
        return int(self._version.value)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors)

    def write(
        self, model: torch.nn.Module, version: int, *, after_taken: int | None = None,
        reader_failed: Callable[[], bool] = lambda: False,
    ) -> None:  # fmt: skip
        """Publish ``model`` as ``version``; with ``after_taken``, first wait until the reader took that version.

        The wait ends early when ``reader_failed()`` (the reader's error then surfaces at the next batch).
        """
        with self.cond:
            while after_taken is not None and self._taken.value < after_taken and not self.stop.is_set():
                if reader_failed():
                    return
                self.cond.wait(0.5)
            with torch.no_grad():
                for dst, (_, src) in zip(self.tensors, model_tensors(model), strict=True):
                    dst.copy_(src.detach(), non_blocking=False)
            self._settle()
            self._version.value = version
            self.cond.notify_all()

    def read_into(self, model: torch.nn.Module) -> int:
        """Copy the published weights into ``model``; return their version."""
        with self.cond:
            with torch.no_grad():
                for (_, dst), src in zip(model_tensors(model), self.tensors, strict=True):
                    dst.copy_(src)
            self._settle(model)
            self._taken.value = self._version.value
            self.cond.notify_all()
            return int(self._version.value)

    def _settle(self, model: torch.nn.Module | None = None) -> None:
        """Finish queued GPU copies before the lock is released (the other side may be another process)."""
        for t in (self.tensors[0], *(t for _, t in model_tensors(model)[:1])) if model is not None else self.tensors[:1]:
            if t.is_cuda:
                torch.cuda.synchronize(t.device)

    def wait_admission(self, k: int, eta: int, alive: Callable[[], bool]) -> bool:
        """Block until batch k is admitted (k <= version + eta); False if stopped meanwhile."""
        with self.cond:
            while not self.stop.is_set() and k > self._version.value + eta:
                if not alive():
                    return False
                self.cond.wait(0.5)
        return not self.stop.is_set()

    def shutdown(self) -> None:
        self.stop.set()
        with self.cond:
            self.cond.notify_all()


@dataclass(frozen=True)
class Plan:
    """What the rollout side generates: batches next_index .. total - 1, at most eta versions ahead."""

    eta: int
    total: int
    start: int  # the learner's version when the pipeline started
    next_index: int  # first batch not already generated
    lag_policy: str = "latest"
    partial_chunk: int = 0

    def version_for(self, k: int) -> int:
        """Under ``fixed``: the version batch k is generated with, max(start, k - eta)."""
        return max(self.start, k - self.eta)

    def still_needs(self, version: int) -> bool:
        """Under ``fixed``: whether a batch not yet generated (index >= next_index) is generated with ``version``.

        The batches of version v are k = v + eta (and, for v = start, every k <= start + eta).
        A resumed run's checkpoint may already hold them all: then nobody will take that version.
        """
        low = self.start if version == self.start else version + self.eta
        return max(low, self.next_index) <= min(version + self.eta, self.total - 1)


def rollout_loop(
    sampler: Sampler, model: torch.nn.Module, slot: WeightSlot, plan: Plan, emit: Callable[[RolloutBatch], None],
    alive: Callable[[], bool] = lambda: True,
) -> None:  # fmt: skip
    """The rollout side: generate every batch of ``plan`` in order, each admitted and with the weights its policy says."""
    current = -1

    def refresh() -> int | None:
        nonlocal current
        if slot.version > current:
            current = slot.read_into(model)
            return current
        return None

    for k in range(plan.next_index, plan.total):
        if not slot.wait_admission(k, plan.eta, alive):
            return
        if plan.lag_policy == "fixed":
            want = plan.version_for(k)
            if want != current:
                current = slot.read_into(model)
                if current != want:  # the publication protocol guarantees it; fail loudly if broken
                    raise RuntimeError(f"fixed lag: batch {k} needs version {want}, the slot holds {current}")
        elif slot.version != current:
            current = slot.read_into(model)
        chunk = plan.partial_chunk
        emit(sampler.batch(model, k, current, refresh if chunk else None, chunk))


# -- the three modes ---------------------------------------------------------------------------------
class Rollouts:
    """Serves `RolloutBatch` k to learner update k (see the module docstring)."""

    weight_copies = 0  # full copies of the weights held beyond the learner's own

    def get(self, k: int) -> tuple[RolloutBatch, float]:
        """Batch k and the seconds the learner waited for it."""
        raise NotImplementedError

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """The learner's ``model`` now holds ``version``."""
        raise NotImplementedError

    def pending(self, k: int) -> dict[int, RolloutBatch]:
        """Batches >= k already generated, for a checkpoint taken before update k."""
        raise NotImplementedError

    def close(self) -> None: ...


class SyncRollouts(Rollouts):
    """Batch k generated on demand by the learner's own model (no copy, no overlap)."""

    def __init__(self, sampler: Sampler, model: torch.nn.Module, plan: Plan, ready: dict[int, RolloutBatch]) -> None:
        self.sampler, self.model, self.version, self.ready = sampler, model, plan.start, dict(ready)

    def get(self, k: int) -> tuple[RolloutBatch, float]:
        t0 = time.perf_counter()
        batch = self.ready.pop(k, None)
        if batch is None:
            batch = self.sampler.batch(self.model, k, self.version)
        return batch, time.perf_counter() - t0

    def publish(self, model: torch.nn.Module, version: int) -> None:
        self.version = version

    def pending(self, k: int) -> dict[int, RolloutBatch]:
        return {j: b for j, b in self.ready.items() if j >= k}


class _Async(Rollouts):
    weight_copies = 2  # the published slot and the rollout side's working copy

    def __init__(self, plan: Plan, ready: dict[int, RolloutBatch], device: torch.device) -> None:
        self.plan, self.ready, self.device = plan, dict(ready), device
        self.slot: WeightSlot

    def _receive(self) -> None:
        """Wait (briefly) for the next batch from the rollout side into ``self.ready``; raise its failure."""
        raise NotImplementedError

    def _failed(self) -> bool:
        """True once the rollout side has stopped with an error."""
        raise NotImplementedError

    def get(self, k: int) -> tuple[RolloutBatch, float]:
        t0 = time.perf_counter()
        while k not in self.ready:
            self._receive()
        return self.ready.pop(k).to(self.device), time.perf_counter() - t0

    def publish(self, model: torch.nn.Module, version: int) -> None:
        # fixed lag: version - 1 must reach the worker before the slot is overwritten, if a batch still needs it
        needed = self.plan.lag_policy == "fixed" and self.plan.still_needs(version - 1)
        self.slot.write(model, version, after_taken=version - 1 if needed else None, reader_failed=self._failed)

    def pending(self, k: int) -> dict[int, RolloutBatch]:
        # fixed lag: batches k .. k + eta - 1 need versions older than k, which a resumed run no longer has
        if self.plan.lag_policy == "fixed":
            need = min(k + self.plan.eta, self.plan.total)
            while any(j not in self.ready for j in range(k, need)):
                self._receive()
        return {j: b for j, b in self.ready.items() if j >= k}


class ThreadRollouts(_Async):
    """The rollout loop in a thread of the learner's process, with its own copy of the weights."""

    def __init__(
        self, sampler: Sampler, model: torch.nn.Module, plan: Plan, ready: dict[int, RolloutBatch], *,
        device: torch.device, threads: int = 0,
    ) -> None:  # fmt: skip
        super().__init__(plan, ready, next(model.parameters()).device)
        self.slot = WeightSlot(model, device)
        self.slot.write(model, plan.start)
        self.worker_model = copy.deepcopy(model).to(device).eval().requires_grad_(False)
        self.cond = threading.Condition()
        self.error: BaseException | None = None

        def emit(batch: RolloutBatch) -> None:
            with self.cond:
                self.ready[batch.index] = batch
                self.cond.notify_all()

        def work() -> None:
            if threads:
                torch.set_num_threads(threads)  # per thread with OpenMP: the learner's count is its own
            try:
                rollout_loop(sampler, self.worker_model, self.slot, plan, emit)
            except BaseException as exc:  # surfaced to the learner by get()
                with self.cond:
                    self.error = exc
                    self.cond.notify_all()

        self.thread = threading.Thread(target=work, name="rollout-worker", daemon=True)
        self.thread.start()

    def _failed(self) -> bool:
        return self.error is not None

    def _receive(self) -> None:
        with self.cond:
            if self.error is None:
                self.cond.wait(0.5)
            if self.error is not None:
                raise self.error

    def get(self, k: int) -> tuple[RolloutBatch, float]:
        t0 = time.perf_counter()
        with self.cond:
            while k not in self.ready and self.error is None:
                self.cond.wait(0.5)
            if k not in self.ready:
                raise self.error  # type: ignore[misc]
            batch = self.ready.pop(k)
        return batch.to(self.device), time.perf_counter() - t0

    def close(self) -> None:
        self.slot.shutdown()
        self.thread.join()


def _process_main(
    sampler: Sampler, config: Any, dtype: torch.dtype, device: str, slot: WeightSlot, plan: Plan, out: Any,
    threads: int, parent: int,
) -> None:  # fmt: skip
    """Entry point of the rollout process: build the model from config, then run the rollout loop."""
    set_parent_death_signal()  # SIGKILL when the trainer dies: a killed trainer leaves no orphan (elsewhere: `alive`)
    if threads:
        torch.set_num_threads(threads)

    def alive() -> bool:
        return os.getppid() == parent

    try:
        from transformers import AutoModelForCausalLM

        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype)
        model.eval().requires_grad_(False)
        rollout_loop(sampler, model, slot, plan, lambda b: out.put(("batch", b.state())), alive)
        out.put(("done",))
        while alive() and not slot.stop.wait(0.5):  # keep the queue's feeder alive until the learner is done
            pass
    except BaseException as exc:
        out.put(("error", type(exc).__name__, str(exc), traceback.format_exc(), isinstance(exc, NonFiniteRollout)))
    out.cancel_join_thread()


class RolloutProcessError(RuntimeError):
    """The rollout process failed; ``detail`` holds its traceback."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


class ProcessRollouts(_Async):
    """The rollout loop in its own process (spawned), optionally on its own device."""

    def __init__(
        self, sampler: Sampler, model: torch.nn.Module, plan: Plan, ready: dict[int, RolloutBatch], *,
        device: torch.device, threads: int = 0, weights_via: str = "auto",
    ) -> None:  # fmt: skip
        import torch.multiprocessing as tmp

        super().__init__(plan, ready, next(model.parameters()).device)
        ctx = tmp.get_context("spawn")
        via_gpu = device.type == "cuda" and weights_via == "auto"
        self.slot = WeightSlot(model, device if via_gpu else torch.device("cpu"), ctx)
        self.slot.write(model, plan.start)
        self.queue = ctx.Queue()
        dtype = next(model.parameters()).dtype
        self.proc = ctx.Process(
            target=_process_main, name="rollout-process", daemon=True,
            args=(sampler, model.config, dtype, str(device), self.slot, plan, self.queue, threads, os.getpid()),
        )  # fmt: skip
        self.proc.start()
        self.finished = False

    def _failed(self) -> bool:
        return not self.proc.is_alive()

    def _receive(self) -> None:
        try:
            item = self.queue.get(timeout=0.5)
        except queue_module.Empty:
            if not self.proc.is_alive():
                raise RolloutProcessError(f"the rollout process exited unexpectedly (exit code {self.proc.exitcode})") from None
            return
        if item[0] == "batch":
            self.ready[int(item[1]["index"])] = RolloutBatch(**item[1])
        elif item[0] == "done":
            self.finished = True
        else:
            _, kind, message, detail, nonfinite = item
            if nonfinite:
                raise NonFiniteRollout(message)
            raise RolloutProcessError(f"the rollout process failed: {kind}: {message}", detail)

    def close(self) -> None:
        self.slot.shutdown()
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def make_rollouts(
    mode: str, sampler: Sampler, model: torch.nn.Module, plan: Plan, ready: dict[int, RolloutBatch], *,
    device: torch.device, threads: int = 0, weights_via: str = "auto",
) -> Rollouts:  # fmt: skip
    """The rollout side for ``mode`` (sync, thread or process)."""
    if mode == "sync":
        return SyncRollouts(sampler, model, plan, ready)
    if mode == "thread":
        return ThreadRollouts(sampler, model, plan, ready, device=device, threads=threads)
    if mode == "process":
        return ProcessRollouts(sampler, model, plan, ready, device=device, threads=threads, weights_via=weights_via)
    raise ValueError(f"unknown rollout mode {mode!r}; allowed: {', '.join(MODES)}")
