"""Batched seeds (testbed/batched.py) reproduce the one-by-one runs bit for bit.

Tolerance: none. Every logged number, the status and the final parameters of every slot are
compared with ``==`` (``DataFrame.equals`` / ``torch.equal``) against `testbed.runner.run` of the same
config alone, on the same machine.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from testbed.batched import BatchedRunner, StackedOptimizer, exact_batching, group_configs, run_batched
from testbed.runner import RunConfig, Runner

pytestmark = pytest.mark.integration


def _alone(cfg: RunConfig) -> tuple[Runner, object]:
    runner = Runner(cfg)
    return runner, runner.run()


def _assert_identical(configs: list[RunConfig]) -> tuple[list, BatchedRunner]:
    batched = BatchedRunner(configs)
    results = batched.run()
    for cfg, res, slot in zip(configs, results, batched.runners, strict=True):
        runner, ref = _alone(cfg)
        assert res.status == ref.status, cfg
        a, b = pd.DataFrame(ref.rows), pd.DataFrame(res.rows)
        assert list(a.columns) == list(b.columns)
        assert a.equals(b), f"{cfg.recipe} seed {cfg.seed}:\n{a.compare(b) if a.shape == b.shape else (a, b)}"
        if res.status == "ok":
            for name, value in runner.params.items():
                assert torch.equal(value.detach(), slot.params[name].detach()), name
    return results, batched


def test_mnist_seeds_recipes_and_delays_identical_to_one_by_one():
    # pg/dg share lr scale 1; gac keeps per-slot state and skips (lr scale 0); ess_lr scales each slot's lr
    # differently; vcpo needs per-sample score norms; the delays differ per slot.
    base = {"task": "mnist", "steps": 24, "log_every": 8, "batch_size": 50}
    configs = [
        RunConfig(**base, seed=0),
        RunConfig(**base, seed=1),
        RunConfig(**base, seed=2, recipe="dg", delay="fixed:3"),
        RunConfig(**base, seed=3, recipe="gac(t_low=0.0, t_high=0.3)", delay="uniform:4"),
        RunConfig(**base, seed=4, recipe="vcpo", delay="geometric:0.5,4", lr=3e-3),
    ]
    results, batched = _assert_identical(configs)
    assert len(results[0].rows) == 3
    # the paths that make slots differ were taken: gac skipped steps, ess_lr shrank vcpo's lr
    assert batched.optimizer.steps[3] < 24 == batched.optimizer.steps[0]
    assert min(r["lr_scale"] for r in results[4].rows) < 1.0


def test_token_reversal_with_mixed_versions_and_sgd_identical():
    pytest.importorskip("testbed.tasks.token_reversal")
    base = {"task": "token_reversal", "steps": 6, "log_every": 3, "batch_size": 16, "optimizer": "sgd", "lr": 0.5,
            "task_args": {"H": 4, "n_eval": 16}}
    configs = [
        RunConfig(**base, seed=0, delay="fixed:2+mixed:0.5"),
        RunConfig(**base, seed=1, recipe="cispo", frictions="bug(frac=0.5, kind=temperature)"),
        RunConfig(**base, seed=2, recipe="gspo+ess_lr", delay="uniform:2"),
    ]
    _assert_identical(configs)


def test_a_diverging_slot_is_recorded_and_dropped_while_the_others_go_on():
    base = {"task": "mnist", "steps": 12, "log_every": 4, "batch_size": 20, "optimizer": "sgd"}
    configs = [RunConfig(**base, seed=0, lr=0.05), RunConfig(**base, seed=1, lr=1e38), RunConfig(**base, seed=2, lr=0.05)]
    results, _ = _assert_identical(configs)
    assert [r.status for r in results] == ["ok", "diverged", "ok"]
    assert "diverged_at" in results[1].rows[-1]


def test_stacked_optimizer_matches_torch_per_slot():
    gen = torch.Generator().manual_seed(0)
    shapes = [(3,), (5, 7), (13,)]  # odd sizes: vectorised bodies and scalar tails
    n_slots = 4
    stacked = [torch.randn((n_slots, *s), generator=gen) for s in shapes]
    alone = [[p[i].clone() for p in stacked] for i in range(n_slots)]
    opt = StackedOptimizer(stacked, "adam", [1e-3, 1e-3, 2e-3, 1e-3])
    torch_opts = [torch.optim.Adam(alone[i], lr=lr, foreach=True) for i, lr in enumerate(opt.lrs)]
    for step in range(6):
        scales = [1.0, 0.0 if step % 3 == 1 else 1.0, 0.37 * (step + 1), 1.0]
        for j, p in enumerate(stacked):
            p.grad = torch.randn(p.shape, generator=gen) * 10.0 ** (step - 3)
            for i in range(n_slots):
                alone[i][j].grad = p.grad[i].clone()
        opt.step(scales)
        for i, o in enumerate(torch_opts):
            if scales[i] == 0.0:
                continue
            lr = o.param_groups[0]["lr"]
            o.param_groups[0]["lr"] = lr * scales[i] if scales[i] != 1.0 else lr
            o.step()
            o.param_groups[0]["lr"] = lr
    for i in range(n_slots):
        for j in range(len(shapes)):
            assert torch.equal(stacked[j][i], alone[i][j]), (i, j)
    assert opt.steps == [6, 4, 6, 6]


@pytest.mark.parametrize("shape", [(6, 256), (4, 3, 256)])
def test_exact_linear_rule_rounds_like_the_unbatched_call(shape):
    # 2-D and contiguous inputs (every linear layer of the tasks' models); K = 256 is a size where
    # vmap's own rule (bmm, then add) does round differently from addmm
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((5, *shape), generator=gen)
    w = torch.randn((5, 33, 256), generator=gen, requires_grad=True)
    b = torch.randn((5, 33), generator=gen, requires_grad=True)
    with exact_batching():
        out = vmap(F.linear)(x, w, b)
    g = torch.randn(out.shape, generator=gen)
    (out * g).sum().backward()
    for s in range(5):
        ws, bs = w[s].detach().requires_grad_(), b[s].detach().requires_grad_()
        ref = F.linear(x[s], ws, bs)
        (ref * g[s]).sum().backward()
        assert torch.equal(out[s], ref)
        assert torch.equal(w.grad[s], ws.grad) and torch.equal(b.grad[s], bs.grad)


def test_group_configs_and_shared_field_errors():
    a = [RunConfig(task="mnist", steps=5, seed=s) for s in range(5)]
    b = [RunConfig(task="mnist", steps=5, seed=s, batch_size=20, recipe="dg") for s in range(2)]
    groups = group_configs(a + b, max_size=3)
    assert [[c.seed for c in g] for g in groups] == [[0, 1, 2], [3, 4], [0, 1]]
    assert all(c.batch_size == 20 for c in groups[2])
    with pytest.raises(ValueError, match="batch_size"):
        run_batched([a[0], b[0]])
    with pytest.raises(ValueError, match="batch size must be an integer >= 1"):
        group_configs(a, max_size=0)


def test_sweep_with_batch_seeds_writes_the_same_results_table(tmp_path):
    from testbed.sweep import run_sweep, sweep_file

    configs = [RunConfig(task="mnist", steps=6, log_every=3, batch_size=20, seed=s, recipe=r)
               for s in range(2) for r in ("pg", "dg")]
    run_sweep(configs, tmp_path / "one", progress=False)
    run_sweep(configs, tmp_path / "batched", progress=False, batch_seeds=3)
    one, batched = ((tmp_path / d / "results.csv").read_bytes() for d in ("one", "batched"))
    assert one == batched and one.count(b"\n") == 1 + 2 * len(configs)
    bad = tmp_path / "bad.toml"
    bad.write_text('batch_seeds = "yes"\n[base]\ntask = "mnist"\nsteps = 2\n[grid]\nseed = [0, 1]\n')
    with pytest.raises(ValueError, match="batch_seeds must be true, false or an integer >= 1"):
        sweep_file(bad, out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_cli_batch_seeds_flag(tmp_path, capsys):
    from testbed.cli import main

    common = ["run", "--task", "mnist", "--steps", "4", "--log-every", "2", "--batch-size", "20", "--seeds", "3",
              "--no-progress"]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--batch-seeds", "2", "--out", str(tmp_path / "batched")]) == 0
    assert (tmp_path / "one" / "results.csv").read_bytes() == (tmp_path / "batched" / "results.csv").read_bytes()
    assert main([*common, "--batch-seeds", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "--batch-seeds must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
