"""Sweeps: grid expansion and validation, resuming after an interruption, parallel workers, divergence."""

import json

import pandas as pd
import pytest

import testbed.sweep as sweep_mod
from testbed.results import ResultStore
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

    real_run, calls, crash = sweep_mod.run_many, [], [True]

    def flaky(cfgs, progress=False):
        calls.extend(c.run_id for c in cfgs)
        if len(calls) == 6 and crash and crash.pop():
            raise RuntimeError("simulated crash")
        return real_run(cfgs, progress=progress)

    monkeypatch.setattr(sweep_mod, "run_many", flaky)
    out = tmp_path / "resumed"
    with pytest.raises(RuntimeError, match="simulated crash"):
        sweep_file(path, out=out, progress=False, loop_size=1)  # one run per loop: 5 finish, the 6th crashes
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


@pytest.mark.slow  # spawning worker processes costs seconds of imports each
def test_parallel_workers_give_the_same_table(tmp_path):
    spec = {"base": {"task": "bandit", "steps": 10, "log_every": 5, "batch_size": 4},
            "grid": {"recipe": ["pg", "dg"], "delay": ["sync", "fixed:2"]}}
    configs = expand(spec)
    serial = run_sweep(configs, tmp_path / "a", workers=1, progress=False)
    parallel = run_sweep(configs, tmp_path / "b", workers=2, progress=False)
    pd.testing.assert_frame_equal(serial, parallel)


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
