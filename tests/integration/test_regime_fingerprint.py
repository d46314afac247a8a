"""The testbed's fingerprint (testbed/fingerprint.py) computes its numbers with the shared functions of
testbed/stabilizers/fingerprint.py, on the same tensors as a direct computation, so a regime and a real model
(llm_scale) are compared number for number."""

from __future__ import annotations

import json
import math

import pytest
import torch

from testbed import diagnostics as diag
from testbed import fingerprint as fpm
from testbed.stabilizers import build
from testbed.stabilizers import fingerprint as shared
from testbed.stabilizers.numerics import sequence_log_ratio
from testbed.tasks import make_task

pytestmark = pytest.mark.integration


def _setup(n: int = 8, g: int = 4):
    task = make_task("mnist")
    policy = task.make_policy([torch.Generator().manual_seed(3)])
    params = {k: v.detach()[0].clone() for k, v in policy.named_parameters()}
    gen = torch.Generator().manual_seed(5)
    contexts = task.sample_contexts(n, gen, "train")
    view, _ = fpm._view(policy, params, n)
    actions = fpm.sample_groups(task, view, contexts, g, gen)
    return task, policy, params, contexts, actions


def test_group_gradients_equal_each_groups_own_gradient_and_minibatch_cosines_match_direct_ones():
    """The n-slot backward gives, bit for bit up to float rounding, the gradient each group gives alone; and the
    shared Gram-matrix cosine of two minibatches of whole groups equals the cosine of the two minibatch gradients
    computed directly (token-mean over each minibatch's samples)."""
    task, policy, params, contexts, actions = _setup()
    recipe = build("grpo")
    out = fpm.group_gradients(task, policy, params, recipe, contexts, actions)
    n = actions.shape[0]
    assert out["grads"].shape[0] == n
    for i in range(n):
        one = fpm.group_gradients(task, policy, params, recipe, contexts[i : i + 1], actions[i : i + 1])
        assert torch.allclose(out["grads"][i], one["grads"][0], atol=1e-7, rtol=1e-5)
    # a minibatch of groups {0, 1} vs {2, 3}: the gradient of the token-mean loss over its 2G samples is the
    # mean of its groups' gradients, so the Gram cosine equals the direct one
    gram = shared.gram_matrix(out["grads"])
    a, b = out["grads"][:2].mean(0), out["grads"][2:4].mean(0)
    k = gram.double()
    via_gram = float(k[:2, 2:4].sum() / math.sqrt(float(k[:2, :2].sum()) * float(k[2:4, 2:4].sum())))
    assert a.norm() > 0 and b.norm() > 0  # (this seed's groups are rewarded: the cosine is defined)
    assert via_gram == pytest.approx(diag.cosine(a, b), abs=1e-6)
    assert via_gram == pytest.approx(shared.cosine(a, b), abs=1e-7)  # float32 means vs the float64 Gram


def test_the_runner_ess_is_the_shared_staleness_ess_on_the_same_tensors():
    """The ESS the runner logs (testbed/diagnostics.py) and the fingerprint's ess_seq (shared function, also
    llm_scale's) are the same number on the same log-probs."""
    gen = torch.Generator().manual_seed(0)
    logp = -torch.rand(64, 3, generator=gen) * 2
    blogp = logp + 0.3 * torch.randn(64, 3, generator=gen)
    mask = torch.ones_like(logp, dtype=torch.bool)
    stats = shared.staleness_stats(logp, blogp, mask, lag=4)
    runner_ess = diag.ratio_stats(logp - blogp, sequence_log_ratio(logp, blogp, mask))["ess"]
    assert runner_ess == pytest.approx(stats.ess_seq, rel=1e-5)
    lr = (logp - blogp).flatten()
    assert stats.logratio_max == pytest.approx(float(lr.max()), rel=1e-6)


def test_fingerprint_command_writes_the_shared_schema(tmp_path):
    from testbed.cli import main

    rc = main(["fingerprint", "--regime", "async_grpo", "--steps", "20", "--groups", "16", "--lags", "1,4",
               "--out", str(tmp_path), "--real", str(tmp_path / "none")])
    assert rc == 0
    text = (tmp_path / "async_grpo.json").read_text()
    fp = shared.Fingerprint.from_json(text)  # the shared schema's reader accepts it
    assert [s.lag for s in fp.staleness] == [1, 4]
    assert [c.m for c in fp.cosine_by_minibatch] == [10, 20, 40, 80]  # G = 10, up to half the 16 groups
    assert all(0 < s.ess_seq <= 1 for s in fp.staleness)
    assert 0 <= fp.zero_advantage_frac <= 1 and 0 < fp.entropy <= math.log(10)
    assert json.loads(text)["truncated_frac"] is None  # fixed-length episodes: undefined, not 0
    assert (tmp_path / "async_grpo.png").stat().st_size > 0
