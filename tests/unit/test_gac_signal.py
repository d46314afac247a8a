"""The exact expected gradient behind ``cos_consecutive_exact`` (testbed/gac_signal.py), on closed forms."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from testbed.config import RunConfig
from testbed.gac_signal import Probe, advantage_means, expected_loss, noise_ratio
from testbed.runner import Runner
from testbed.stabilizers import PolicyTerms, build
from testbed.stabilizers.advantages import Group


@pytest.mark.parametrize("p", [0.0, 0.3, 0.9])
def test_group_advantage_means_equal_the_enumeration_of_every_group(p: float) -> None:
    """E[A | r] of GRPO's z-score, by enumerating all 2^G reward vectors through the project's own `Group`."""
    g = 4
    sums = {1: 0.0, 0: 0.0}
    probs = {1: 0.0, 0: 0.0}
    for rewards in itertools.product((0.0, 1.0), repeat=g):
        prob = math.prod(p if r else 1 - p for r in rewards)
        a = Group()(torch.tensor(rewards), group_ids=torch.zeros(g, dtype=torch.long))
        first = int(rewards[0])  # condition on the first member's reward
        sums[first] += prob * float(a[0])
        probs[first] += prob
    a1, a0 = advantage_means("group", torch.tensor([p]), g)
    for r, got in ((1, a1), (0, a0)):
        want = sums[r] / probs[r] if probs[r] > 0 else None
        if want is not None:
            assert float(got) == pytest.approx(want, abs=1e-6)


def _two_action(recipe: str, theta: torch.Tensor, logmu: torch.Tensor, group: int = 1) -> torch.Tensor:
    """The exact expected loss gradient of a one-context, two-action softmax bandit with logits ``theta``."""
    theta = theta.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)[None]
    loss = expected_loss(build(recipe), logp, [(1.0, logmu[None])], torch.tensor([0]), group)
    return torch.autograd.grad(loss, theta)[0]


def test_on_policy_pg_gradient_is_minus_the_gradient_of_the_expected_reward() -> None:
    """pg with raw rewards, behaviour = policy: -grad pi_0 = -pi_0 (1 - pi_0) (1, -1) for reward 1[a = 0]."""
    theta = torch.tensor([0.3, -0.4], dtype=torch.float64)
    pi0 = float(torch.softmax(theta, -1)[0])
    got = _two_action("raw+pg", theta, torch.log_softmax(theta, -1))
    want = -pi0 * (1 - pi0) * torch.tensor([1.0, -1.0], dtype=torch.float64)
    assert torch.allclose(got, want, atol=1e-12)


def test_stale_ppo_drops_the_clipped_action_exactly() -> None:
    """PPO (eps 0.2) with raw rewards from a stale mu: action 0 (reward 1, A = 1) has ratio pi_0 / mu_0 > 1.2, so
    its term is clipped (zero gradient); action 1 (A = 0) adds nothing: the expected gradient is exactly zero.
    With mu_0 such that the ratio is inside the clip range, it is -mu_0 * rho_0 * grad log pi_0 = -grad pi_0."""
    theta = torch.tensor([1.0, -1.0], dtype=torch.float64)
    pi = torch.softmax(theta, -1)
    far = torch.log(torch.tensor([0.5, 0.5], dtype=torch.float64))  # ratio pi_0 / 0.5 = 1.76 > 1.2
    assert torch.count_nonzero(_two_action("raw+ppo", theta, far)) == 0
    near = torch.log(torch.tensor([float(pi[0]) / 1.1, 1 - float(pi[0]) / 1.1], dtype=torch.float64))
    pi0 = float(pi[0])
    want = -pi0 * (1 - pi0) * torch.tensor([1.0, -1.0], dtype=torch.float64)
    assert torch.allclose(_two_action("raw+ppo", theta, near), want, atol=1e-12)


def test_group_advantages_weight_each_action_by_its_conditional_mean() -> None:
    """grpo on policy: sum_a pi_a E[A | r_a] (-grad log pi_a), with E[A | r] from `advantage_means`."""
    theta = torch.tensor([0.2, 0.1], dtype=torch.float64)
    pi = torch.softmax(theta, -1)
    a1, a0 = advantage_means("group", pi[:1], 10)
    grad_logpi = torch.stack([torch.tensor([1.0, 0.0]) - pi, torch.tensor([0.0, 1.0]) - pi]).double()
    want = -(pi[0] * a1 * grad_logpi[0] + pi[1] * a0 * grad_logpi[1])
    got = _two_action("grpo", theta, torch.log_softmax(theta, -1), group=10)
    assert torch.allclose(got, want, atol=1e-6)


def test_unsupported_recipes_are_refused() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        _two_action("dg", torch.zeros(2, dtype=torch.float64), torch.log(torch.tensor([0.5, 0.5])).double())
    with pytest.raises(ValueError, match="advantage"):
        advantage_means("opob", torch.tensor([0.5]), 10)


def test_noise_ratio_inverts_the_minibatch_norm_excess() -> None:
    """E|g_k|^2 = |g|^2 (1 + 1 / r): norms 1 and sqrt(1 + 1/4) give r = 4; no excess is undefined."""
    assert noise_ratio([1.0, 1.0], [math.sqrt(1.25)] * 2) == pytest.approx(4.0)
    assert math.isnan(noise_ratio([1.0], [1.0]))
    assert math.isnan(noise_ratio([float("nan")], [2.0]))


def test_the_probe_leaves_training_bit_for_bit_and_measures_every_step() -> None:
    cfgs = [RunConfig(task="mnist", recipe="grpo", delay=d, seed=3, steps=6, log_every=3, regime="async_grpo")
            for d in ("sync", "bounded:8,4")]
    plain = Runner(cfgs).run()
    runner = Runner(cfgs)
    probe = Probe(runner, until=4)
    watched = runner.run()
    for a, b in zip(plain, watched, strict=True):
        assert a.rows == b.rows
    for rows in probe.rows:
        assert [r["k"] for r in rows] == list(range(8))  # 4 batches x 2 minibatches, then nothing
        assert math.isnan(rows[0]["cos_consecutive_exact"])
        cos = np.array([r["cos_consecutive_exact"] for r in rows[1:]])
        assert np.all((cos > -1) & (cos <= 1 + 1e-9))
        # the minibatch gradient is an estimate of the exact one: noisier, so longer on average
        assert np.mean([r["norm_minibatch"] for r in rows]) > np.mean([r["norm_exact"] for r in rows])


def test_the_probe_refuses_a_recipe_it_cannot_take_exactly() -> None:
    with pytest.raises(ValueError, match="surrogate"):
        Probe(Runner([RunConfig(task="mnist", recipe="dg", seed=0, steps=2)]), until=1)


def test_figures_summary_is_undefined_outside_the_measured_batches():
    from figures.gac_probe import summary

    rows = [{"step": s, "cos_consecutive_exact": c, "norm_exact": 1.0, "norm_minibatch": math.sqrt(1.25),
             "cos_minibatch_prev": 0.1} for s, c in ((1, float("nan")), (2, 0.5), (3, 0.7), (4, 0.9))]
    rec = {"settings": {"until": 4}, "probe": rows}
    got = summary(rec, (2.0, 3.0))
    assert got["cos"] == pytest.approx(0.6) and got["r"] == pytest.approx(4.0) and got["cos_minibatch"] == 0.1
    assert all(math.isnan(v) for v in summary(rec, (2.0, 5.0)).values())  # the window ends after the probe
    assert all(math.isnan(v) for v in summary(None, (2.0, 3.0)).values())


def test_exploration_refuses_the_confirmatory_block(tmp_path, capsys):
    from figures.gac_exact import main

    assert main(["--seeds", "3", "10000", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10000" in err[0] and "exploratory seeds are 0 .. 9999" in err[0]
    assert not any(tmp_path.iterdir())


def test_exact_expectation_equals_the_mean_of_many_sampled_grpo_batches():
    """A stale behaviour policy, GRPO's group z-score and PPO's clip through the recipe's own code: the average
    gradient of many sampled batches (groups of G per context, actions from mu) converges to the exact one."""
    torch.manual_seed(0)
    n_ctx, n_act, g, draws = 6, 3, 4, 40_000
    feats = torch.randn(n_ctx, 5, dtype=torch.float64)
    labels = torch.randint(n_act, (n_ctx,))
    w = (0.5 * torch.randn(5, n_act, dtype=torch.float64)).requires_grad_(True)
    logmu = torch.log_softmax(feats @ (w.detach() + 0.4 * torch.randn(5, n_act, dtype=torch.float64)), -1)
    recipe = build("grpo")
    logp = torch.log_softmax(feats @ w, -1)
    exact = torch.autograd.grad(expected_loss(recipe, logp, [(1.0, logmu)], labels, g), w, retain_graph=True)[0]
    gen = torch.Generator().manual_seed(1)
    acts = torch.multinomial(logmu.exp(), draws * g, replacement=True, generator=gen).reshape(n_ctx, draws, g)
    rewards = (acts == labels[:, None, None]).double()
    gids = torch.arange(n_ctx * draws).reshape(n_ctx, draws, 1).expand(-1, -1, g)
    adv = recipe.advantages(rewards.reshape(-1), group_ids=gids.reshape(-1))
    ctx = torch.arange(n_ctx)[:, None, None].expand(-1, draws, g).reshape(-1)
    a = acts.reshape(-1)
    terms = PolicyTerms(logp[ctx, a][:, None], logmu[ctx, a][:, None], adv[:, None],
                        torch.ones(a.numel(), 1, dtype=torch.bool))
    sampled = torch.autograd.grad(recipe.loss(terms).loss, w)[0]
    assert float(torch.nn.functional.cosine_similarity(exact.flatten(), sampled.flatten(), dim=0)) > 0.999
    assert float(torch.linalg.vector_norm(sampled - exact) / torch.linalg.vector_norm(exact)) < 0.03


def test_the_probe_cache_reads_only_records_of_the_code_now_and_measures_in_workers(tmp_path):
    """figures.gac_probe: records measured in two worker processes are the records measured in this process, bit
    for bit; a record whose code fingerprint differs from the run's now is not read (None) and is measured again."""
    import json

    from figures import gac_probe
    from testbed.util.codeprint import forget

    forget()  # this process's digests as the code is now (not as an earlier test's patches left them cached)
    cfgs = [RunConfig(task="mnist", recipe="grpo", delay=d, seed=s, steps=4, log_every=2, regime="async_grpo")
            for d in ("sync", "bounded:8,4") for s in (3, 4)]
    one = [replace(c, minibatches=1) for c in cfgs[:2]] + cfgs[2:]  # two shapes: two loops, one per worker
    gac_probe.ensure(tmp_path / "here", one, 2)
    gac_probe.ensure(tmp_path / "pool", one, 2, workers=2)
    for c in one:
        here, pool = gac_probe.load(tmp_path / "here", c, 2), gac_probe.load(tmp_path / "pool", c, 2)
        assert here is not None and json.dumps(here["probe"]) == json.dumps(pool["probe"])
    path = gac_probe.rows_path(tmp_path / "here", one[0], 2)
    record = json.loads(path.read_text())
    path.write_text(json.dumps({**record, "code": {**record["code"], "loop": "another"}}))
    assert gac_probe.load(tmp_path / "here", one[0], 2) is None
    gac_probe.ensure(tmp_path / "here", one, 2, cached_only=True)
    assert gac_probe.load(tmp_path / "here", one[0], 2) is None  # cached only: nothing measured
    gac_probe.ensure(tmp_path / "here", one, 2)
    assert json.dumps(gac_probe.load(tmp_path / "here", one[0], 2)["probe"]) == json.dumps(record["probe"])


