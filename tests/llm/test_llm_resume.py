"""Resume never deadlocks: a checkpoint may hold eta + 1 batches in flight, and the resumed pipeline must still run.

Under ``lag_policy="fixed"`` the learner, before publishing version v, waits for the worker to take
v - 1 when a batch still to be generated needs it. A checkpoint taken before update s can hold
batches s .. s + eta (the last one generated with version s), so after a resume nobody takes
version s again: the learner must not wait for it. The fast test builds exactly that state; the
slow one kills a real run at several moments (TensorBoard on) and resumes it under a timeout.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from llm_scale.generation import RolloutBatch
from llm_scale.rollout import Plan, ThreadRollouts


class _VersionSampler:
    """A stand-in for `Sampler`: batch k records the version that generated it (no model call)."""

    def batch(self, model, k, version, refresh=None, chunk=0) -> RolloutBatch:
        return _batch(k, version)


def _batch(k: int, version: int) -> RolloutBatch:
    one = torch.ones(1, 1)
    return RolloutBatch(
        k, one.long(), one.bool(), one.long(), one.bool(), one, torch.full((1, 1), version), torch.zeros(1),
        torch.zeros(1, dtype=torch.long),
    )  # fmt: skip


@pytest.mark.parametrize(
    "version, next_index, expected",
    [
        (5, 5, True),  # fresh start at 5, eta 2: batches 5, 6, 7 use version 5
        (5, 8, False),  # resumed at 5 with batches 5, 6, 7 in the checkpoint: version 5 has no batch left
        (6, 8, True),  # batch 8 = 6 + eta uses version 6
        (9, 8, False),  # batch 11 is beyond total = 10
        (7, 8, True),
    ],
)
def test_plan_knows_which_versions_a_batch_still_needs(version, next_index, expected):
    plan = Plan(eta=2, total=10, start=5, next_index=next_index, lag_policy="fixed")
    assert plan.still_needs(version) is expected


@pytest.mark.parametrize("in_flight", [0, 1, 2, 3])
def test_resumed_pipeline_with_batches_in_flight_runs_to_the_end(in_flight):
    """Resume at version 4 (eta 2) with 0 .. eta + 1 batches already generated: every batch arrives, fixed lag kept."""
    eta, start, total = 2, 4, 10
    ready = {k: _batch(k, max(start - eta, k - eta)) for k in range(start, start + in_flight)}
    plan = Plan(eta, total, start, start + in_flight, "fixed")
    model = torch.nn.Linear(2, 2)
    rollouts = ThreadRollouts(_VersionSampler(), model, plan, ready, device=torch.device("cpu"))
    got: dict[int, int] = {}

    def learner() -> None:
        for k in range(start, total):
            batch, _ = rollouts.get(k)
            got[k] = int(batch.versions.max())
            rollouts.publish(model, k + 1)

    thread = threading.Thread(target=learner, daemon=True)
    thread.start()
    thread.join(timeout=20)
    deadlocked = thread.is_alive()
    rollouts.close()
    assert not deadlocked, f"the learner is still waiting after 20 s; batches received: {sorted(got)}"
    assert sorted(got) == list(range(start, total))
    for k in range(start + in_flight, total):  # the batches generated after the resume: exactly eta behind
        assert got[k] == max(start, k - eta)


# -- the real command, killed and resumed (slow) ----------------------------------------------------
STEPS, EVERY = 60, 10


def _command(out: Path, steps: int = STEPS, every: int = EVERY) -> list[str]:
    return [
        sys.executable, "-m", "llm_scale", "train", "--model", "tiny", "--task", "copy", "--recipe", "dg",
        "--max-staleness", "2", "--lag-policy", "fixed", "--steps", str(steps), "--eval-every", str(every),
        "--checkpoint-every", str(every), "--tensorboard", "on", "--no-progress", "--no-save-final", "--out", str(out),
    ]  # fmt: skip


def _tensorboard_steps(logdir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    acc.Reload()
    return [e.step for e in acc.Scalars(tag)]


def kill_and_resume(
    out: Path, checkpoint: int, delay: float, sig: int, timeout: float = 180.0, steps: int = STEPS, every: int = EVERY
) -> None:
    """Start the run, kill it ``delay`` s after checkpoint ``checkpoint`` appears, resume with --resume auto."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")])}
    command = _command(out, steps, every)
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marker = out / "checkpoints" / f"step_{checkpoint:07d}"
    t0 = time.monotonic()
    while not marker.is_dir() and proc.poll() is None and time.monotonic() - t0 < timeout:
        time.sleep(0.05)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    proc.communicate(timeout=timeout)
    try:
        done = subprocess.run([*command, "--resume", "auto"], env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"resume after a kill {delay} s past checkpoint {checkpoint} did not finish in {timeout:.0f} s")
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize(
    "checkpoint, delay, sig",
    [(10, 0.0, signal.SIGKILL), (10, 0.4, signal.SIGKILL), (20, 1.5, signal.SIGKILL), (30, 0.0, signal.SIGINT),
     (30, 0.7, signal.SIGINT), (40, 2.5, signal.SIGKILL)],
)  # fmt: skip
def test_kill_and_resume_with_tensorboard_logs_every_update_once(tmp_path, checkpoint, delay, sig):
    out = tmp_path / "run"
    kill_and_resume(out, checkpoint, delay, sig)
    assert logged_once(out, STEPS, EVERY) == ""


