"""The runner: lag 0 is a plain on-policy loop, behaviour log-probs are those of version t - lag,
realised lags, frictions, divergence, memory, and learning that actually happens."""

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from testbed import diagnostics as diag
from testbed.config import RunConfig
from testbed.delay import parse_staleness
from testbed.frictions import sample_actions
from testbed.runner import Runner, run
from testbed.stabilizers import PolicyTerms, build
from testbed.tasks import TASKS, make_task, register_task, stacked
from testbed.tasks.base import Task, token_logp
from testbed.util.seeding import generator, numpy_rng

pytestmark = pytest.mark.integration


def plain_on_policy_loop(task_name, recipe_spec, seed, steps, batch, lr, **task_args):
    """A REINFORCE-style loop with no delay machinery, using the runner's documented RNG contract
    (testbed/runner.py): initial weights from stream ("init"), each step's contexts and sampling uniforms
    from stream ("slot", step, actor 0), actions by inverse CDF; the policy is one slot."""
    task = make_task(task_name, **task_args)
    policy = task.make_policy([generator(seed, "init")])
    opt = torch.optim.Adam(policy.parameters(), lr=lr, fused=True)
    recipe = build(recipe_spec)
    for t in range(steps):
        gen = generator(seed, "slot", t, 0)
        x = task.sample_contexts(batch, gen, "train")[None]
        u = torch.rand((batch, 1), generator=gen)
        with torch.no_grad():
            logits = task.logits(policy, x, torch.zeros(1, batch, 1, dtype=torch.long))[:, :, 0].float()
        a = sample_actions(torch.softmax(logits, -1), u[None, :, 0]).unsqueeze(-1)  # [1, B, 1]
        blogp = token_logp(logits.unsqueeze(-2), a)[0]
        r = task.reward(x[0], a[0])
        logp = token_logp(task.logits(policy, x, a), a)[0]
        mask = torch.ones_like(logp, dtype=torch.bool)
        adv = recipe.advantages(r, logp=logp.detach(), behavior_logp=blogp, mask=mask)
        terms = PolicyTerms(logp, blogp, adv, mask, proximal_logp=logp.detach(), rewards=r)
        loss = recipe.loss(terms).loss
        opt.zero_grad()
        loss.backward()
        recipe.step(policy, opt, terms)
    return {k: v.detach()[0] for k, v in policy.named_parameters()}


@pytest.mark.parametrize("task_name, recipe, task_args", [
    ("mnist", "pg", {}), ("mnist", "dg", {}), ("contextual_bandit", "ppo", {"N": 5, "K": 4, "init_std": 0.5}),
])
def test_lag_zero_pipeline_equals_plain_on_policy_loop(task_name, recipe, task_args):
    steps, batch, lr, seed = 12, 16, 1e-2, 3
    runner = Runner(RunConfig(task=task_name, recipe=recipe, delay="sync", seed=seed, steps=steps, batch_size=batch,
                              lr=lr, log_every=5, task_args=task_args))
    runner.run()
    plain = plain_on_policy_loop(task_name, recipe, seed, steps, batch, lr, **task_args)
    for name, value in plain.items():
        assert torch.equal(runner.params(0)[name].detach(), value), name
    # and a delayed run really differs
    delayed = Runner(RunConfig(task=task_name, recipe=recipe, delay="fixed:2", seed=seed, steps=steps,
                               batch_size=batch, lr=lr, task_args=task_args))
    delayed.run()
    assert any(not torch.equal(delayed.params(0)[n].detach(), v) for n, v in plain.items())


class TinySeqPolicy(nn.Module):
    """logits_t = ctx[x] + prev[a_{t-1}] (a_0 = start token 3), for S slots."""

    def __init__(self, generators):
        super().__init__()
        self.ctx = stacked.Table(3, 3, generators, std=1.0)
        self.prev = stacked.Table(4, 3, generators, std=1.0)

    def forward(self, contexts, actions):
        prev = torch.cat([torch.full((*actions.shape[:2], 1), 3), actions[..., :-1]], dim=-1)
        return self.ctx(contexts).unsqueeze(2) + self.prev(prev)


class TinySeqTask(Task):
    """A causal T = 4 task with the default (prefix-recomputing) decoding."""

    name = "_tiny_seq"
    horizon = 4
    n_actions = 3

    def make_policy(self, generators):
        return TinySeqPolicy(generators)

    def sample_contexts(self, n, generator, split="train"):
        return torch.randint(3, (n,), generator=generator)

    def logits(self, policy, contexts, actions):
        return policy(contexts, actions)

    def reward(self, contexts, actions):
        return (actions == contexts[:, None]).float().mean(1)

    def evaluate(self, policy, generators):
        return [{"test_error": 0.0} for _ in generators]


