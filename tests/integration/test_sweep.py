"""Sweeps: grid expansion and validation, resuming after an interruption, parallel workers, divergence."""

import json

import pandas as pd
import pytest

import testbed.sweep as sweep_mod
from testbed.results import ResultStore, read_frame
from testbed.sweep import expand, load_file, run_sweep, sweep_file

pytestmark = pytest.mark.integration

TOML = """
out = "{out}"
[base]
task = "contextual_bandit"
steps = 12
log_every = 4
batch_size = 8
lr = 0.1
N = 3
[grid]
recipe = ["pg", "tis(c=2)", "dg"]
delay = ["sync", "uniform:3"]
seed = [0, 1]
"""

YAML = """
out: {out}
base: {{task: contextual_bandit, steps: 12, log_every: 4, batch_size: 8, lr: 0.1, N: 3}}
grid:
  recipe: [pg, "tis(c=2)", dg]
  delay: [sync, "uniform:3"]
  seed: [0, 1]
"""


def write(tmp_path, name, text, out="unused"):
    path = tmp_path / name
    path.write_text(text.format(out=out))
    return path


def test_expand_grid_routes_task_options_and_dedupes(tmp_path):
    configs = expand(load_file(write(tmp_path, "s.toml", TOML)))
    assert len(configs) == 3 * 2 * 2
    assert {c.recipe for c in configs} == {"pg", "tis(c=2)", "dg"}
    assert all(c.task_args == {"N": 3} for c in configs)
    assert len({c.run_id for c in configs}) == 12
    yaml_configs = expand(load_file(write(tmp_path, "s.yaml", YAML)))
    assert [c.run_id for c in yaml_configs] == [c.run_id for c in configs]
    spec = {"base": {"task": "bandit", "seeds": 3, "steps": 5}, "grid": {"recipe": ["pg", "pg"]}}
    assert [c.seed for c in expand(spec)] == [0, 1, 2]  # duplicate recipe dropped, seeds expanded


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ({"base": {"task": "mnist", "widht": 3}}, "unknown key 'widht'"),
        ({"grid": {"recipe": "pg"}}, "must be a non-empty list"),
        ({"grid": {"recipe": ["pg", "nope"]}}, "unknown recipe or component 'nope'"),
        ({"grid": {"delay": ["fixed:-3"]}}, "bad staleness spec"),
        ({"grid": {"frictions": ["bug(frac=3)"]}}, "bad friction spec"),
        ({"base": {"steps": 0}}, "steps must be"),
        ({"base": {"task": "mnist", "data_dir": "/no/such/dir"}}, "does not exist"),
        ({"sweeps": {}}, "unknown top-level key"),
        ({"base": {"task": "nope"}}, "unknown task 'nope'"),
        ({"base": {"batch_size": 10, "n_actors": 3, "group_size": 2}}, "group_size 2 must divide"),
        ({}, "the sweep has no runs"),
        ({"out": "x", "workers": 2}, "the sweep has no runs"),
        ({"base": {"lr": 0.1}, "grid": {"lr": [0.2]}}, "key(s) 'lr' in both [base] and [grid]"),
        ({"base": 3}, "[base] must be a table"),
        ({"workers": "two", "base": {"task": "bandit"}}, "workers must be an integer >= 1, got 'two'"),
        ({"out": 5, "base": {"task": "bandit"}}, "out must be a directory path (a string), got 5"),
        ({"base": {"task": 3}}, "task must be a task name, got 3"),
    ],
)
def test_bad_sweeps_are_rejected_with_clear_errors(spec, fragment):
    with pytest.raises(ValueError) as info:
        expand(spec)
    assert fragment in str(info.value)