def logged_once(out: Path, steps: int, every: int) -> str:
    """'' when metrics.csv, eval.csv and TensorBoard hold every update (and evaluation) exactly once; else what differs."""
    checks = {
        "metrics.csv steps": (list(pd.read_csv(out / "metrics.csv")["step"]), list(range(steps))),
        "eval.csv versions": (list(pd.read_csv(out / "eval.csv")["version"]), list(range(0, steps + 1, every))),
        "tensorboard loss steps": (_tensorboard_steps(out / "tensorboard", "loss"), list(range(steps))),
        "tensorboard eval steps": (_tensorboard_steps(out / "tensorboard", "eval_reward"), list(range(0, steps + 1, every))),
    }
    return "; ".join(f"{name}: {len(got)} logged, {len(set(got))} distinct" for name, (got, want) in checks.items() if got != want)


if __name__ == "__main__":  # the full kill-and-resume command (300 updates), killed at varied moments and resumed, N times
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=20)
    args = parser.parse_args()
    ok = 0
    for i in range(args.tries):
        checkpoint, delay = 50 * (1 + i % 5), (0.0, 0.3, 0.8, 1.5)[i % 4]
        sig = (signal.SIGKILL, signal.SIGINT)[i % 2]
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.monotonic()
            try:
                kill_and_resume(Path(tmp) / "k", checkpoint, delay, sig, timeout=300.0, steps=300, every=50)
                problem = logged_once(Path(tmp) / "k", 300, 50)
            except BaseException as exc:  # pytest.fail raises an Exception subclass of BaseException
                problem = f"{type(exc).__name__}: {exc}"
        ok += not problem
        print(f"try {i + 1}: {signal.Signals(sig).name} {delay} s after checkpoint {checkpoint}: "
              f"{problem or 'finished, every update logged once'} ({time.monotonic() - t0:.0f} s)", flush=True)  # fmt: skip
    print(f"{ok} of {args.tries} tries finished with every update logged once")
    sys.exit(0 if ok == args.tries else 1)


class _Payload:
    """A pickle that runs code when unpickled (os.system) unless the loader refuses it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_checkpoint_files_load_with_weights_only_and_a_pickle_payload_is_refused(tmp_path):
    """Every trainer checkpoint file is read with weights_only=True: a crafted file is refused in one line and its
    code never runs; NumPy's generator state round-trips exactly through the tensor form it is saved in."""
    import numpy as np

    from llm_scale.config import UsageError
    from llm_scale.trainer import load_state, numpy_state, set_numpy_state

    np.random.seed(7)
    np.random.rand(3)
    path = tmp_path / "step_1" / "rng.pt"
    path.parent.mkdir()
    torch.save({"numpy": numpy_state(), "torch": torch.random.get_rng_state()}, path)
    expected = np.random.rand(5)
    np.random.seed(0)
    set_numpy_state(load_state(path)["numpy"])
    assert np.array_equal(np.random.rand(5), expected)

    marker = tmp_path / "ran"
    torch.save({"numpy": _Payload(marker)}, path)
    with pytest.raises(UsageError, match=r"rng\.pt holds more than tensors and plain values"):
        load_state(path)
    assert not marker.exists()
