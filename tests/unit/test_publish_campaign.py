"""A report's wall time is that of its campaign: the invocations since the last one that found an empty cache."""

from __future__ import annotations

import pytest

from figures.publish import campaign, changed_paths

ALL = "python -m figures all"


def inv(wall, missing, total=10, command=ALL, commit="c", cpu=None, completed=True):
    return {"command": command, "wall_s": wall, "cpu_s": wall if cpu is None else cpu, "missing_at_start": missing,
            "total_runs": total, "commit": commit, "completed": completed}


def test_a_stopped_and_resumed_run_is_timed_whole():
    got = campaign([inv(100.0, 10, commit="a", completed=False), inv(50.0, 4, commit="b")], ALL)
    assert got == {"wall_s": 150.0, "cpu_s": 150.0, "invocations": 2, "commits": ["a", "b"], "complete": True}


def test_a_fresh_cache_starts_a_new_campaign():
    got = campaign([inv(7.0, 10, completed=False), inv(3.0, 2), inv(100.0, 10, commit="x"), inv(1.0, 0, commit="y")],
                   ALL)
    assert (got["wall_s"], got["invocations"], got["commits"], got["complete"]) == (101.0, 2, ["x", "y"], True)


def test_other_commands_do_not_count_and_a_history_without_its_start_says_so():
    got = campaign([inv(5.0, 10, command="python -m figures all --quick"), inv(20.0, 3), inv(30.0, 1)], ALL)
    assert (got["wall_s"], got["invocations"], got["complete"]) == (50.0, 2, False)
    assert campaign([], ALL) == {"wall_s": None, "cpu_s": None, "invocations": 0, "commits": [], "complete": False}


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
