"""`RunSpec` carries its run id, computed once by `RunConfig.parse`: the id of the config as written, of its
resolved form, and the one the runner and its checkpoints use."""

from __future__ import annotations

from dataclasses import replace

from testbed.config import RunConfig


def test_a_parsed_spec_carries_the_run_id_of_its_config():
    cfg = RunConfig(task="bandit", recipe="tis(c=2)", delay="fixed:2", steps=7, seed=3)
    spec = cfg.parse()
    assert spec.run_id == cfg.run_id == spec.config.run_id == cfg.resolved().run_id
    assert len(spec.run_id) == 12 and int(spec.run_id, 16) >= 0
    # the same run written with its defaults spelled out is the same run; another seed is another
    assert replace(cfg, batch_size=spec.config.batch_size, lr=spec.config.lr).parse().run_id == spec.run_id
    assert replace(cfg, seed=4).parse().run_id != spec.run_id
