"""A report's wall time is that of its campaign: the invocations since the last one that found an empty cache."""

from __future__ import annotations

import pytest

from figures.publish import campaign
from testbed.util.provenance import changed_paths

ALL = "python -m figures all"


def inv(wall, missing, total=10, command=ALL, commit="c", cpu=None, completed=True):
    return {"command": command, "wall_s": wall, "cpu_s": wall if cpu is None else cpu, "missing_at_start": missing,
            "total_runs": total, "commit": commit, "completed": completed}


def test_a_stopped_and_resumed_run_is_timed_whole():
    got = campaign([inv(100.0, 10, commit="a", completed=False), inv(50.0, 4, commit="b")], ALL)
    assert got == {"wall_s": 150.0, "cpu_s": 150.0, "invocations": 2, "commits": ["a", "b"], "started": None,
                   "complete": True}


def test_a_fresh_cache_starts_a_new_campaign():
    got = campaign([inv(7.0, 10, completed=False), inv(3.0, 2), inv(100.0, 10, commit="x"), inv(1.0, 0, commit="y")],
                   ALL)
    assert (got["wall_s"], got["invocations"], got["commits"], got["complete"]) == (101.0, 2, ["x", "y"], True)


def test_other_commands_do_not_count_and_a_history_without_its_start_says_so():
    got = campaign([inv(5.0, 10, command="python -m figures all --quick"), inv(20.0, 3), inv(30.0, 1)], ALL)
    assert (got["wall_s"], got["invocations"], got["complete"]) == (50.0, 2, False)
    assert campaign([], ALL) == {"wall_s": None, "cpu_s": None, "invocations": 0, "commits": [], "started": None,
                                 "complete": False}


def test_an_unrecorded_time_makes_the_sum_undefined_not_smaller():
    got = campaign([inv(100.0, 10), {**inv(50.0, 4), "wall_s": None}], ALL)
    assert got["wall_s"] is None and got["invocations"] == 2


@pytest.mark.parametrize("total", [0, None])
def test_no_runs_is_not_a_fresh_start(total):
    assert campaign([inv(1.0, 0, total=total)], ALL)["complete"] is False


def test_an_invocation_stopped_before_any_run_finished_still_counts():
    """Its saved loops are resumed by the next one, which also finds every run missing."""
    got = campaign([inv(9.0, 10, completed=False), inv(40.0, 10, completed=False), inv(60.0, 10)], ALL)
    assert (got["wall_s"], got["invocations"], got["complete"]) == (109.0, 3, True)


def test_a_redraw_adds_to_the_run_that_trained():
    got = campaign([inv(100.0, 10), inv(2.0, 0)], ALL)
    assert (got["wall_s"], got["invocations"], got["complete"]) == (102.0, 2, True)


def test_status_paths_read_the_same_with_the_first_blank_stripped():
    text = " M results/paper/data/a.json\n M figures/stats.py\nR  old.py -> new.py"
    assert changed_paths(text) == changed_paths(text.strip()) == ["results/paper/data/a.json", "figures/stats.py",
                                                                  "new.py"]


def test_each_figure_is_credited_to_the_last_finished_command_that_trained_it():
    from figures.publish import provenance, provenance_table, provenance_wall

    one = "python -m figures a b"
    timings = {
        "python -m figures all": {"wall_s": {"a": 10.0, "b": 20.0, "c": 30.0}, "workers": 2},  # no invocation record
        "invocations": [
            {**inv(100.0, 5, total=5, command=one, commit="x", completed=False), "started": "2026-01-01T00:00:00+00:00"},
            {**inv(40.0, 2, total=5, command=one, commit="y"), "started": "2026-01-02T00:00:00+00:00", "workers": 1},
            {**inv(3.0, 0, command="python -m figures a --cached-only")},
            {**inv(9.0, 4, total=4, command="python -m figures a --quick")},
        ],
        one: {"wall_s": {"a": 25.0, "b": 15.0}, "workers": 1},
    }
    rows = {r["figure"]: r for r in provenance(timings, ["a", "b", "c"], quick=False)}
    a, c = rows["a"], rows["c"]
    assert (a["command"], a["started"], a["commits"]) == (one, "2026-01-01T00:00:00+00:00", ["x", "y"])
    assert (a["wall_s"], a["complete"], a["figure_s"], a["workers"]) == (140.0, True, 25.0, 1)
    assert rows["b"]["figure_s"] == 15.0
    assert (c["command"], c["started"], c["wall_s"], c["figure_s"]) == (None, None, None, None)  # not attributed
    st = {"provenance": list(rows.values())}
    assert provenance_wall(st) == (140.0, False)  # the resumed command once; c's time is not recorded
    assert provenance_wall({"provenance": [a, rows["b"]]}) == (140.0, True)
    assert [r[0] for r in provenance_table(st)] == ["a", "b", "c"]
    assert provenance_table({"provenance": [a, rows["b"]]}) == []  # one command made everything


def test_a_figure_no_command_recorded_has_no_provenance():
    from figures.publish import provenance, provenance_wall

    (row,) = provenance({"invocations": [inv(5.0, 10, command="python -m figures b")]}, ["a"], quick=False)
    assert row["command"] is None and row["figure_s"] is None
    assert provenance_wall({"provenance": [row]}) == (0, False)


def test_the_header_names_each_machine_with_its_runs_and_figures():
    from figures.publish import machines_line
    from testbed.machine import NOT_RECORDED, describe

    a = describe({"cpu": "AMD EPYC", "cpu_capability": "AVX2", "torch": "2.13.0+cpu", "blas": "mkl"})
    assert a == "AMD EPYC, AVX2, 2.13.0+cpu, mkl" and describe(None) == NOT_RECORDED
    st = {"machines": {"f1": {a: 10, NOT_RECORDED: 5}, "f2": {NOT_RECORDED: 40}, "f3": None, "analytic": {}}}
    line = machines_line(st)
    # per figure, never summed: figures of one experiment read the same runs
    assert f"{a} (runs per figure: f1 10); {NOT_RECORDED} (runs per figure: f1 5, f2 40); not counted for f3" in line
    assert "analytic" not in line
    assert machines_line({"machines": {}}) is None and machines_line({}) is None
