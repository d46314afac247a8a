"""One loop for S >= 1 runs: a run trained with others is the same run, bit for bit, as trained alone.

Tolerance: none. Every logged number, every per-step record, the status and the final parameters of every run
are compared with ``==`` (``DataFrame.equals`` / ``torch.equal``) against the same config trained alone.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from testbed.config import RunConfig
from testbed.runner import Runner
from testbed.sweep import group_runs

pytestmark = pytest.mark.integration


def assert_alone_equals_together(configs: list[RunConfig]) -> tuple[list, Runner]:
    together = Runner(configs)
    results = together.run()
    for i, (cfg, res) in enumerate(zip(configs, results, strict=True)):
        alone = Runner([cfg])
        (ref,) = alone.run()
        assert res.status == ref.status, cfg
        a, b = pd.DataFrame(ref.rows), pd.DataFrame(res.rows)
        assert list(a.columns) == list(b.columns)
        assert a.equals(b), f"{cfg.recipe} seed {cfg.seed}:\n{a.compare(b) if a.shape == b.shape else (a, b)}"
        # the per-optimizer-step records, computed for every run of a loop at once
        assert pd.DataFrame(ref.steps).equals(pd.DataFrame(res.steps)), f"{cfg.recipe} seed {cfg.seed}: step records"
        if res.status == "ok":
            for name, value in alone.params(0).items():
                assert torch.equal(value, together.params(i)[name]), name
    return results, together


def test_mnist_seeds_recipes_delays_and_lrs_identical_alone_and_together():
    # pg/dg share lr scale 1; gac keeps per-run state and skips steps (lr scale 0); ess_lr scales each run's lr
    # differently; vcpo needs per-sample score norms; tis truncates; delays, learning rates, optimizers differ.
    base = {"task": "mnist", "steps": 24, "log_every": 8, "batch_size": 50}
    configs = [
        RunConfig(**base, seed=0),
        RunConfig(**base, seed=1, recipe="dg"),
        RunConfig(**base, seed=2, recipe="tis(c=2)", delay="fixed:3"),
        RunConfig(**base, seed=3, recipe="gac(t_low=0.0, t_high=0.3)", delay="uniform:4"),
        RunConfig(**base, seed=4, recipe="vcpo", delay="fixed:3", lr=3e-3),
        RunConfig(**base, seed=6, recipe="is", delay="geometric:0.5,4"),
        RunConfig(**base, seed=5, recipe="ppo", optimizer="sgd", lr=0.1, frictions="bug(frac=0.3, kind=random)"),
    ]
    results, _ = assert_alone_equals_together(configs)
    assert len(results[0].rows) == 3
    # the paths that make runs differ were taken: gac skipped steps, ess_lr shrank vcpo's lr
    assert min(r["skipped"] for r in results[3].rows) == 0.0 and max(r["lr_scale"] for r in results[3].rows) == 1.0
    assert any(r["skipped"] == 1.0 for r in results[3].rows) or any(r["projected"] == 1.0 for r in results[3].rows)
    assert min(r["lr_scale"] for r in results[4].rows) < 1.0


def test_token_reversal_mixed_versions_and_actor_bugs_identical_alone_and_together():
    base = {"task": "token_reversal", "steps": 6, "log_every": 3, "batch_size": 16, "n_actors": 4,
            "task_args": {"H": 4, "n_eval": 16}}
    configs = [
        RunConfig(**base, seed=0, delay="fixed:2+mixed:0.5"),
        RunConfig(**base, seed=1, recipe="cispo", frictions="bug(frac=0.5, kind=temperature)"),
        RunConfig(**base, seed=2, recipe="gspo+ess_lr", delay="uniform:2"),
        RunConfig(**base, seed=3, frictions="bug(frac=0.5, kind=perturb)+mismatch(sigma=0.3)", optimizer="sgd", lr=0.5),
        RunConfig(**base, seed=4, recipe="dg", frictions="bug(frac=0.5, kind=random)+reward(p=0.2)"),
    ]
    assert_alone_equals_together(configs)


def test_epochs_and_minibatches_identical_alone_and_together():
    base = {"task": "mnist", "steps": 10, "log_every": 5, "batch_size": 40, "epochs": 2, "minibatches": 4}
    # minibatches of whole groups (each group's logits computed once) and of random rows, a loop each
    whole = [RunConfig(**base, seed=1, recipe="decoupled_ppo", delay="bounded:3,2", group_size=5),
             RunConfig(**base, seed=3, recipe="grpo", group_size=5),
             RunConfig(**base, seed=4, recipe="gac", delay="fixed:2", group_size=5)]
    rows = [RunConfig(**base, seed=0, recipe="ppo", delay="fixed:2", group_size=4, minibatch_split="random"),
            RunConfig(**base, seed=2, recipe="gac", group_size=4, minibatch_split="random")]
    assert_alone_equals_together(whole)
    assert_alone_equals_together(rows)


def test_a_diverging_run_is_recorded_and_leaves_while_the_others_go_on():
    base = {"task": "mnist", "steps": 12, "log_every": 4, "batch_size": 20, "optimizer": "sgd"}
    configs = [RunConfig(**base, seed=0, lr=0.05), RunConfig(**base, seed=1, lr=1e38), RunConfig(**base, seed=2, lr=0.05)]
    results, together = assert_alone_equals_together(configs)
    assert [r.status for r in results] == ["ok", "diverged", "ok"]
    assert "diverged_at" in results[1].rows[-1] and together.active == [0, 2]


def test_runs_that_do_not_share_a_model_shape_are_refused_and_grouped_apart():
    a = [RunConfig(task="mnist", steps=5, seed=s) for s in range(5)]
    b = [RunConfig(task="mnist", steps=5, seed=s, batch_size=20, recipe="dg") for s in range(2)]
    groups = group_runs(a + b, 3)
    assert [[c.seed for c in g] for g in groups] == [[0, 1, 2], [3, 4], [0, 1]]
    assert all(c.batch_size == 20 for c in groups[2])
    with pytest.raises(ValueError, match="batch_size"):
        Runner([a[0], b[0]])
    with pytest.raises(ValueError, match="twice"):
        Runner([a[0], a[0]])


def test_loops_of_one_shape_are_balanced_over_the_workers():
    a = [RunConfig(task="mnist", steps=5, seed=s) for s in range(72)]
    b = [RunConfig(task="mnist", steps=5, seed=s, batch_size=20) for s in range(3)]
    sizes = [len(g) for g in group_runs(a, 8, workers=2)]
    assert sizes == [8, 8] + [7] * 8  # 10 loops (a multiple of 2 workers), not 9 loops of 8: 36 runs a worker
    assert [len(g) for g in group_runs(a, 8)] == [8] * 9  # one worker: as few loops as fit
    mixed = group_runs(a[:17] + b, 8, workers=2)  # 17 runs: 3 loops rounded up to 4; 3 runs: one loop, kept whole
    assert [len(g) for g in mixed] == [5, 4, 4, 4, 3]
    assert [c.seed for g in mixed[:4] for c in g] == list(range(17))  # order kept, loops by their first config
    assert [len(g) for g in group_runs(a[:3], 1, workers=2)] == [1, 1, 1]  # at most loop_size, never above


def test_a_sweep_writes_the_same_results_whatever_its_loop_size(tmp_path):
    from testbed.sweep import run_sweep, sweep_file

    configs = [RunConfig(task="mnist", steps=6, log_every=3, batch_size=20, seed=s, recipe=r)
               for s in range(2) for r in ("pg", "dg")]
    run_sweep(configs, tmp_path / "one", progress=False, loop_size=1)
    run_sweep(configs, tmp_path / "three", progress=False, loop_size=3)
    one, three = ((tmp_path / d / "results.csv").read_bytes() for d in ("one", "three"))
    assert one == three and one.count(b"\n") == 1 + 2 * len(configs)
    bad = tmp_path / "bad.toml"
    bad.write_text('loop_size = "yes"\n[base]\ntask = "mnist"\nsteps = 2\n[grid]\nseed = [0, 1]\n')
    with pytest.raises(ValueError, match="loop_size must be an integer >= 1"):
        sweep_file(bad, out=tmp_path / "never")
    assert not (tmp_path / "never").exists()


def test_cli_loop_size_flag(tmp_path, capsys):
    from testbed.cli import main

    common = ["run", "--task", "mnist", "--steps", "4", "--log-every", "2", "--batch-size", "20", "--seeds", "3",
              "--no-progress"]
    assert main([*common, "--loop-size", "1", "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--loop-size", "2", "--out", str(tmp_path / "two")]) == 0
    assert (tmp_path / "one" / "results.csv").read_bytes() == (tmp_path / "two" / "results.csv").read_bytes()
    assert main([*common, "--loop-size", "0", "--out", str(tmp_path / "bad")]) == 2
    assert "--loop-size must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
