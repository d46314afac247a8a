"""The lag-1 path of the loop on token reversal, against sync with everything else held equal.

One version of lag changes token reversal's outcome for PG a great deal (results/findings/token_lag.md).
These tests pin down that the simulator itself adds nothing at lag >= 1 beyond sampling from the older
version: the same sampling stream whatever the delay, behaviour log-probs of the version that sampled,
and a learner whose update is one formula of the whole batch however many actors filled it.
"""

from __future__ import annotations

import pytest
import torch

from testbed.config import RunConfig
from testbed.runner import Runner
from tests.integration.test_runner import check_behaviour_logp

pytestmark = pytest.mark.integration

# the setting (H = 10, M = 2, 10 actors, PG, Adam 1e-3, partial credit), with a smaller batch
TASK = {"H": 10, "M": 2, "n_eval": 64, "partial_credit": True}


def config(delay: str, **kw) -> RunConfig:
    base = {"task": "token_reversal", "recipe": "pg", "delay": delay, "n_actors": 10, "batch_size": 40, "steps": 12,
            "log_every": 4, "seed": 5, "task_args": TASK}
    return RunConfig(**{**base, **kw})


def trace(cfg: RunConfig, freeze: bool) -> tuple[list, list, list]:
    """Train ``cfg``; with ``freeze`` every new version is overwritten by version 0 (so a stale version is the
    current one, while the optimizer still steps). Returns (the consumed batches, the logged rows, the per-step
    records)."""
    runner = Runner([cfg])
    batches: list[dict] = []
    init: dict[str, torch.Tensor] = {}

    def on_version(r, v, params):
        if v == 0:
            init.update({k: p.detach().clone() for k, p in params.items()})
        elif freeze:
            with torch.no_grad():
                for k, p in params.items():
                    p.copy_(init[k])

    runner.on_version = on_version
    runner.on_batch = lambda r, t, b: batches.append({k: v.clone() if torch.is_tensor(v) else v for k, v in b.items()})
    (result,) = runner.run()
    return batches, result.rows, result.steps


def same(a: dict, b: dict, keys: tuple[str, ...]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in keys)


DATA = ("contexts", "actions", "behavior_logp", "rewards")


def test_lag_one_whose_stale_version_is_the_current_one_reproduces_sync_bit_for_bit():
    sync_b, sync_rows, sync_steps = trace(config("sync"), freeze=True)
    for delay in ("fixed:1", "uniform:1"):
        b, rows, steps = trace(config(delay), freeze=True)
        assert all(same(x, y, DATA) for x, y in zip(b, sync_b, strict=True)), delay  # the same sampling stream
        # every logged number but the lag's own bookkeeping, and every per-step record (gradients, ESS, entropy)
        lagless = [{k: v for k, v in row.items() if k not in ("lag_mean", "lag_max")} for row in rows]
        assert [str(r) for r in lagless] == [str({k: v for k, v in r.items() if k not in ("lag_mean", "lag_max")})
                                             for r in sync_rows], delay
        assert [str(s) for s in steps] == [str(s) for s in sync_steps], delay
        assert rows[-1]["lag_mean"] > 0  # the lag was real: versions t - 1 were recorded
        assert all(s["ess"] == 1.0 for s in steps)  # identical versions: every ratio is exactly 1
    # the control: with versions that do move, lag 1 samples something else from step 1 on (step 0 is clamped)
    moving, _, _ = trace(config("fixed:1"), freeze=False)
    sync_moving, _, _ = trace(config("sync"), freeze=False)
    assert same(moving[0], sync_moving[0], DATA) and same(moving[1], sync_moving[1], ("contexts",))
    assert not same(moving[1], sync_moving[1], ("actions", "behavior_logp"))


@pytest.mark.parametrize("delay", ["fixed:1", "uniform:1"])
def test_behaviour_logp_at_lag_one_is_a_fresh_evaluation_of_the_version_that_sampled(delay):
    _, checked = check_behaviour_logp([config(delay)])  # |recorded - fresh| <= 1e-5 for every token
    versions = {t: vs for t, vs in checked[0]}
    assert sorted(versions) == list(range(12))
    for t, vs in versions.items():
        if delay == "fixed:1":
            assert bool((vs == max(t - 1, 0)).all()), t
        else:
            assert set(vs.unique().tolist()) <= {max(t - 1, 0), t}, t
    if delay == "uniform:1":  # ten actors: a batch mixes lag-0 and lag-1 chunks
        assert any(len(vs.unique()) == 2 for vs in versions.values())


def whole_batch_gradient(runner: Runner, params: dict[str, torch.Tensor], batch: dict) -> list[torch.Tensor]:
    """The PG ascent's loss gradient written out: token-mean of -(R_i - mean_j R_j) log pi_t(a_ik | ...)."""
    ps = {k: v.detach().clone()[None].requires_grad_(True) for k, v in params.items()}
    logp = runner.token_logp(ps, batch["contexts"][None], batch["actions"][None])[0]
    r = batch["rewards"]
    loss = -((r - r.mean())[:, None] * logp).mean()
    return list(torch.autograd.grad(loss, list(ps.values())))


@pytest.mark.parametrize("n_actors", [1, 10])
def test_learner_update_is_one_formula_of_the_whole_batch_for_one_or_ten_actors(n_actors):
    """The baseline is the mean over the whole batch (never per actor chunk), log pi is the learner's current
    version, and the update is that gradient (SGD: p_{t+1} = p_t - lr g): the same for 1 actor and 10."""
    lr = 0.05
    runner = Runner([config("uniform:1", n_actors=n_actors, optimizer="sgd", lr=lr, steps=6)])
    versions: dict[int, dict[str, torch.Tensor]] = {}
    expected: dict[int, list[torch.Tensor]] = {}
    chunked: dict[int, list[torch.Tensor]] = {}

    def on_batch(r, t, batch):
        expected[t] = whole_batch_gradient(runner, runner.params(0), batch)
        # the alternative a defect could compute: a baseline per actor chunk
        rr = batch["rewards"].view(n_actors, -1)
        per_chunk = {**batch, "rewards": (rr - rr.mean(1, keepdim=True)).flatten() + batch["rewards"].mean()}
        chunked[t] = whole_batch_gradient(runner, runner.params(0), per_chunk)

    runner.on_version = lambda r, v, params: versions.__setitem__(v, {k: p.detach().clone() for k, p in params.items()})
    runner.on_batch = on_batch
    runner.run()
    worst, apart = 0.0, 0.0
    for t, grads in expected.items():
        got = torch.cat([((versions[t][k] - versions[t + 1][k]) / lr).flatten() for k in versions[t]])
        want = torch.cat([g.flatten() for g in grads])
        other = torch.cat([g.flatten() for g in chunked[t]])
        # p_{t+1} = fl(p_t - lr g) is rounded to within u |p_{t+1}| per entry (u = 2^-24, float32), so the update
        # read back as a gradient is within ||u p_{t+1}|| / lr of g; the recomputed gradient's own float32
        # rounding (another forward of the same batch) is far below 1e-4 of its norm
        bound = float(torch.cat([versions[t + 1][k].flatten() for k in versions[t]]).norm()) * 2.0**-24 / lr
        worst = max(worst, float((got - want).norm()) / (bound + 1e-4 * float(want.norm())))
        apart = max(apart, float((other - want).norm() / want.norm()))
    assert worst <= 1.0
    if n_actors == 10:
        assert apart > 0.05  # a per-chunk baseline would have been seen