@pytest.fixture
def tiny_seq():
    """Register the test-only sequence task for one test, then remove it from the registry."""
    register_task(TinySeqTask)
    yield
    TASKS.pop(TinySeqTask.name, None)


def check_behaviour_logp(configs, task=None):
    runner = Runner(configs, task=task)
    versions, checked = {}, {}

    def on_version(r, v, params):
        versions[(r, v)] = {k: p.detach().clone()[None] for k, p in params.items()}

    def on_batch(r, t, batch):
        vs = batch["versions"]
        assert int(vs.max()) <= t and int(vs.min()) >= 0
        expected = torch.empty_like(batch["behavior_logp"])
        for v in vs.unique().tolist():
            lp = runner.token_logp(versions[(r, v)], batch["contexts"][None], batch["actions"][None])[0]
            expected[vs == v] = lp[vs == v]
        assert torch.allclose(batch["behavior_logp"], expected, atol=1e-5, rtol=0), t
        checked.setdefault(r, []).append((t, vs))

    runner.on_version, runner.on_batch = on_version, on_batch
    runner.run()
    return runner, checked


@pytest.mark.parametrize("delay", ["fixed:3", "uniform:4", "bounded:2,3"])
def test_behaviour_logp_is_that_of_version_t_minus_lag(delay):
    cfg = RunConfig(task="mnist", recipe="pg", delay=delay, steps=15, batch_size=12, n_actors=3, lr=1e-2)
    _, checked = check_behaviour_logp([cfg])
    lags = parse_staleness(delay).lags(15, 3, numpy_rng(0, "lags"))  # the documented stream of the lag table
    for t, vs in checked[0]:
        assert np.array_equal(vs[:, 0].numpy(), np.repeat(t - lags[t], [4, 4, 4]))
    assert lags.max() > 0


def test_per_token_mixed_versions_record_each_tokens_own_version(tiny_seq):
    cfg = RunConfig(task="_tiny_seq", recipe="pg", delay="fixed:3+mixed:0.5", steps=20, batch_size=40, n_actors=2,
                    lr=0.05)
    _, checked = check_behaviour_logp([cfg, RunConfig(**{**cfg.to_dict(), "seed": 1, "delay": "uniform:3+mixed:0.3"})])
    for r in (0, 1):
        mixed = [vs for t, vs in checked[r] if t >= 3]
        assert any(bool((vs[:, -1] > vs[:, 0]).any()) for vs in mixed)  # some sequences span versions
        assert all(bool((vs.diff(dim=1) >= 0).all()) for vs in mixed)


def test_frictions_keep_the_clean_behaviour_logp(tiny_seq):
    cfg = RunConfig(task="_tiny_seq", recipe="pg", delay="uniform:3",
                    frictions="bug(frac=0.5, kind=perturb, sigma=0.5)+mismatch(sigma=1.0)", steps=10, batch_size=20,
                    n_actors=2, lr=0.05)
    check_behaviour_logp([cfg])
    cfg = RunConfig(task="mnist", recipe="pg", delay="fixed:2", frictions="bug(frac=1, kind=temperature, temp=5)",
                    steps=6, batch_size=10, lr=1e-2)
    check_behaviour_logp([cfg])


def test_logged_lags_and_rewards():
    res = run(RunConfig(task="contextual_bandit", recipe="pg", delay="fixed:4", steps=30, batch_size=8, log_every=5,
                        frictions="reward(p=1, kind=flip)"))
    steps = [r["step"] for r in res.rows]
    assert steps == [5, 10, 15, 20, 25, 30]
    assert [r["lag_mean"] for r in res.rows] == [4.0] * 6 and res.rows[0]["lag_max"] == 4
    for r in res.rows:  # every reward flipped: the learner sees 1 - r
        assert r["reward"] == pytest.approx(1 - r["true_reward"])


def test_diverged_run_is_recorded_as_diverged():
    res = run(RunConfig(task="contextual_bandit", recipe="pg", steps=50, batch_size=8, lr=1e38, log_every=1,
                        optimizer="sgd", task_args={"init_std": 1.0}))
    assert res.status == "diverged"
    adam = run(RunConfig(task="contextual_bandit", recipe="pg", steps=50, batch_size=8, lr=1e38, log_every=1))
    assert adam.status == "diverged"
    last = res.rows[-1]
    assert set(last) == {"step", "diverged_at"} and last["step"] < 50
    for row in res.rows[:-1]:
        # (a cosine is NaN, by definition, at a step whose gradient is exactly zero; GAC's rates without GAC and
        # lost classes on a task that is not a classification are undefined too)
        assert all(math.isfinite(v) for k, v in row.items() if not k.startswith(("grad_cos", "cos_", "gac_", "lost_")))


