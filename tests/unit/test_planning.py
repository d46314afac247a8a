"""The one planning rule (testbed/util/planning.py) and the planners that use it: repeats are one run, a run with
changed code is retrained and named, a finished run is reused, order is kept."""

from __future__ import annotations

import io
import json

from testbed.util.planning import plan_runs, unique


def test_unique_keeps_first_occurrence_in_order():
    items = [("a", 1), ("b", 2), ("a", 3), ("c", 4), ("b", 5)]
    assert unique(items, key=lambda t: t[0]) == [("a", 1), ("b", 2), ("c", 4)]
    assert unique([], key=str) == []


def test_plan_runs_splits_done_changed_and_new():
    done = {"b", "d"}
    changed = {"d": ["loop"], "e": ["task", "recipe"]}
    calls = []

    def is_done(k: str) -> bool:
        calls.append(k)
        return k in done

    plan = plan_runs(["e", "a", "b", "a", "c", "d"], key=str, done=is_done, changed=lambda k: changed.get(k, []))
    assert plan.runs == ["e", "a", "b", "c", "d"]
    # d is done by its store's test but its code changed: retrained; e never finished and its begun copy is stale
    assert plan.todo == ["e", "a", "c", "d"]
    assert plan.changed == {"d": ["loop"], "e": ["task", "recipe"]}
    assert plan.reused == 1
    assert "d" not in calls and "e" not in calls  # a changed run is not asked whether it is done


def test_plan_runs_without_changed_reads_done_only():
    plan = plan_runs([3, 1, 3, 2], key=str, done=lambda k: k == 1)
    assert (plan.runs, plan.todo, plan.changed, plan.reused) == ([3, 1, 2], [3, 2], {}, 1)


def test_study_execute_plans_by_the_rule(tmp_path, monkeypatch):
    """The study's scheduler trains nothing that is finished by the current code, trains a repeated run once, and
    clears a run whose code changed before training it afresh."""
    from llm_scale import trainer
    from llm_scale.study import execute, load_sweep, make_run
    from testbed.util import executor

    sweep_file = tmp_path / "s.toml"
    sweep_file.write_text("[train]\neval_every = 1\nsteps = 2\n[search]\neta = [2]\nlr = [1e-3]\n"
                          "seeds = [0, 1]\n[compare]\nseeds = [0, 1]\n")  # fmt: skip
    sweep = load_sweep(sweep_file)
    runs = [make_run(sweep, "search", "sync", 2, 1e-3, s) for s in (0, 1)]
    finished, stale = runs
    root = tmp_path / "runs"
    for run in runs:
        d = root / run.key
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps({"status": "finished", "of_steps": 2}))
        (d / "eval.csv").write_text("version,eval_reward\n0,0.1\n2,0.5\n")
    monkeypatch.setattr(trainer, "code_changed", lambda d, recipe: ["loop"] if d.name == stale.key else [])
    started = []

    class Record:
        name = "record"

        def run(self, fn, jobs, workers, threads=1, on_done=None):
            started.extend(jobs)
            return ["interrupted"] * len(jobs)

    with executor.using(Record()):
        assert execute([finished, stale, stale], root, budget_s=60, parallel=1, device=None, log=io.StringIO()) == 0
    assert [argv[argv.index("--out") + 1] for argv, *_ in started] == [str(root / stale.key)]
    assert not (root / stale.key).exists() and (root / finished.key / "summary.json").is_file()
