"""The exact-gradient MNIST runs (DG-1's infinite-sample limits): seeds trained together are each bit for bit
the seed trained alone; jobs are cut into balanced runs per kind; the cache trains each (kind, seed) once."""

from __future__ import annotations

import pytest

from figures import oracle_runs


@pytest.mark.parametrize("kind", oracle_runs.KINDS)
def test_seeds_trained_together_are_each_the_seed_alone(kind):
    together = oracle_runs.train(kind, [0, 1, 2], 20, 10)
    for seed, rows in zip([0, 1, 2], together, strict=True):
        alone = oracle_runs.train(kind, [seed], 20, 10)[0]
        assert alone.equals(rows), (kind, seed)
    assert together[0]["step"].tolist() == [10, 20]
    assert together[0]["test_error"].iloc[-1] != together[1]["test_error"].iloc[-1] or \
        together[0]["test_reward"].iloc[-1] != together[1]["test_reward"].iloc[-1]  # the seeds are different runs


def test_jobs_are_cut_per_kind_into_balanced_runs():
    jobs = [(k, s) for k in ("pg_exact", "ce") for s in range(5)] + [("dg_exact", 7)]
    assert oracle_runs.batches(jobs, 2) == [("pg_exact", [0, 1, 2, 3, 4]), ("ce", [0, 1, 2, 3, 4]), ("dg_exact", [7])]
    many = [("ce", s) for s in range(17)]
    assert [len(s) for _, s in oracle_runs.batches(many, 2)] == [5, 4, 4, 4]  # 3 runs of 8 at most -> 4 for 2 workers
    assert [s for _, seeds in oracle_runs.batches(many, 2) for s in seeds] == list(range(17))


def test_ensure_trains_each_kind_and_seed_once(tmp_path):
    jobs = [("ce", 0), ("ce", 1), ("pg_exact", 0)]
    oracle_runs.ensure(tmp_path, jobs, 4, 2)
    paths = [oracle_runs.rows_path(tmp_path, k, s, 4, 2) for k, s in jobs]
    assert all(p.is_file() and p.with_suffix(".json").is_file() for p in paths)
    stamps = [p.stat().st_mtime_ns for p in paths]
    oracle_runs.ensure(tmp_path, [*jobs, ("ce", 2)], 4, 2)  # only the new job trains
    assert [p.stat().st_mtime_ns for p in paths] == stamps
    new = oracle_runs.cached(tmp_path, "ce", 2, 4, 2, cached_only=True)
    assert new["step"].tolist() == [2, 4] and new["seed"].tolist() == [2, 2]
    assert new["test_error"].between(0, 1).all()


def test_a_run_trained_by_other_code_is_trained_again(tmp_path):
    """The record carries the code's fingerprint; a run whose fingerprint differs from the code's now is not read
    and is trained again; one recorded before records carried a fingerprint is not judged."""
    import json

    oracle_runs.ensure(tmp_path, [("ce", 0)], 4, 2)
    path = oracle_runs.rows_path(tmp_path, "ce", 0, 4, 2)
    record = json.loads(path.with_suffix(".json").read_text())
    assert record["code"] == oracle_runs.code() and oracle_runs.current(tmp_path, "ce", 0, 4, 2)
    path.with_suffix(".json").write_text(json.dumps({**record, "code": {"oracle": "another"}}))
    assert not oracle_runs.current(tmp_path, "ce", 0, 4, 2)
    assert oracle_runs.cached(tmp_path, "ce", 0, 4, 2, cached_only=True).empty
    oracle_runs.ensure(tmp_path, [("ce", 0)], 4, 2)
    assert json.loads(path.with_suffix(".json").read_text())["code"] == oracle_runs.code()
    path.with_suffix(".json").write_text(json.dumps({k: v for k, v in record.items() if k != "code"}))
    assert oracle_runs.current(tmp_path, "ce", 0, 4, 2)  # no fingerprint: not judged


def test_task_options_train_on_that_data_and_key_their_own_runs(tmp_path):
    """``task_args`` reach the task (a 500-image training set trains differently from the embedded 4,000) and key
    their own cache entries, while runs without them keep the key they had (the settings hash without the
    ``task_args`` entry)."""
    import hashlib
    import json

    from testbed.util.seeding import SCHEME

    small = {"train_size": 500}
    legacy = {"kind": "ce", "seed": 0, "steps": 4, "log_every": 2, "lr": 1e-3, "batch": 100, "task": "mnist",
              "seed_scheme": SCHEME}
    key = hashlib.sha1(json.dumps(legacy, sort_keys=True).encode()).hexdigest()[:12]
    assert oracle_runs.rows_path(tmp_path, "ce", 0, 4, 2).name == f"{key}.csv"
    assert oracle_runs.rows_path(tmp_path, "ce", 0, 4, 2, small) != oracle_runs.rows_path(tmp_path, "ce", 0, 4, 2)
    full = oracle_runs.train("pg_exact", [0], 30, 10)[0]
    part = oracle_runs.train("pg_exact", [0], 30, 10, task_args=small)[0]
    assert not full["test_error"].equals(part["test_error"])
    oracle_runs.ensure(tmp_path, [("pg_exact", 0)], 30, 10, task_args=small)
    assert not oracle_runs.current(tmp_path, "pg_exact", 0, 30, 10)  # the embedded data's run is another run
    cached = oracle_runs.cached(tmp_path, "pg_exact", 0, 30, 10, cached_only=True, task_args=small)
    assert cached["test_error"].tolist() == part["test_error"].tolist()
    record = json.loads(oracle_runs.rows_path(tmp_path, "pg_exact", 0, 30, 10, small).with_suffix(".json").read_text())
    assert record["settings"]["task_args"] == small