@pytest.mark.parametrize(("item", "message"), [("recipe=pg", "KEY one of"), ("lr=abc", "lr must be"), ("lr", "KEY=VALUE")])
def test_exploration_overrides_are_checked_before_anything_runs(tmp_path, capsys, item, message):
    from figures.gac_exact import main

    assert main(["--seeds", "0", "--set", item, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0] and not (tmp_path / "o").exists()


def test_exploration_trains_the_base_with_the_overrides_at_every_level(monkeypatch):
    """A regime search for GAC-2's premise trains only the registered base, at sync and each stale level, with the
    overridden settings (and nothing else changed: the same run ids as the regime's runs with those settings)."""
    import dataclasses

    from figures import gac_exact
    from figures.experiments.async_grpo import settings as ag
    from testbed import runner

    seen = []

    class Stop(Exception):
        pass

    def capture(configs, *args, **kwargs):
        seen.extend(configs)
        raise Stop

    monkeypatch.setattr(runner, "run_many", capture)
    overrides = gac_exact.parse_overrides(["lr=0.01", "minibatches=4"])
    assert overrides == {"lr": 0.01, "minibatches": 4}
    with pytest.raises(Stop):
        gac_exact.explore([0, 1], until=10, log_every=10, overrides=overrides)
    assert {c.recipe for c in seen} == {ag.exact_recipe()} and {c.delay for c in seen} == set(ag.levels())
    assert all(c.resolved().lr == 0.01 and c.resolved().minibatches == 4 for c in seen)
    import figures.budgets as fb

    b = dataclasses.replace(fb.FULL, async_log=10, async_exact_until=10)
    want = [dataclasses.replace(c, **overrides).run_id for d in ag.levels() for c in ag.cell(b, ag.exact_recipe(), d, (0, 1))]
    assert [c.run_id for c in seen] == want


def test_fingerprint_precondition_reads_lags_tolerances_and_version():
    """The registered fingerprint precondition on the committed regime fingerprint is met; moving one lag's clip
    fraction past the tolerance fails it, naming the lag; a fingerprint taken at another version fails by version."""
    import copy
    import json
    from pathlib import Path

    from figures import prereg
    from figures.experiments.async_grpo.judges import FINGERPRINT, fingerprint_match

    ph = prereg.load().section("phase")
    mine = json.loads(Path(FINGERPRINT).read_text())
    status, reading = fingerprint_match(mine)
    assert status == "met" and "lag 4" in reading
    moved = copy.deepcopy(mine)
    row = next(r for r in moved["staleness"] if r["lag"] == 4)
    row["clip_frac"] -= ph["clip_tol"] + 0.05
    status, reading = fingerprint_match(moved)
    assert status == "failed" and "lag 4" in reading
    late = copy.deepcopy(mine)
    late["extra"]["version"] = ph["fingerprint_version"] + 10
    status, reading = fingerprint_match(late)
    assert status == "failed" and f"version {ph['fingerprint_version'] + 10}" in reading


def test_fingerprint_only_measures_each_seed_with_the_overrides(tmp_path, monkeypatch):
    """``--fingerprint-only`` trains nothing but the fingerprint of each seed, at the registered version, with the
    overridden settings, and writes each seed's reading of the registered precondition."""
    import json
    from pathlib import Path

    from figures import gac_exact, prereg
    from figures.experiments.async_grpo.judges import FINGERPRINT
    from testbed import fingerprint as tf
    from testbed import runner

    committed = json.loads(Path(FINGERPRINT).read_text())
    calls = []

    class Fake:
        def to_dict(self):
            return committed

    def fake(regime, **kw):
        calls.append((regime, kw))
        return Fake()

    monkeypatch.setattr(tf, "fingerprint", fake)
    monkeypatch.setattr(runner, "run_many", lambda *a, **k: pytest.fail("no training run"))
    assert gac_exact.main(["--seeds", "0", "2", "--set", "lr=0.002", "--fingerprint-only", "--out", str(tmp_path)]) == 0
    ph = prereg.load().section("phase")
    assert [kw["seed"] for _, kw in calls] == [0, 2]
    assert all(r == "async_grpo" and kw["settings"] == {"lr": 0.002} and kw["steps"] == ph["fingerprint_steps"]
               and kw["at"] * kw["steps"] == ph["fingerprint_version"] for r, kw in calls)
    out = json.loads((tmp_path / "fingerprint.json").read_text())
    assert {s: f["status"] for s, f in out["fingerprint"].items()} == {"0": "met", "2": "met"}
    assert "met on 2 of 2 seeds" in (tmp_path / "fingerprint.md").read_text()
