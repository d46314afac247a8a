"""The full-run estimate says when it was timed on a shared machine (figures/estimate.py)."""

from __future__ import annotations

import math

from figures import estimate
from figures.budgets import DESIGN_OF as DESIGN


def test_a_quiet_machine_passes_and_each_sign_of_sharing_is_named():
    assert estimate.loaded(0.1, 0.99, 2) is None
    assert estimate.loaded(0.1, math.nan, 2) is None  # nothing timed: no evidence of sharing
    assert estimate.loaded(1.3, 0.99, 2) == "the load average was 1.30 on 2 core(s) before it started"
    assert estimate.loaded(0.1, 0.62, 2) == "its timed samples got 62% of a core"
    assert "; " in estimate.loaded(2.0, 0.5, 2)


def test_the_printed_estimate_warns_when_the_machine_was_shared(monkeypatch, capsys):
    result = {"workers": 2, "figures": [{"figure": "f", "runs": 3, "loops": 1, "cpu_s": 60.0, "wall_s": 60.0}],
              "oracle_wall_s": 0.0, "oracle_cpu_s": 0.0, "theory_s": 1.0, "draw_s": 2.0, "sampling_s": 5.0,
              "total_wall_s": 63.0, "cap_wall_s": 90.0}
    monkeypatch.setattr(estimate, "estimate", lambda workers, quick, stops=None: {**result, "loaded": None})
    assert estimate.main([]) == 0
    assert "warning" not in capsys.readouterr().out
    monkeypatch.setattr(estimate, "estimate",
                        lambda workers, quick, stops=None: {**result, "loaded": estimate.loaded(1.5, 0.6, 2),
                                                "sampling_cpu_share": 0.6})
    assert estimate.main([]) == 0
    out = capsys.readouterr().out
    assert "warning: the machine was not quiet (the load average was 1.50" in out and "60% of a core" in out
    assert "every time above is too high" in out


def test_a_load_average_alone_does_not_claim_the_times_are_too_high():
    why = estimate.loaded(0.8, 0.9997, 2)
    text = estimate.load_warning(why, 0.9997)
    assert text.startswith("the machine may not have been quiet (the load average was 0.80")
    assert "100% of a core" in text and "may be too high" in text and "every time" not in text
    assert "every time above is too high" in estimate.load_warning(estimate.loaded(0.8, 0.7, 2), 0.7)
    nothing_timed = estimate.load_warning(estimate.loaded(0.8, math.nan, 2), math.nan)
    assert "may be too high" in nothing_timed and "nan" not in nothing_timed


def test_the_slope_is_timed_over_a_span_long_enough_to_swamp_start_up_jitter():
    lengths = []

    def time_at(n):  # 1 s of start-up, 10 ms per step
        lengths.append(n)
        return 1.0 + 0.01 * n

    a, b = estimate.fit_line(time_at, unit=100, steps=10_000, min_span_s=20.0)
    assert lengths == [100, 1_100]  # t1 = 2 s, so m = 10 units of 2 s
    assert math.isclose(a, 1.0) and math.isclose(b, 0.01)

    lengths.clear()
    estimate.fit_line(lambda n: lengths.append(n) or 0.5 * n, unit=50, steps=1_000, min_span_s=20.0)
    assert lengths == [50, 100]  # a slow shape: one unit already lasts 25 s

    lengths.clear()
    estimate.fit_line(lambda n: lengths.append(n) or 1e-3 * n, unit=5, steps=20, min_span_s=20.0)
    assert lengths == [5, 20]  # never longer than the run it stands for


def _ids(rows, name):
    return {c.run_id for loop in dict(rows)[name] for c in loop}


