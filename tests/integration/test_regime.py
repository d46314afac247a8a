"""The LLM trainers' learner regime: epochs x minibatches per batch, the proximal policy at the start of the
batch, GRPO groups, and the regime presets."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from testbed.config import RunConfig
from testbed.regimes import get_regime
from testbed.runner import Runner, run

pytestmark = pytest.mark.integration


def test_one_step_per_batch_at_lag_zero_is_on_policy():
    res = run(RunConfig(task="mnist", recipe="tis", steps=6, log_every=2, batch_size=20))
    for row in res.rows:  # behaviour = learner, bit for bit: every ratio is exactly 1
        assert row["behav_ratio_min"] == row["behav_ratio_max"] == 1.0 and row["ess"] == 1.0 and row["lag_max"] == 0


def test_the_step_record_agrees_with_the_logged_diagnostics_of_the_same_step():
    # a stale, off-policy run logging every step: the per-step record (testbed/health.py) and the logged row
    # compute ESS, the largest ratio and the gradient's norm and cosine from the same update, so they agree
    res = run(RunConfig(task="mnist", recipe="tis", steps=12, log_every=1, batch_size=20, delay="fixed:3", lr=3e-2))
    assert len(res.steps) == len(res.rows) == 12
    assert min(r["ess"] for r in res.rows) < 0.99 and max(r["behav_ratio_max"] for r in res.rows) > 1.01  # off-policy
    for step, row in zip(res.steps, res.rows, strict=True):
        assert step["step"] == row["step"]
        assert step["ess"] == row["ess"] and step["ratio_max"] == row["behav_ratio_max"]
        assert step["grad_norm"] == row["grad_norm"]
        same_nan = math.isnan(step["grad_cos"]) and math.isnan(row["grad_cos_prev"])
        assert step["grad_cos"] == row["grad_cos_prev"] or same_nan
    assert sum(math.isfinite(s["grad_cos"]) for s in res.steps) >= 8


def test_epochs_times_minibatches_optimizer_steps_per_batch():
    runner = Runner(RunConfig(task="mnist", recipe="grpo", steps=5, log_every=5, batch_size=40, group_size=4,
                              epochs=3, minibatches=2))
    runner.run()
    state = runner.optimizers["adam"].state[runner.params(0)["fc1.weight"]]
    assert int(state["step"]) == 5 * 3 * 2
    one = Runner(RunConfig(task="mnist", recipe="grpo", steps=5, log_every=5, batch_size=40, group_size=4))
    one.run()
    assert int(one.optimizers["adam"].state[one.params(0)["fc1.weight"]]["step"]) == 5


def test_the_proximal_policy_is_the_policy_at_the_start_of_the_batch():
    """At lag 0 the behaviour policy is the policy at the start of the batch, so decoupled PPO (clipping
    around the proximal policy, weighting by proximal / behaviour) is exactly PPO, bit for bit, even over
    several optimizer steps per batch, while the later minibatches' current policy has moved (ratios != 1)."""
    base = {"task": "mnist", "steps": 6, "log_every": 3, "batch_size": 40, "epochs": 2, "minibatches": 2, "lr": 3e-3}
    ppo, dec = Runner(RunConfig(recipe="ppo", **base)), Runner(RunConfig(recipe="decoupled_ppo", **base))
    a, b = ppo.run()[0], dec.run()[0]
    for name, value in ppo.params(0).items():
        assert torch.equal(value, dec.params(0)[name]), name
    cols = [c for c in pd.DataFrame(a.rows).columns if c in pd.DataFrame(b.rows).columns]
    assert pd.DataFrame(a.rows)[cols].equals(pd.DataFrame(b.rows)[cols])
    assert max(r["behav_ratio_max"] for r in a.rows) > 1.0  # the last minibatch step's policy is not the behaviour
    # and with staleness they differ: the behaviour policy is older than the proximal one
    stale = {**base, "delay": "fixed:2"}
    ppo, dec = Runner(RunConfig(recipe="ppo", **stale)), Runner(RunConfig(recipe="decoupled_ppo", **stale))
    ppo.run()
    dec.run()
    assert any(not torch.equal(v, dec.params(0)[k]) for k, v in ppo.params(0).items())


def test_grpo_groups_repeat_each_context_g_times():
    seen = []
    runner = Runner(RunConfig(task="mnist", recipe="grpo", steps=2, log_every=2, batch_size=40, n_actors=2, group_size=5))
    runner.on_batch = lambda r, t, batch: seen.append(batch)
    runner.run()
    for batch in seen:
        gid, ctx = batch["group_ids"], batch["contexts"]
        assert gid.tolist() == [g for g in range(8) for _ in range(5)]  # 2 actors x 4 groups of 5
        for g in range(8):
            assert (ctx[gid == g] == ctx[gid == g][0]).all()


def test_regime_presets_fill_what_the_run_leaves_unset():
    regime = get_regime("async_grpo")
    preset = regime.for_task("mnist")
    cfg = RunConfig(task="mnist", recipe="grpo", regime="async_grpo").resolved()
    assert (cfg.group_size, cfg.epochs, cfg.minibatches, cfg.lr, cfg.delay) == (
        preset["group_size"], preset["epochs"], preset["minibatches"], preset["lr"], preset["delay"])
    # explicit settings win over the regime; the regime over the task's defaults (mnist's lr 1e-3)
    explicit = RunConfig(task="mnist", regime="async_grpo", lr=1e-4, minibatches=2, delay="sync").resolved()
    assert (explicit.lr, explicit.minibatches, explicit.delay, explicit.group_size) == (1e-4, 2, "sync", preset["group_size"])
    plain = RunConfig(task="mnist").resolved()
    assert (plain.lr, plain.group_size, plain.epochs, plain.minibatches, plain.delay) == (1e-3, 1, 1, 1, "sync")
    assert len(regime.stale) == 2
    with pytest.raises(ValueError, match="unknown regime 'llm'; allowed: one_step, async_grpo"):
        RunConfig(regime="llm").resolved()
