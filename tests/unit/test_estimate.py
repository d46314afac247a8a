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
                        lambda workers, quick: {**result, "loaded": estimate.loaded(1.5, 0.6, 2)})
    assert estimate.main([]) == 0
    out = capsys.readouterr().out
    assert "warning: the machine was not quiet (the load average was 1.50" in out and "60% of a core" in out
