"""The loop's parts work on its explicit state (testbed/state.py): the learner returns the runs whose update failed
and takes them out of the computation, the runner records them; the parts import without the runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.config import RunConfig
from testbed.runner import Runner

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_learn_returns_the_run_whose_update_failed_and_the_runner_records_it():
    base = {"task": "mnist", "steps": 4, "log_every": 2, "batch_size": 20, "optimizer": "sgd", "minibatches": 2}
    configs = [RunConfig(**base, seed=0, lr=0.05), RunConfig(**base, seed=1, lr=1e38), RunConfig(**base, seed=2, lr=0.05)]
    runner = Runner(configs)
    runner.publish(-1)
    runner.act(0)
    # the first minibatch's step blows run 1's parameters up; the second finds them non-finite
    assert runner.learner.learn(0) == [(1, 0)]
    assert runner.active == [0, 2] and runner.loop.active is runner.active
    assert [r.status for r in runner.runs] == ["ok", "ok", "ok"]  # recorded by the runner, not the learner
    assert all(p.shape[0] == 2 for p in runner.policy.parameters())  # its slot left the policy
    runner.runs[1].diverge(0)
    assert runner.runs[1].status == "diverged" and runner.runs[1].rows == [{"step": 1, "diverged_at": 1}]


def test_the_loop_parts_import_without_the_runner():
    code = "import sys, testbed.actor, testbed.learner, testbed.state; print('testbed.runner' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.stdout.strip() == "False"