def test_queue_memory_is_small_compared_with_storing_versions():
    d, batch = 200, 20
    res = run(RunConfig(task="mnist", recipe="pg", delay=f"fixed:{d}", steps=2 * d, batch_size=batch, log_every=d // 2))
    per_sample = res.info["queue_peak_bytes"] / (d * batch)
    assert 0 < per_sample <= 40  # context index, action, log-prob, version, two rewards
    assert res.info["queue_peak_bytes"] < 0.01 * (d + 1) * res.info["param_bytes"]


def test_policy_learns_on_policy_and_oracle_cosines_are_exact():
    res = run(RunConfig(task="contextual_bandit", recipe="pg", steps=200, batch_size=64, lr=0.1, log_every=50,
                        task_args={"N": 5, "K": 4}))
    assert res.rows[0]["test_reward"] < res.rows[-1]["test_reward"]
    assert res.rows[-1]["test_reward"] > 0.9  # from 0.25 (uniform over 4 actions)
    # exact IS with a huge batch: the estimated gradient is the exact expected policy gradient
    res = run(RunConfig(task="contextual_bandit", recipe="is", delay="fixed:3", steps=8, batch_size=20_000, lr=0.3,
                        log_every=1, task_args={"N": 2, "K": 3, "init_std": 1.0}))
    assert min(r["cos_true_pg"] for r in res.rows[3:]) > 0.97


def test_mnist_learns_on_policy():
    res = run(RunConfig(task="mnist", recipe="pg", steps=150, log_every=150))
    assert res.rows[-1]["test_error"] < 0.5  # from ~0.9 at chance
    assert res.rows[-1]["cos_true_pg"] > 0.0


@pytest.mark.parametrize("task_name, task_args", [("mnist", {}), ("token_reversal", {"H": 3})])
def test_score_norms_match_per_sample_backward(task_name, task_args):
    """OPOB's per-sample ||grad log pi(tau)||^2: the fast paths (one backward for an MLP; torch.func for the
    transformer) against one backward pass per sample, for each slot of a two-slot policy."""
    task = make_task(task_name, **task_args)
    policy = task.make_policy([generator(0, "init"), generator(1, "init")])
    g = torch.Generator().manual_seed(2)
    x = torch.stack([task.sample_contexts(6, g) for _ in range(2)])
    a = torch.randint(task.n_actions, (2, 6, task.horizon), generator=g)
    fast = diag.score_sq_norms(task, policy, x, a)
    for s in range(2):
        for i in range(6):
            logp = token_logp(task.logits(policy, x[:, i : i + 1], a[:, i : i + 1]), a[:, i : i + 1])[s].sum()
            grads = torch.autograd.grad(logp, list(policy.parameters()))
            ref = sum(float(gr[s].pow(2).sum()) for gr in grads)
            assert float(fast[s, i]) == pytest.approx(ref, rel=1e-4)


@pytest.mark.parametrize("task_name, task_args", [("mnist", {}), ("token_reversal", {"H": 3})])
def test_score_norms_made_with_the_learners_forward_are_the_separate_computations_bit_for_bit(task_name, task_args):
    """The learner's one forward for OPOB's norms and its update: the norms equal `score_sq_norms`, the logits
    ``task.logits``, and a backward through those logits gives the gradients of a fresh forward, all exactly."""
    task = make_task(task_name, **task_args)
    policy = task.make_policy([generator(0, "init"), generator(1, "init")])
    g = torch.Generator().manual_seed(3)
    x = torch.stack([task.sample_contexts(6, g) for _ in range(2)])
    a = torch.randint(task.n_actions, (2, 6, task.horizon), generator=g)
    weights = torch.randn(2, 6, task.horizon, generator=g)
    norms, logits = diag.score_sq_norms_and_logits(task, policy, x, a)
    assert torch.equal(norms, diag.score_sq_norms(task, policy, x, a))
    fresh = task.logits(policy, x, a)
    assert torch.equal(logits, fresh)
    shared = torch.autograd.grad((token_logp(logits, a) * weights).sum(), list(policy.parameters()))
    separate = torch.autograd.grad((token_logp(fresh, a) * weights).sum(), list(policy.parameters()))
    assert all(torch.equal(p, q) for p, q in zip(shared, separate, strict=True))


def test_same_seed_same_result_and_seeds_differ():
    cfg = RunConfig(task="mnist", recipe="tis", delay="uniform:5", steps=20, batch_size=10, log_every=10,
                    frictions="bug(frac=0.3, kind=random)+reward(p=0.1)")
    first = pd.DataFrame(run(cfg).rows)
    assert first.equals(pd.DataFrame(run(cfg).rows))  # NaN == NaN here, unlike ==
    other = RunConfig(**{**cfg.to_dict(), "seed": 1})
    assert not first.equals(pd.DataFrame(run(other).rows))
