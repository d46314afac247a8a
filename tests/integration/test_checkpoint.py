"""A loop's checkpoint (testbed/checkpoint.py) is a state dict of tensors and plain values, read with
``torch.load(weights_only=True)``: every piece of loop state survives it bit for bit (chunks sampled in part at
several versions, sticky and perturbing actor bugs, a random gate's stream, GAC's history, epochs x minibatches,
a run that diverged before the stop), and a file holding a pickled object is refused in one line, its code not
run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from testbed import sweep as sweep_mod
from testbed.checkpoint import CheckpointError
from testbed.config import RunConfig
from testbed.results import ResultStore
from testbed.runner import Interrupted, Runner
from testbed.tasks import make_task
from tests.integration.test_stop_resume import _stop_after

pytestmark = pytest.mark.integration


def _configs() -> list[RunConfig]:
    base = {"task": "token_reversal", "steps": 8, "log_every": 2, "batch_size": 16, "n_actors": 4,
            "task_args": {"H": 4, "n_eval": 16}}
    return [
        RunConfig(**base, seed=0, delay="fixed:2+mixed:0.5", recipe="kondo"),
        RunConfig(**base, seed=1, delay="uniform:3", frictions="bug(frac=0.5, kind=perturb, sticky=true)"),
        RunConfig(**base, seed=2, recipe="gac", optimizer="sgd", lr=1e38),  # diverges early
        RunConfig(**base, seed=3, recipe="tis(c=2)+ess_lr", delay="geometric:0.5,3+mixed:0.3",
                  frictions="bug(frac=0.5, kind=random)+mismatch(sigma=0.3)+reward(p=0.2)"),
    ]


def _same(a, b) -> None:
    for ref, res in zip(a, b, strict=True):
        assert res.status == ref.status
        # str: rows hold tensors and NaN, which == does not compare as values
        assert str([{k: v for k, v in r.items() if "wall" not in k} for r in res.rows]) == \
            str([{k: v for k, v in r.items() if "wall" not in k} for r in ref.rows])
        assert str(res.steps) == str(ref.steps)


def _plain(value, path="state") -> None:
    """Every leaf of a checkpoint is a tensor or a plain value."""
    if isinstance(value, dict):
        for k, v in value.items():
            assert type(k) in (str, int), f"{path}: key {k!r}"
            _plain(v, f"{path}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _plain(v, f"{path}[{i}]")
    else:
        assert value is None or type(value) in (torch.Tensor, str, int, float, bool), f"{path}: {type(value)}"


def test_every_piece_of_loop_state_survives_two_stops_bit_for_bit(tmp_path):
    reference = Runner(_configs())
    expected = reference.run()
    assert [r.status for r in expected] == ["ok", "ok", "diverged", "ok"]
    ids = [c.run_id for c in _configs()]
    task = make_task("token_reversal", H=4, n_eval=16)
    runner = Runner(_configs())
    for stop_at, path in ((3, tmp_path / "a.pt"), (3, tmp_path / "b.pt")):  # steps 3 and 6: chunks half sampled
        with pytest.raises(Interrupted):
            runner.run(stop=_stop_after(stop_at))
        runner.save(path)
        _plain(torch.load(path, weights_only=True))
        runner = Runner.load(path, task, ids)
        assert runner.active == [0, 1, 3]
    assert runner.next_step == 6
    _same(expected, runner.run())
    for name, value in reference.params(0).items():
        assert torch.equal(value, runner.params(0)[name]), name


class _Payload:
    """A pickle that runs code when unpickled (os.system) unless the loader refuses it."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def _bandit() -> list[RunConfig]:
    return [RunConfig(task="bandit", delay="fixed:2", steps=20, log_every=10, seed=s) for s in range(2)]


def test_a_checkpoint_holding_a_pickle_payload_is_refused_in_one_line_and_never_runs(tmp_path, capsys):
    configs = _bandit()
    ids = [c.run_id for c in configs]
    store = ResultStore(tmp_path)
    path = store.checkpoint(ids)
    path.parent.mkdir(parents=True)
    marker = tmp_path / "ran"
    torch.save({"format": 2, "run_ids": ids, "runs": _Payload(marker)}, path)
    with pytest.raises(CheckpointError) as refused:
        Runner.load(path, make_task("bandit"), ids)
    assert str(refused.value) == (f"cannot resume from {str(path)!r}: it holds a pickled Python object (posix.system), "
                                  "not only tensors and plain values; it is not loaded: unpickling Python objects can "
                                  "run code; delete the file to train its runs afresh")
    # a sweep that finds it says so in one line and trains the runs afresh
    assert sweep_mod._train(configs, store, {}) == ["ok", "ok"]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"not resuming the saved loop {str(path)!r}: it holds a pickled Python object")
    assert line.endswith("its 2 run(s) start over")
    assert not marker.exists() and not path.exists()


def test_a_loop_pickled_whole_in_the_older_format_is_refused_in_one_line(tmp_path):
    configs = _bandit()
    ids = [c.run_id for c in configs]
    runner = Runner(configs)
    with pytest.raises(Interrupted):
        runner.run(stop=_stop_after(3))
    path = tmp_path / "loop.pt"
    torch.save({"format": 1, "run_ids": ids, "runner": runner}, path)  # what the older `Runner.save` wrote
    with pytest.raises(CheckpointError) as refused:
        Runner.load(path, make_task("bandit"), ids)
    assert "\n" not in str(refused.value)
    assert refused.value.reason == ("it is a loop pickled whole (an older checkpoint format), which is not loaded: "
                                    "unpickling Python objects can run code")


def test_a_checkpoint_of_another_format_version_is_refused(tmp_path):
    ids = [c.run_id for c in _bandit()]
    path = tmp_path / "loop.pt"
    torch.save({"format": 3, "run_ids": ids}, path)
    with pytest.raises(CheckpointError, match="it is in checkpoint format 3; this version reads format 2"):
        Runner.load(path, make_task("bandit"), ids)