def test_the_estimate_at_a_reports_stops_trains_the_looks_each_claim_went_on_to(monkeypatch):
    import dataclasses

    from figures import budgets
    from figures.experiments import all_claims, experiment, mnist_samples
    from figures.experiments.mnist_samples.settings import METHODS
    from testbed.util.sequential import Design

    # the quick budget with room for later looks: seeds 0, 1 first, then one more per look up to 4 (3 for tokens)
    b = dataclasses.replace(budgets.QUICK, mnist_design=Design(2, 1, 4), async_design=Design(2, 1, 4),
                            tr_design=Design(2, 1, 3))
    monkeypatch.setattr(budgets, "QUICK", b)
    staged = {c.id: getattr(b, f"{DESIGN[c.experiment]}_design").cap for c in all_claims()
              if c.staged and c.experiment in DESIGN}
    assert estimate.cap_stops(quick=True) == staged
    first = {c.id: 2 for c in all_claims()}
    at_cap = estimate.plan(2, quick=True, cap=True, stops=[staged, first])
    assert _ids(at_cap, estimate.stops_row(0)) == _ids(at_cap, estimate.CAP_ROW) != set()
    assert _ids(at_cap, estimate.stops_row(1)) == set()  # all stop at the first look
    # the cap row: every staged claim's cells at all of its design's seeds, beyond the first look's runs
    every = {c.run_id for name, kind in DESIGN.items() for c in experiment(name).staged_runs(
        b, b.all_seeds(kind), [x.id for x in experiment(name).CLAIMS if x.staged])}
    first_look = {c.run_id for name, _ in at_cap if name not in estimate.beyond_first_look(True, True, [staged, first])
                  for loop in dict(at_cap)[name] for c in loop}
    assert _ids(at_cap, estimate.CAP_ROW) == every - first_look
    only_dg1 = estimate.plan(2, quick=True, stops=[{"DG-1": 3}])  # DG-1 went on to its second look, 3 seeds
    seeds = b.all_seeds("mnist")
    extra = {c.run_id for c in mnist_samples.staged_runs(b, seeds[:3], ["DG-1"])} - {
        c.run_id for c in mnist_samples.configs(b)}
    assert _ids(only_dg1, estimate.stops_row(0)) == extra != set()
    assert len(extra) == len(METHODS)  # pg and dg at k = 1, seed 2
    # the first-look rows do not move with the stops
    assert [r for r in only_dg1 if r[0] != estimate.stops_row(0)] == estimate.plan(2, quick=True)


def test_a_file_that_is_not_a_claims_report_is_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text('{"figures": []}')
    assert estimate.main(["--stops", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --stops: ") and str(bad) in err and "\n" not in err
    good = tmp_path / "claims.json"
    good.write_text('{"claims": [{"id": "DG-1", "seeds_used": 10}, {"id": "AREAL-2", "seeds_used": null}]}')
    assert estimate.read_stops(good) == {"DG-1": 10}


def test_the_committed_report_gives_stops_within_its_designs():
    from pathlib import Path

    from figures.budgets import FULL
    from figures.experiments import all_claims

    report = Path(__file__).resolve().parents[2] / "results" / "paper" / "claims.json"
    stops = estimate.read_stops(report)
    for c in all_claims():
        if c.experiment in DESIGN:
            design = getattr(FULL, f"{DESIGN[c.experiment]}_design")
            assert stops[c.id] in design.looks, (c.id, stops[c.id])


def test_several_reports_are_priced_from_the_same_samples(monkeypatch, capsys, tmp_path):
    calls = []
    result = {"workers": 2, "figures": [{"figure": "extra seeds (stops 2)", "runs": 3, "loops": 1, "cpu_s": 60.0,
                                         "wall_s": 60.0}],
              "oracle_wall_s": 0.0, "oracle_cpu_s": 0.0, "theory_s": 1.0, "draw_s": 2.0, "sampling_s": 5.0,
              "total_wall_s": 63.0, "cap_wall_s": 90.0, "stops_wall_s": [70.0, 80.0], "loaded": None}

    def fake(workers, quick, stops=None):
        calls.append(stops)
        return result

    monkeypatch.setattr(estimate, "estimate", fake)
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text('{"claims": [{"id": "DG-1", "seeds_used": 10}]}')
    b.write_text('{"claims": [{"id": "DG-1", "seeds_used": 5}]}')
    assert estimate.main(["--stops", str(a), str(b)]) == 0
    assert calls == [[{"DG-1": 10}, {"DG-1": 5}]]  # one estimate, one set of timed samples, both stops
    out = capsys.readouterr().out
    assert f"stopped in {a}: 0:01:10 (extra seeds (stops 1))" in out
    assert f"stopped in {b}: 0:01:20 (extra seeds (stops 2))" in out
    assert "extra seeds (stops 2)     3" in out  # the table is as wide as its longest row name
