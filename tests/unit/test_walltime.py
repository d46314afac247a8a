"""The confirmatory wall-time prediction (figures/walltime.py): its plan is the registered design's runs, and a
loop is priced from its shape's timed samples (training replaced by a clock that charges per step)."""

from __future__ import annotations

import pytest

from figures import prereg, walltime
from figures.budgets import confirmatory_budget
from figures.common import cost_estimate


def test_plan_is_the_registered_runs_on_the_block():
    b = confirmatory_budget(prereg.load())
    first, cap = walltime.confirmatory_runs(b, False), walltime.confirmatory_runs(b, True)
    assert set(c.run_id for c in first) < set(c.run_id for c in cap)
    block = prereg.load().block()
    assert all(c.seed in block for c in cap)
    hs = sorted({int(c.resolved().task_args.get("H", 0)) for c in cap if c.task == "token_reversal"})
    assert set(range(2, 19)) <= set(hs)


@pytest.mark.slow  # builds the whole confirmatory plan twice (about 10 s)
def test_prediction_prices_every_loop_from_its_shape(monkeypatch):
    clock = [0.0]
    per_unit = 1e-6  # seconds per unit of cost_estimate

    def fake_run_many(cfgs):
        clock[0] += 0.5 + per_unit * sum(cost_estimate(c) for c in cfgs)  # 0.5 s setup per loop

    monkeypatch.setattr(walltime, "run_many", fake_run_many)
    monkeypatch.setattr(walltime.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(walltime.time, "process_time", lambda: clock[0])
    res = walltime.predict(1, 10, progress=False)
    b = confirmatory_budget(prereg.load())
    loops = walltime._loops(walltime.confirmatory_runs(b, False), 1)
    exact = sum(0.5 + per_unit * sum(cost_estimate(c) for c in loop) for loop in loops)
    assert res["first_look"]["runs"] == sum(len(x) for x in loops)
    assert res["first_look"]["wall_s"] == pytest.approx(exact, rel=1e-6)
    assert res["cap"]["wall_s"] > res["first_look"]["wall_s"]
    assert res["sampling_cpu_share"] == pytest.approx(1.0)