def test_malformed_file(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[base\nsteps = ")
    with pytest.raises(ValueError, match="malformed"):
        load_file(bad)
    with pytest.raises(ValueError, match="unknown extension"):
        load_file(write(tmp_path, "s.json", "{{}}"))


def test_interrupted_sweep_resumes_to_the_same_table(tmp_path, monkeypatch):
    path = write(tmp_path, "s.toml", TOML)
    reference = sweep_file(path, out=tmp_path / "full", progress=False)
    assert len(reference) == 12 * 3  # 12 runs x 3 logged steps

    real_runner, calls, crash = sweep_mod.Runner, [], [True]

    def flaky(cfgs):
        calls.extend(c.run_id for c in cfgs)
        if len(calls) == 6 and crash and crash.pop():
            raise KeyboardInterrupt  # an interruption (Ctrl-C) in the middle of the 6th run
        return real_runner(cfgs)

    monkeypatch.setattr(sweep_mod, "Runner", flaky)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        sweep_file(path, out=out, progress=False, loop_size=1)  # one run per loop: 5 finish, the 6th is interrupted
    finished = sorted(p.stem for p in (out / "runs").glob("*.json"))
    assert len(finished) == 5 and not (out / "results.csv").exists()
    assert not list((out / "runs").glob(".*"))  # no temporary files left behind

    calls.clear()
    resumed = sweep_file(path, out=out, progress=False)  # resumed with loops of several runs: the same table
    assert len(calls) == 7 and not set(calls) & set(finished)  # only the unfinished runs ran
    pd.testing.assert_frame_equal(resumed, reference)
    assert (out / "results.csv").read_bytes() == (tmp_path / "full" / "results.csv").read_bytes()
    calls.clear()
    sweep_file(path, out=out, progress=False)  # everything done: nothing reruns, nothing duplicates
    assert calls == [] and len(pd.read_csv(out / "results.csv")) == len(reference)


def test_a_run_that_raises_is_failed_not_fatal_and_is_retried(tmp_path, monkeypatch, capsys):
    """An exception inside a run: that run is recorded failed (traceback beside the results), its loop-mates
    are retried alone and saved, the command exits 1 with a short message; rerunning retries only it."""
    path = write(tmp_path, "s.toml", TOML)
    reference = sweep_file(path, out=tmp_path / "full", progress=False)
    real_runner = sweep_mod.Runner

    def broken(cfgs):
        if any(c.recipe == "dg" and c.seed == 1 for c in cfgs):
            raise RuntimeError("boom in the learner")
        return real_runner(cfgs)

    monkeypatch.setattr(sweep_mod, "Runner", broken)
    from testbed.cli import main

    out = tmp_path / "out"
    assert main(["sweep", str(path), "--out", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: 2 of 12 run(s) failed with an internal error, not a problem")
    assert "RuntimeError: boom in the learner" in err[0] and "rerunning the same command retries" in err[0]
    summary = read_frame(out / "summary.csv")
    failed = summary[summary["status"] == "failed"]
    assert len(summary) == 12 and len(failed) == 2 and set(failed["recipe"]) == {"dg"} and set(failed["seed"]) == {1}
    assert set(failed["error"]) == {"RuntimeError: boom in the learner"}
    for run_id in failed["run_id"]:
        log = (out / "runs" / f"{run_id}.log").read_text()
        assert log.startswith("Traceback") and "RuntimeError: boom in the learner" in log
    table = read_frame(out / "results.csv")
    assert set(table["run_id"]) == set(summary["run_id"]) - set(failed["run_id"])
    good = reference[~reference["run_id"].isin(failed["run_id"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(table, good)  # the loop-mates of the failed runs are exactly as if alone

    monkeypatch.setattr(sweep_mod, "Runner", real_runner)  # the bug is fixed: rerun retries the failed runs only
    calls = []
    monkeypatch.setattr(sweep_mod, "Runner", lambda cfgs: calls.extend(c.run_id for c in cfgs) or real_runner(cfgs))
    assert main(["sweep", str(path), "--out", str(out), "--no-progress"]) == 0
    assert sorted(calls) == sorted(failed["run_id"])
    assert (out / "results.csv").read_bytes() == (tmp_path / "full" / "results.csv").read_bytes()
    assert not list((out / "runs").glob("*.log"))


@pytest.mark.slow  # spawning worker processes costs seconds of imports each
def test_parallel_workers_give_the_same_table(tmp_path):
    spec = {"base": {"task": "bandit", "steps": 10, "log_every": 5, "batch_size": 4},
            "grid": {"recipe": ["pg", "dg"], "delay": ["sync", "fixed:2"]}}
    configs = expand(spec)
    serial = run_sweep(configs, tmp_path / "a", workers=1, progress=False)
    parallel = run_sweep(configs, tmp_path / "b", workers=2, progress=False)
    pd.testing.assert_frame_equal(serial, parallel)


def test_corrupt_gz_data_is_refused_before_anything_runs(tmp_path):
    data = tmp_path / "idx"
    data.mkdir()
    for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
        (data / f"{name}.gz").write_bytes(b"\x1f\x8b\x08\x00 truncated")
    with pytest.raises(ValueError, match=r"task 'mnist' \(data_dir='.*'\) cannot load its data: (EOFError|BadGzipFile)"):
        expand({"base": {"task": "mnist", "data_dir": str(data)}})


def test_run_ids_without_the_data(tmp_path):
    """``build=False`` gives a file's run ids where its data is missing, the same ids the built expansion gives."""
    missing = {"base": {"task": "mnist", "data_dir": str(tmp_path / "absent"), "steps": 10}, "grid": {"seed": [0, 1]}}
    with pytest.raises(ValueError, match="does not exist"):
        expand(missing)
    ids = [c.run_id for c in expand(missing, build=False)]
    assert len(set(ids)) == 2
    plain = {"base": {"task": "mnist", "steps": 10}, "grid": {"seed": [0, 1]}}
    assert [c.run_id for c in expand(plain, build=False)] == [c.run_id for c in expand(plain)]


def test_diverged_run_is_a_status_not_nan_rows(tmp_path):
    spec = {"base": {"task": "contextual_bandit", "steps": 30, "log_every": 5, "batch_size": 8},
            "grid": {"lr": [0.1, 1e38]}}
    configs = expand(spec)
    table = run_sweep(configs, tmp_path, progress=False, fmt="parquet")
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert summary["status"].tolist() == ["ok", "diverged"]
    bad = table[table["lr"] == 1e38]
    assert set(bad["status"]) == {"diverged"} and bad["diverged_at"].notna().iloc[-1]
    assert table[table["status"] == "ok"]["test_error"].notna().all()
    assert len(pd.read_parquet(tmp_path / "results.parquet")) == len(table)
    record = json.loads((tmp_path / "runs" / f"{configs[1].run_id}.json").read_text())
    assert record["status"] == "diverged" and record["config"]["lr"] == 1e38
    assert ResultStore(tmp_path).done(configs[0].run_id)


def test_a_run_whose_rows_file_was_cut_short_is_trained_again(tmp_path):
    configs = expand({"base": {"task": "contextual_bandit", "steps": 12, "log_every": 4, "batch_size": 8, "seeds": 2}})
    reference = run_sweep(configs, tmp_path, progress=False)
    store = ResultStore(tmp_path)
    victim = configs[1].run_id
    assert all(store.done(c.run_id) for c in configs) and store.record(victim)["rows"] == 3
    rows = store.runs / f"{victim}.csv"
    text = rows.read_text()
    rows.write_text(text[: len(text) - 10])  # the last row cut in the middle
    assert store.done(configs[0].run_id) and not store.done(victim)
    rows.write_text("".join(text.splitlines(keepends=True)[:-1]))  # the last row missing, file otherwise whole
    assert not store.done(victim)
    again = run_sweep(configs, tmp_path, progress=False)  # retrains the victim only, to the same table
    pd.testing.assert_frame_equal(again, reference)
    assert store.done(victim)


def test_a_command_into_a_directory_holding_other_runs_is_refused(tmp_path, capsys):
    from testbed.cli import main

    out = str(tmp_path / "out")
    argv = ["run", "--task", "bandit", "--steps", "4", "--log-every", "2", "--no-progress", "--out", out]
    assert main(argv) == 0
    assert main([*argv, "--seeds", "2"]) == 0  # adds a run: resumes there, both runs in the tables
    assert len(read_frame(tmp_path / "out" / "summary.csv")) == 2
    before = (tmp_path / "out" / "results.csv").read_bytes()
    assert main([*argv[:4], "6", *argv[5:]]) == 2  # other runs (6 steps): refused, nothing rewritten
    assert "holds the results of 2 run(s) that this command does not run" in capsys.readouterr().err
    assert (tmp_path / "out" / "results.csv").read_bytes() == before


def test_planned_runs_that_never_finished_do_not_block_another_command(tmp_path, capsys):
    """config.json lists what a command planned; runs of it with no result files hold nothing to lose."""
    from testbed.cli import main

    out = str(tmp_path / "out")
    argv = ["run", "--task", "bandit", "--steps", "4", "--log-every", "2", "--no-progress", "--out", out]
    assert main(argv) == 0
    for f in (tmp_path / "out" / "runs").iterdir():  # as if the first command had been stopped before any run ended
        f.unlink()
    assert main([*argv[:4], "6", *argv[5:]]) == 0
    assert len(read_frame(tmp_path / "out" / "summary.csv")) == 1


def test_a_shared_store_keeps_every_command_s_runs_in_its_tables(tmp_path):
    """Two commands adding runs to one shared store (the figures' cache) leave results.csv, summary.csv and
    config.json holding both commands' runs, byte for byte the tables one sweep of all of them writes; a run both
    commands name is listed once, where the second command puts it."""
    from testbed.config import RunConfig

    first = [RunConfig(task="bandit", steps=4, log_every=2, seed=s) for s in (0, 1)]
    second = [RunConfig(task="bandit", steps=4, log_every=2, seed=2), first[1]]
    run_sweep(first, tmp_path / "shared", progress=False, shared=True)
    returned = run_sweep(second, tmp_path / "shared", progress=False, shared=True)
    assert list(dict.fromkeys(returned["run_id"])) == [c.run_id for c in second]  # the command's own runs
    run_sweep([first[0], *second], tmp_path / "alone", progress=False)
    for name in ("results.csv", "summary.csv"):
        got, want = read_frame(tmp_path / "shared" / name), read_frame(tmp_path / "alone" / name)
        assert list(dict.fromkeys(got["run_id"])) == [first[0].run_id, *(c.run_id for c in second)]
        pd.testing.assert_frame_equal(got.drop(columns=["wall_s", "queue_peak_bytes"], errors="ignore"),
                                      want.drop(columns=["wall_s", "queue_peak_bytes"], errors="ignore"))
    assert (tmp_path / "shared" / "results.csv").read_bytes() == (tmp_path / "alone" / "results.csv").read_bytes()
    runs = json.loads((tmp_path / "shared" / "config.json").read_text())["runs"]
    assert list(runs) == [first[0].run_id, *(c.run_id for c in second)]


def test_record_extra_is_written_by_the_record_s_one_writer_and_only_for_runs_trained(tmp_path):
    """``record_extra`` (the figures' protocol stamp) goes into the record of every run the call trains, in this
    process and in worker processes alike; a run the call reuses keeps its record as it was."""
    from testbed.config import RunConfig

    first = [RunConfig(task="bandit", steps=4, log_every=2, seed=s) for s in (0, 1)]
    run_sweep(first[:1], tmp_path, progress=False, shared=True)
    stamp = {"preregistration": {"sha256": "a" * 64}}
    run_sweep(first, tmp_path, progress=False, shared=True, record_extra=stamp)
    run_sweep([RunConfig(task="bandit", steps=4, log_every=2, seed=s) for s in (2, 3)], tmp_path, workers=2,
              progress=False, shared=True, record_extra=stamp, loop_size=1)
    store = ResultStore(tmp_path)
    records = {s: store.record(RunConfig(task="bandit", steps=4, log_every=2, seed=s).run_id) for s in range(4)}
    assert "preregistration" not in records[0]  # reused: never stamped after the fact
    assert all(records[s]["preregistration"] == stamp["preregistration"] for s in (1, 2, 3))
