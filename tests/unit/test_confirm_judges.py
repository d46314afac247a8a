"""GAC-2 and AREAL-1 under the pre-registered design (figures/experiments/async_grpo/judges.py): learning-phase
endpoints chosen from the base, plain means and collapses, the margin from the testbed's resolution; and the
health flag that sees a high-error seed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from figures import confirm, prereg
from figures.experiments import async_grpo as ag
from figures.experiments.async_grpo import judges as ag_judges
from figures.experiments.async_grpo.judges import (
    judge_areal1,
    judge_gac1,
    judge_gac2,
    learning_phase,
    phase_margin,
    predicted_at,
    stale_aligned,
    uncapped,
)
from figures.experiments.async_grpo.settings import RECIPES
from figures.records import assess, unhealthy_flags

N = 10
V = np.arange(0, 201, 10.0)
LEVELS = ["sync", "bounded:32,4"]


def _curve(level: float, seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(0.8 * np.exp(-V / 40.0) * (1 + 0.005 * rng.standard_normal(V.size)) + level)


def _evidence(grpo_collapses: int) -> ag.Evidence:
    curves = {}
    for r in RECIPES:
        for d in LEVELS:
            curves[(r, d)] = [_curve(0.1, 100 * i + RECIPES.index(r)) for i in range(N)]
    for i in range(grpo_collapses):  # these stale grpo seeds stay near chance through the learning phase
        curves[("grpo", LEVELS[1])][i] = list(np.full(V.size, 0.85))
    error = {k: [c[-1] for c in v] for k, v in curves.items()}
    health = {k: {"health": ["healthy"] * N, "diverged": [False] * N} for k in curves}
    return ag.Evidence(grid="test", seeds=list(range(10000, 10000 + N)), levels=LEVELS, floor=0.0005, error=error,
                       health=health, versions=list(V), curves=curves, confirmatory=True)


def test_learning_window_and_endpoints_read_the_base_only():
    ev = _evidence(6)
    window, end = learning_phase(ev)
    ph = prereg.load().section("phase")
    assert window == confirm.learning_window(V, np.array(ev.curves[("grpo", "sync")]), ph["progress_lo"], ph["progress_hi"])
    assert window == (20.0, 60.0)
    # the stale grpo cells do not move the window
    ev2 = _evidence(0)
    assert learning_phase(ev2)[0] == window
    assert end[("grpo", LEVELS[1])][0] == pytest.approx(0.85)


def test_areal1_naive_worse_by_its_collapses_and_decoupled_matches_sync():
    ev = _evidence(6)
    j = judge_areal1(ev)
    names = [p.name for p in j.parts]
    assert names == [f"naive grpo worse than decoupled_ppo at {LEVELS[1]}", f"decoupled_ppo at {LEVELS[1]} matches grpo sync"]
    assert [p.status for p in j.parts] == ["holds", "holds"] and j.verdict == "reproduced"
    assert all(p.interval.estimator == "mean" for p in j.parts)  # plain means: no seed trimmed
    caused = [p for p in j.other_parts if "staleness-caused" in p.name]
    assert caused[0].extra["candidate_collapses"] == 6 and caused[0].extra["mcnemar_p"] == pytest.approx(0.5 ** 6)
    assert any(p.name.startswith("secondary, final error") for p in j.other_parts)
    assert "learning phase: versions 20 to 60" in j.note and "tol factor" in j.note


def test_gac2_not_judged_where_grpo_does_not_degrade():
    j = judge_gac2(_evidence(0))
    assert j.parts == [] and j.verdict == "inconclusive"
    assert any(p.name == f"grpo degrades at {LEVELS[1]}" and p.status in ("fails", "direction") for p in j.other_parts)
    j = judge_gac2(_evidence(6))
    assert [p.status for p in j.parts] == ["holds", "holds"] and j.verdict == "reproduced"


def test_margin_is_computed_from_the_base():
    ev = _evidence(6)
    _, end = learning_phase(ev)
    m = phase_margin(ev, end[("grpo", "sync")])
    p = float(np.median(end[("grpo", "sync")]))
    assert m.value >= math.log1p(1.645 * math.sqrt(2 * p * (1 - p) / 1000) / p) - 1e-12
    assert "1000 examples" in m.derivation


def _fingerprints(tmp_path, monkeypatch, version: int):
    import json

    from tests.unit.test_confirm_design import SMOLLM2, TESTBED_V50

    fp, real = tmp_path / "async_grpo.json", tmp_path / "llm"
    real.mkdir()
    fp.write_text(json.dumps({"staleness": TESTBED_V50, "noise_scale": 6370.0, "extra": {"version": version}}))
    (real / "smollm2-135m-instruct__arithmetic.json").write_text(json.dumps(
        {"model": "smollm2-135m-instruct", "task": "arithmetic", "date": "x", "staleness": SMOLLM2}))
    monkeypatch.setattr(ag_judges, "FINGERPRINT", fp)
    monkeypatch.setattr(ag_judges, "REAL_FINGERPRINTS", real)


def test_claim_assessed_with_preconditions_under_the_design(tmp_path, monkeypatch):
    _fingerprints(tmp_path, monkeypatch, 50)
    ev = _evidence(6)
    claim = next(c for c in ag.CLAIMS if c.id == "AREAL-1")
    j = assess(claim, ev)
    assert [p["status"] for p in j.preconditions] == ["met", "met", "met"] and j.verdict == "reproduced"
    assert "lag 4: token ESS -0.018, clip -0.048" in j.preconditions[2]["measured"]


def test_fingerprint_at_another_version_makes_it_not_testable(tmp_path, monkeypatch):
    _fingerprints(tmp_path, monkeypatch, 500)
    claim = next(c for c in ag.CLAIMS if c.id == "GAC-2")
    j = assess(claim, _evidence(6))
    assert j.verdict == "not testable"
    fp = next(p for p in j.preconditions if "fingerprint" in p["name"])
    assert fp["status"] == "failed" and "--steps 1000 --at 0.05" in fp["measured"]


def test_high_error_seed_is_unhealthy():
    ev = _evidence(0)
    ev.error[("grpo", "sync")][3] = 0.375
    assert unhealthy_flags(ev, ("grpo", "sync"))[3] is False  # the lost-class flag alone passes it
    assert unhealthy_flags(ev, ("grpo", "sync"), 0.25)[3] is True
    assert sum(unhealthy_flags(ev, ("grpo", "sync"), 0.25)) == 1
    ev.error[("grpo", "sync")] = np.array(ev.error[("grpo", "sync")])  # as the evidence holds it while being made
    assert unhealthy_flags(ev, ("grpo", "sync"), 0.25)[3] is True


def test_ddg3_registered_per_seed_exact_on_the_unit_grid():
    from figures.experiments import token_horizon as th
    from figures.experiments.token_horizon.judges import judge_ddg3

    hs = list(range(2, 19))
    longest = {"dg": [13.0] * 6, "pmpo": [8.0] * 6, "ppo": [5.0] * 6, "pg": [3.0] * 6}
    ev = th.Evidence(grid="t", seeds=list(range(10000, 10006)), H=hs, longest=longest, confirmatory=True)
    j = judge_ddg3(ev)
    assert [p.status for p in j.parts] == ["holds"] * 3 and j.verdict == "reproduced"
    assert j.parts[0].extra["fisher_p"] is None or math.isnan(j.parts[0].extra["fisher_p"])
    assert j.parts[0].interval.lo == pytest.approx(0.05 ** (1 / 6), abs=1e-6)  # 6 of 6 seeds, exact
    ev.longest["dg"] = [17.0] * 6  # 17 + 2 is off the grid: the rule has no room
    j = judge_ddg3(ev)
    assert j.verdict == "inconclusive" and "needs 19" in j.settled
    ev.H = list(range(2, 17, 2))  # the even grid is refused as well
    ev.longest["dg"] = [12.0] * 6
    assert judge_ddg3(ev).verdict == "inconclusive"


def test_ddg2_registered_solved_seeds_and_floor_precondition():
    from figures.experiments import token_frictions as tf
    from figures.experiments.token_frictions.judges import judge_ddg2

    n = 6
    err = {("dg", "all four"): [0.002] * n, ("pg", "all four"): [0.6] * n, ("pmpo", "all four"): [0.3] * n,
           ("ppo", "all four"): [0.2] * n}
    ev = tf.Evidence(grid="t", seeds=list(range(10000, 10000 + n)), settings=["all four"], H=10, floor=2.5e-4,
                     error=err, confirmatory=True)
    j = judge_ddg2(ev)
    assert [p.name for p in j.parts] == [f"DG solves more seeds than {o} (error <= 0.1)" for o in ("PG", "PMPO", "PPO")]
    assert all(p.status == "holds" and p.extra["fisher_p"] == pytest.approx(1 / 924) for p in j.parts)
    claim = tf.CLAIMS[0]
    pre = {p["name"]: p for p in assess(claim, ev).preconditions}
    floor = pre["the baselines are not at the floor (within a stated factor of the paper's levels)"]
    assert floor["status"] == "met"
    ev.error = {**err, ("pmpo", "all four"): [0.96] * n, ("ppo", "all four"): [0.97] * n}  # "DG learns" vs "nothing learns"
    j = assess(claim, ev)
    assert j.verdict == "not testable"
    assert "pmpo median 0.960 vs limit 0.450" in j.note
    ev.confirmatory = False  # the exploratory design does not ask it
    assert {p["name"]: p["status"] for p in assess(claim, ev).preconditions}[floor["name"]] == "met"


def test_vcpo1_local_spike_rule_in_the_precursors():
    import pandas as pd

    from figures.confirm import SpikeReference
    from figures.experiments.mnist_delay.evidence import precursors

    rng = np.random.default_rng(3)
    n = 1000
    gn = np.exp(np.linspace(0, math.log(6), n)) * rng.lognormal(0, 0.1, n)  # a quiet run whose norm drifts up
    steps = pd.DataFrame({"step": np.arange(1, n + 1, dtype=float), "ess": np.ones(n), "grad_norm": gn})
    drift = precursors(steps, float(n), 300.0, grad_spike=2.0)
    local = precursors(steps, float(n), 300.0, grad_spike=2.0, spike=SpikeReference("local", 20))
    assert drift["grad_spike"] and not local["grad_spike"]
    steps.loc[900, "grad_norm"] *= 5  # a real spike inside the window
    assert precursors(steps, float(n), 300.0, grad_spike=2.0, spike=SpikeReference("local", 20))["grad_spike"]


def test_vcpo1_counts_only_staleness_caused_collapses_and_states_its_false_alarms():
    from figures.experiments import mnist_delay as md
    from figures.experiments.mnist_delay.evidence import staleness_caused
    from figures.experiments.mnist_delay.judges import _calibrated

    found = [{"recipe": "pg", "delay": "sync", "seed": 1, "step": 5.0},
             {"recipe": "pg", "delay": "fixed:1000", "seed": 1, "step": 9.0},
             {"recipe": "pg", "delay": "fixed:1000", "seed": 2, "step": 9.0}]
    assert staleness_caused(found) == [found[2]]
    ev = md.Evidence(grid="t", seeds=[10000], spike={"window": 20, "factor": 2.5, "false_alarm": 0.025,
                                                      "target": 0.05, "quiet_runs": 40})
    status, text = _calibrated(ev)
    assert status == "met" and "2.5% false alarms at the ends of 40 quiet runs" in text
    ev.spike = {**ev.spike, "factor": float("nan"), "false_alarm": float("nan")}
    assert _calibrated(ev)[0] == "failed"
    assert _calibrated(md.Evidence(grid="t", seeds=[0]))[0] == "met"  # not asked outside the design


def test_vcpo1_registered_rule_reads_the_registrations_spike_reference():
    """The registered rule takes its reference and grid from the registration's [spike] section: on converging quiet
    runs the local reference finds no factor, the early one finds the grid's smallest; the precondition says which."""
    import pandas as pd

    from figures.confirm import SpikeReference
    from figures.experiments import mnist_delay as md
    from figures.experiments.mnist_delay.evidence import registered_rule
    from figures.experiments.mnist_delay.judges import _calibrated

    rng = np.random.default_rng(7)
    n, rows, records = 2000, [], {}
    for i in range(25):
        gn = rng.lognormal(0, 0.2, n)
        gn[n // 2:] = np.where(rng.random(n // 2) < 0.02, 0.5, 0.002)  # converged: mostly no signal
        records[f"r{i}"] = pd.DataFrame({"step": np.arange(1, n + 1, dtype=float), "grad_norm": gn, "ess": np.ones(n)})
        rows += [{"run_id": f"r{i}", "recipe": "pg", "delay": "sync", "seed": i, "step": float(t), "test_error": 0.1,
                  "status": "ok"} for t in range(100, n + 1, 100)]
    table = pd.DataFrame(rows)
    grid = {"factor_grid": [2.0, 8.0], "false_alarm": 0.05}
    rule, rec = registered_rule(table, records, 100, {"window": 20, **grid})
    assert rule.spike == SpikeReference("local", 20) and math.isnan(rec["factor"]) and rec["quiet_runs"] == 25
    rule, rec = registered_rule(table, records, 100, {"reference": "early", "early_steps": 500, **grid})
    assert rule.spike == SpikeReference("early", 500) and rule.grad_spike == 2.0 and rec["false_alarm"] == 0.0
    assert rule.label() == "spike_early 500"  # grad_spike 2 is the default
    status, text = _calibrated(md.Evidence(grid="t", seeds=[10200], spike=rec))
    assert status == "met" and text.startswith("early spike rule: above 2 x the median of the run's first 500 learner steps")


def test_gac1_is_not_testable_where_the_noise_caps_the_cosine(tmp_path, monkeypatch):
    fp = tmp_path / "async_grpo.json"
    monkeypatch.setattr(ag_judges, "FINGERPRINT", fp)
    ev = ag.Evidence(grid="t", seeds=[10000], regime={"batch_size": 400, "minibatches": 2})
    assert uncapped(ev)[0] == "unknown"  # no fingerprint: not checkable
    fp.write_text('{"noise_scale": 6370.0}')
    status, text = uncapped(ev)  # m = 200: r = 0.0314, cap 0.0305; r >= 1 needs ceil(6370 / 200) = 32 blocks
    assert status == "failed" and "r = 0.031, cap r / (1 + r) = 0.030" in text and "32 consecutive minibatches" in text
    fp.write_text('{"noise_scale": 150.0}')
    assert uncapped(ev)[0] == "met"
    claim = next(c for c in ag.CLAIMS if c.id == "GAC-1")
    assert "the cosine is read where the gradient noise does not cap it" in claim.preconditions[1].name


def test_vcpo2_and_vcpo3_read_the_learning_phase_with_their_registered_margins():
    from figures.experiments import mnist_delay as md
    from figures.experiments.mnist_delay.judges import judge_vcpo2, judge_vcpo3, phase_view
    from figures.experiments.mnist_delay.settings import ABLATIONS, RECIPES

    delays, abl = ["sync", "fixed:10", "fixed:100", "fixed:1000"], ["fixed:100", "fixed:1000"]
    curves = {(r, d): [_curve(0.1, 100 * i + j) for i in range(N)]
              for j, r in enumerate(RECIPES) for d in delays}
    for name in ABLATIONS:
        for d in abl:
            curves[name, d] = [list(np.array(_curve(0.1, 7 * i)) * (1.0 if name == "vcpo" else 1.5))
                                     for i in range(N)]
    curves.update({("vcpo", d): curves["vcpo", d] for d in abl})
    # pg learns late at the stale delays: only the learning phase shows it (the plateau is the same)
    for d in delays[1:]:
        curves["pg", d] = [list(0.8 * np.exp(-V / 120.0) + 0.1) for _ in range(N)]
    error = {k: [c[-1] for c in v] for k, v in curves.items()}
    health = {k: {"health": ["healthy"] * N, "diverged": [False] * N} for k in curves}
    ev = md.Evidence(grid="t", seeds=list(range(10000, 10000 + N)), delays=delays, ablation_delays=abl, floor=5e-4,
                     error=error, health=health, versions=list(V), curves=curves, confirmatory=True)
    j = judge_vcpo2(ev)
    assert "learning phase: versions 20 to 60 (pg at sync's 25%-75% of its error drop)" in j.note
    assert [p.status for p in j.parts] == ["holds", "holds", "holds"] and j.verdict == "reproduced"
    assert any(p.name.startswith("secondary, final error") for p in j.other_parts)
    view, _ = phase_view(ev)
    assert view.error["pg", "fixed:10"][0] > 1.5 * view.error["pg", "sync"][0]  # the late learner, seen in the window
    j3 = judge_vcpo3(ev)
    assert "margin factor 1.088" in j3.note and [p.status for p in j3.parts] == ["holds", "holds"]


def test_seed_curves_align_by_seed_and_fill_a_divergence_with_chance():
    import pandas as pd

    from figures.common import seed_curves
    from testbed.config import RunConfig

    cfgs = [RunConfig(task="mnist", recipe="pg", delay="sync", seed=s, steps=30, log_every=10) for s in (1, 2, 3)]
    rows = [{"run_id": cfgs[0].run_id, "step": t, "test_error": e, "status": "ok"}
            for t, e in ((10, 0.5), (20, 0.3), (30, 0.2))]
    rows += [{"run_id": cfgs[2].run_id, "step": 10, "test_error": 0.6, "status": "diverged"}]
    versions, ys = seed_curves(pd.DataFrame(rows), cfgs, [], 0.9)
    assert versions == [10.0, 20.0, 30.0]
    assert ys[0] == [0.5, 0.3, 0.2] and all(math.isnan(x) for x in ys[1]) and ys[2] == [0.6, 0.9, 0.9]


def test_dg1_reads_the_learning_phase_from_pg_at_one_sample():
    from figures.experiments import mnist_samples as ms

    level = {("pg", "1"): 0.3, ("dg", "1"): 0.12, ("pg", "inf"): 0.2, ("dg", "inf"): 0.1, ("ce",): 0.05}
    curves = {k: [_curve(v, 100 * i + j) for i in range(N)] for j, (k, v) in enumerate(level.items())}
    error = {k: [c[-1] for c in v] for k, v in curves.items()}
    health = {("pg", "1"): {"health": ["healthy"] * N, "diverged": [False] * N}}
    ev = ms.Evidence(grid="t", seeds=list(range(10000, 10000 + N)), k=[1], floor=5e-4, error=error, health=health,
                     versions=list(V), curves=curves, confirmatory=True)
    j = assess(ms.CLAIMS[0], ev)
    assert "learning phase: versions 20 to 60 (pg at 1's 25%-75% of its error drop)" in j.note
    assert [p["status"] for p in j.preconditions] == ["met", "met"]
    assert [p.status for p in j.parts] == ["holds", "holds"] and j.verdict == "reproduced"
    assert any(p.name.startswith("secondary, final error") for p in j.other_parts)


def _exact_evidence(cos: dict[str, list[float]], r: dict[str, list[float]] | None = None) -> ag.Evidence:
    rec = "grpo"
    r = r or {d: [0.25] * len(v) for d, v in cos.items()}
    return ag.Evidence(grid="t", seeds=list(range(10000, 10000 + len(cos["sync"]))), levels=list(cos),
                       exact_window=[30.0, 70.0], exact_until=200,
                       cos_exact={(rec, d): v for d, v in cos.items()},
                       r_minibatch={(rec, d): v for d, v in r.items()},
                       cos_minibatch={(rec, d): [0.2 * x for x in v] for d, v in cos.items()})


def test_gac1_reads_the_exact_cosine_and_its_rule_where_the_probe_measured():
    rng = np.random.default_rng(0)
    near_one = {d: list(0.97 + 0.005 * rng.standard_normal(N)) for d in LEVELS}
    j = judge_gac1(_exact_evidence(near_one))
    assert [p.name.split(":")[0] for p in j.parts] == ["exact gradients"] * 2
    assert [p.status for p in j.parts] == ["fails", "holds"]  # aligned at sync too: not near orthogonal
    assert uncapped(_exact_evidence(near_one))[0] == "met"
    assert "r = infinity" in uncapped(_exact_evidence(near_one))[1]
    orth = {"sync": list(0.01 * rng.standard_normal(N)), LEVELS[1]: list(0.6 + 0.02 * rng.standard_normal(N))}
    assert [p.status for p in judge_gac1(_exact_evidence(orth)).parts] == ["holds", "holds"]
    # beside the verdict: the learner's capped cosine, r per level and the prediction at the real model's r
    names = [p.name for p in j.other_parts]
    assert any(n.startswith("learner's minibatch cosine (capped)") for n in names)
    assert sum("predicted at the real model's r" in n for n in names) == len(LEVELS)


def test_prediction_at_the_real_models_r_scales_by_the_levels_noise():
    """cos x r_l / (1 + r_l), r_l = r x (r at the level / r at sync): exact numbers."""
    got = predicted_at([0.9, float("nan")], [0.5, 0.5], [0.25, 0.25], 0.04)
    assert got[0] == pytest.approx(0.9 * 0.08 / 1.08) and math.isnan(got[1])


def test_gac2_premise_reads_the_exact_cosine_above_sync():
    rng = np.random.default_rng(1)
    same = {d: list(0.97 + 0.005 * rng.standard_normal(N)) for d in LEVELS}
    status, text = stale_aligned(_exact_evidence(same))
    assert status == "failed" and "exact consecutive-update cosine" in text
    up = {"sync": same["sync"], LEVELS[1]: [x + 0.02 for x in same["sync"]]}
    assert stale_aligned(_exact_evidence(up))[0] == "met"
    # the registered design without the probe's measurement: unknown, never the capped reading
    assert stale_aligned(ag.Evidence(grid="t", seeds=[10000], levels=LEVELS, confirmatory=True))[0] == "unknown"


def test_a_window_the_probe_did_not_reach_is_not_testable(tmp_path, monkeypatch):
    monkeypatch.setattr(ag_judges, "FINGERPRINT", tmp_path / "none.json")
    ev = ag.Evidence(grid="t", seeds=[10000], levels=LEVELS, exact_window=[30.0, 250.0], exact_until=200,
                     cos_exact={("grpo", "sync"): [float("nan")], ("grpo", LEVELS[1]): [float("nan")]})
    status, text = uncapped(ev)
    assert status == "failed" and "not inside it" in text
