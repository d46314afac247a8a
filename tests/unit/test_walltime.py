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


def test_the_gac_probe_is_priced_on_the_registered_base_at_every_level():
    reg = prereg.load()
    b = confirmatory_budget(reg)
    first, cap = walltime.probe_loops(b, False), walltime.probe_loops(b, True)
    runs = [c for loop in first for c in loop]
    n0, n_cap = reg.section("designs")["async"]["n0"], reg.section("designs")["async"]["cap"]
    assert len(runs) == 3 * n0 and sum(map(len, cap)) == 3 * n_cap
    assert {c.recipe for c in runs} == {reg.section("gac")["exact_recipe"]}
    assert {c.delay for c in runs} == {"sync", "bounded:8,4", "bounded:32,4"}
    assert all(c.seed in reg.block() for loop in cap for c in loop) and max(map(len, cap)) <= 8
    assert b.async_exact_until == reg.section("gac")["exact_until"]


@pytest.mark.slow  # builds the whole confirmatory plan twice (about 10 s)
def test_prediction_prices_every_loop_from_its_shape(monkeypatch):
    clock = [0.0]
    per_unit = 1e-6  # seconds per unit of cost_estimate

    def fake_run_many(cfgs):
        clock[0] += 0.5 + per_unit * sum(cost_estimate(c) for c in cfgs)  # 0.5 s setup per loop

    monkeypatch.setattr(walltime, "run_many", fake_run_many)
    monkeypatch.setattr(walltime.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(walltime.time, "process_time", lambda: clock[0])
    monkeypatch.setattr(walltime, "probe_seconds", lambda b, steps: (0.25, 0.001, 8))
    res = walltime.predict(1, 10, progress=False)
    b = confirmatory_budget(prereg.load())
    loops = walltime._loops(walltime.confirmatory_runs(b, False), 1)
    exact = sum(0.5 + per_unit * sum(cost_estimate(c) for c in loop) for loop in loops)
    # the GAC probe: its loops on the one worker after the runs', priced per batch measured and per run
    exact += sum(0.25 + 0.001 * b.async_exact_until * len(x) / 8 for x in walltime.probe_loops(b, False))
    assert res["first_look"]["runs"] == sum(len(x) for x in loops)
    assert res["first_look"]["wall_s"] == pytest.approx(exact, rel=1e-6)
    assert res["cap"]["wall_s"] > res["first_look"]["wall_s"]
    assert res["sampling_cpu_share"] == pytest.approx(1.0)
