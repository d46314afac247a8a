"""The full-run estimate says when it was timed on a shared machine (figures/estimate.py)."""

from __future__ import annotations

import math

from figures import estimate


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
    monkeypatch.setattr(estimate, "estimate", lambda workers, quick: {**result, "loaded": None})
    assert estimate.main([]) == 0
    assert "warning" not in capsys.readouterr().out
    monkeypatch.setattr(estimate, "estimate",
                        lambda workers, quick: {**result, "loaded": estimate.loaded(1.5, 0.6, 2),
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
