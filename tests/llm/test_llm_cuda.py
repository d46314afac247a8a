"""The trainer and the statistics it logs on a CUDA device: the same values as on the CPU, runs that finish.

Skipped where no GPU is visible (CI); on a GPU machine: ``pytest -m cuda``."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from llm_scale.trainer import Trainer
from testbed.stabilizers import fingerprint as fp

from .conftest import tiny_config

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_batch_statistics_on_the_gpu_equal_the_cpus():
    """zero_advantage_frac, staleness_stats and minibatch_cosines build their helper tensors on their input's device."""
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(32, generator=g) > 0.5).float()
    rewards[:8] = 1.0  # two groups of four with equal rewards
    groups = torch.arange(32) // 4
    logp, blogp = -torch.rand(32, 12, generator=g), -torch.rand(32, 12, generator=g)
    mask = torch.rand(32, 12, generator=g) > 0.2
    x = torch.randn(8, 16, generator=g)
    gram = x @ x.T
    cpu = (fp.zero_advantage_frac(rewards, groups), fp.staleness_stats(logp, blogp, mask, lag=1),
           fp.minibatch_cosines(gram, 4, [8], seed=0)[0].mean)  # fmt: skip
    dev = (fp.zero_advantage_frac(rewards.cuda(), groups.cuda()), fp.staleness_stats(logp.cuda(), blogp.cuda(), mask.cuda(), lag=1),
           fp.minibatch_cosines(gram.cuda(), 4, [8], seed=0)[0].mean)  # fmt: skip
    assert cpu[0] == dev[0] >= 2 / 8
    for a, b in zip(vars(cpu[1]).values(), vars(dev[1]).values(), strict=True):
        assert a == pytest.approx(b, rel=1e-9, abs=1e-12) or (math.isnan(a) and math.isnan(b))
    assert cpu[2] == pytest.approx(dev[2], rel=1e-9)


@pytest.mark.parametrize("recipe", ["grpo", "gac", "decoupled_ppo"])
def test_a_stale_run_on_the_gpu_finishes_with_finite_metrics(tmp_path, recipe):
    """Thread mode at a fixed lag of 2, two minibatches: every update's loss, gradient norm and ESS are finite."""
    cfg = tiny_config(tmp_path, recipe=recipe, device="cuda", max_staleness=2, lag_policy="fixed", minibatches=2,
                      steps=4, task="arithmetic", eval_every=2)  # fmt: skip
    summary = Trainer(cfg).run()
    rows = pd.read_csv(cfg.out + "/metrics.csv")
    assert summary["status"] == "finished" and summary["device"].startswith("cuda")
    assert len(rows) == 4 and rows[["loss", "grad_norm_raw", "staleness_ess", "zero_adv_frac"]].notna().all().all()
