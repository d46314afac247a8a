"""Whole-group minibatches, the per-optimizer-step records (cosine kinds, NaN for undefined cosines) and the
health flags of a run (testbed/health.py)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from testbed import health
from testbed.config import RunConfig
from testbed.runner import Runner
from testbed.stabilizers.spec import SpecError
from testbed.tasks import make_task

pytestmark = pytest.mark.integration


def _minibatch_rows(split: str) -> list[tuple[list[int], list[int]]]:
    """(group ids of each minibatch, contexts) seen by the learner in a 2-step GRPO run of 4 minibatches."""
    cfg = RunConfig(task="mnist", recipe="grpo", steps=2, log_every=2, batch_size=40, n_actors=2, group_size=5,
                    epochs=2, minibatches=4, minibatch_split=split)
    runner = Runner(cfg)
    batches, seen = {}, []
    runner.on_batch = lambda r, t, batch: batches.__setitem__(t, batch)
    original = runner.learner._update

    def spy(work, idx, log_now, where):
        seen.append((work.t, idx[0].tolist()))
        return original(work, idx, log_now, where)

    runner.learner._update = spy
    runner.run()
    return [(batches[t]["group_ids"][rows].tolist(), rows) for t, rows in seen]


def test_group_minibatches_hold_whole_groups_in_order_every_epoch():
    mbs = _minibatch_rows("groups")
    assert len(mbs) == 2 * 2 * 4
    for k, (gids, rows) in enumerate(mbs):
        mb = k % 4
        assert rows == list(range(10 * mb, 10 * mb + 10))  # in order, the same in both epochs
        assert gids == [2 * mb] * 5 + [2 * mb + 1] * 5  # two whole groups, disjoint from the other minibatches


def test_random_split_is_available_by_name_and_splits_groups():
    mbs = _minibatch_rows("random")
    assert any(len(set(gids)) > 2 for gids, _ in mbs)  # 10 rows from more than two groups: groups cut apart
    assert RunConfig(task="mnist", group_size=5).resolved().minibatch_split == "groups"  # default where groups exist
    assert RunConfig(task="mnist").resolved().minibatch_split == "random"
    # the field at its old value leaves the run id unchanged (runs recorded before it existed keep theirs)
    assert RunConfig(task="mnist").run_id == RunConfig(task="mnist", minibatch_split="random").run_id


def test_group_split_needs_whole_groups_per_minibatch():
    with pytest.raises(SpecError, match=r"minibatches \(4\) must divide the number of groups per batch \(100/10\)"):
        RunConfig(task="mnist", group_size=10, minibatches=4).parse()
    RunConfig(task="mnist", group_size=10, minibatches=4, minibatch_split="random").parse()
    with pytest.raises(SpecError, match="minibatch_split must be one of groups, random"):
        RunConfig(task="mnist", minibatch_split="shuffle").parse()


def test_every_optimizer_step_is_recorded_with_its_kind():
    cfg = RunConfig(task="mnist", recipe="grpo+gac_projection", steps=4, log_every=2, batch_size=100, group_size=5,
                    epochs=2, minibatches=2, lr=3e-3)
    result = Runner(cfg).run()[0]
    steps = result.steps
    assert len(steps) == 4 * 2 * 2
    assert [s["kind"] for s in steps] == ["across", "within", "within", "within"] * 4
    assert math.isnan(steps[0]["grad_cos"])  # no previous step
    for prev, s in itertools.pairwise(steps):  # undefined (NaN) exactly when this or the previous gradient is zero
        assert math.isnan(s["grad_cos"]) == bool(prev["zero_grad"] or s["zero_grad"])
        assert math.isnan(s["grad_cos"]) or -1 <= s["grad_cos"] <= 1
    assert all(s["projected"] in (0.0, 1.0) and s["skipped"] in (0.0, 1.0) for s in steps)
    # a logged row's window means are the means of its 8 steps, by kind
    row = result.rows[0]
    within = [s["grad_cos"] for s in steps[:8] if s["kind"] == "within" and not math.isnan(s["grad_cos"])]
    assert row["grad_cos_within"] == pytest.approx(sum(within) / len(within))
    assert row["gac_projected_frac"] == pytest.approx(sum(s["projected"] for s in steps[:8]) / 8)
    assert row["zero_grad_frac"] == sum(s["zero_grad"] for s in steps[:8]) / 8
    assert row["lost_classes"] in range(10)  # a count at every evaluation


def _const_policy(task, cls: int):
    """A policy (one slot) that predicts class ``cls`` for every image: zero last-layer weights, one bias."""
    policy = task.make_policy([torch.Generator().manual_seed(0)])
    with torch.no_grad():
        policy.fc2.weight.zero_()
        policy.fc2.bias.zero_()
        policy.fc2.bias[..., cls] = 1.0
    return policy


def test_a_policy_that_never_predicts_a_class_is_detected():
    task = make_task("mnist")
    assert health.count_lost_classes(task, _const_policy(task, 3), 1) == [9.0]  # predicts 3 only: 9 classes lost
    labels = task.labels[task.n_train:]
    preds = labels.clone().unsqueeze(0)
    assert health.lost_classes(preds, labels) == [0]
    preds[preds == 7] = 1  # never predicts 7
    assert health.lost_classes(preds, labels) == [1]
    bandit = make_task("bandit")
    assert all(math.isnan(v) for v in health.count_lost_classes(bandit, None, 2))  # not a classification: NaN


def test_a_run_whose_gradients_are_all_zero_is_flagged_stalled_with_nan_cosines():
    """Every reward equal (here: always 0): every GRPO group has zero advantage, every gradient is exactly zero,
    every cosine is undefined (NaN, not 0) and the run is stalled."""
    cfg = RunConfig(task="mnist", recipe="grpo", steps=6, log_every=3, batch_size=20, group_size=5, minibatches=2)
    runner = Runner(cfg)
    runner.task.reward = lambda contexts, actions: torch.zeros(len(contexts))
    result = runner.run()[0]
    assert all(s["zero_grad"] == 1.0 and s["zero_adv_frac"] == 1.0 and math.isnan(s["grad_cos"]) for s in result.steps)
    for row in result.rows:
        assert math.isnan(row["grad_cos_within"]) and math.isnan(row["grad_cos_across"])
        assert row["grad_cos_nan_frac"] == 1.0 and row["zero_grad_frac"] == 1.0
    assert result.info["stalled"] is True and result.info["health"] == "stalled"
    assert result.info["zero_grad_frac_late"] == 1.0
    # the same run with the task's rewards learns: not stalled
    ok = Runner(cfg).run()[0]
    assert ok.info["stalled"] is False and ok.info["zero_grad_frac_late"] < 0.5


def test_health_flag_order_and_window_nan_handling():
    steps = [{"step": s, "zero_grad": z} for s, z in ((1, 1.0), (2, 1.0), (3, 0.0), (4, 1.0))]
    assert health.run_health(steps, 4, 2.0) == {"zero_grad_frac_late": 0.5, "stalled": False,
                                                "lost_classes_final": 2, "health": "lost_class"}
    assert health.run_health(steps, 2, 0.0)["health"] == "stalled"  # steps 2..4 are 2/3 zero
    assert health.run_health(steps, 4, math.nan)["lost_classes_final"] is None
    rec = {"zero_adv_frac": 0.0, "entropy": 1.0, "max_prob": 0.5, "projected": math.nan, "skipped": math.nan,
           "zero_grad": 0.0}
    window = health.window_summary([{**rec, "kind": "across", "grad_cos": 0.5},
                                    {**rec, "kind": "within", "grad_cos": math.nan},
                                    {**rec, "kind": "within", "grad_cos": -0.25}])
    assert window["grad_cos_within"] == -0.25 and window["grad_cos_across"] == 0.5
    assert window["grad_cos_nan_frac"] == pytest.approx(1 / 3) and math.isnan(window["gac_projected_frac"])
