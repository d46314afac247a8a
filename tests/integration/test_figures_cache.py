"""The figures' run cache: a rerun says what it reused; a cached run whose files do not verify is trained again."""

from __future__ import annotations

import pytest

from figures.common import Context
from testbed.config import RunConfig
from testbed.results import ResultStore


def _configs(n: int = 2) -> list[RunConfig]:
    return [RunConfig(task="bandit", recipe="pg", steps=20, log_every=5, seed=s) for s in range(n)]


def test_rerun_says_what_it_reused(tmp_path, capsys):
    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    ctx.ensure(_configs(1))
    assert "0 of 1 runs reused, 1 new to train" in capsys.readouterr().out
    ctx.ensure(_configs(2))
    assert "1 of 2 runs reused, 1 new to train" in capsys.readouterr().out
    ctx.ensure(_configs(2))
    assert capsys.readouterr().out.strip().endswith("2 of 2 runs reused")


def test_cut_short_run_file_is_trained_again_and_reported(tmp_path, capsys):
    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    configs = _configs(2)
    ctx.ensure(configs)
    whole = ctx.table(configs)
    rows = ResultStore(ctx.cache).runs / f"{configs[1].run_id}.csv"
    intact = rows.read_bytes()
    rows.write_bytes(intact[: len(intact) // 2])  # a copy that ran out of disk: the record is intact
    if ResultStore(ctx.cache).done(configs[1].run_id):
        pytest.skip("this results store does not verify a run's rows file yet")
    capsys.readouterr()
    again = ctx.table(configs)
    assert "1 of 2 runs reused, 1 damaged (files incomplete) to train" in capsys.readouterr().out
    assert rows.read_bytes() == intact  # trained again, same seed: the same rows
    assert len(again) == len(whole) and again["run_id"].nunique() == 2


def test_rows_reads_the_trained_runs_only_and_trains_and_prints_nothing(tmp_path, capsys):
    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    configs = _configs(3)
    ctx.ensure(configs[:2])
    capsys.readouterr()
    with ctx.reading() as used:
        rows = ctx.rows(configs)
    store = ResultStore(ctx.cache)
    assert not store.done(configs[2].run_id) and capsys.readouterr().out == ""
    assert set(rows["run_id"]) == {configs[0].run_id, configs[1].run_id}
    assert sorted(rows.groupby("run_id")["step"].apply(list).tolist()) == [[5, 10, 15, 20]] * 2  # logged steps
    assert used == {store.runs / f"{c.run_id}.csv" for c in configs[:2]}
    assert rows.equals(ctx.table(configs[:2]))


def test_disk_refusal_names_figures_own_options(tmp_path, monkeypatch):
    from testbed import limits
    from testbed.util.errors import UsageError

    monkeypatch.setattr(limits, "free_disk", lambda out: 1)
    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    with pytest.raises(UsageError) as info:
        ctx.ensure(_configs(1))
    message = str(info.value)
    assert "free" in message and "--log-every" not in message and "--cache" in message and "--quick" in message


def _set_machine(store: ResultStore, run_id: str, value) -> None:
    import json

    path = store.runs / f"{run_id}.json"
    record = json.loads(path.read_text())
    if value is None:
        record.pop("machine")
    else:
        record["machine"] = value
    path.write_text(json.dumps(record))


def test_reused_runs_trained_elsewhere_are_counted_in_the_cache_line(tmp_path, capsys):
    from testbed.machine import describe
    from testbed.util.provenance import machine

    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    configs = _configs(3)
    ctx.ensure(configs)
    store = ResultStore(ctx.cache)
    assert all(store.record(c.run_id)["machine"] == machine() for c in configs)
    ctx.ensure(configs)
    assert capsys.readouterr().out.strip().endswith("3 of 3 runs reused")  # all from this machine: nothing to say
    other = "AVX2" if machine()["cpu_capability"] == "AVX512" else "AVX512"
    _set_machine(store, configs[0].run_id, {**machine(), "cpu_capability": other})
    _set_machine(store, configs[1].run_id, None)  # saved before records named their machine
    ctx.ensure(configs)
    line = capsys.readouterr().out
    assert "3 of 3 runs reused, 1 of them trained on another machine and 1 with no machine recorded" in line
    assert describe(store.record(configs[0].run_id)["machine"]) != describe(machine())


def test_a_figure_counts_the_machines_of_every_run_it_read(tmp_path):
    """Runs read through `ensure` and through an experiment's evidence computed for an earlier figure (memoized)
    both count; a run the cache lacks does not; a record without a machine counts as not recorded."""
    import types

    from figures.common import machines
    from testbed.machine import NOT_RECORDED, describe
    from testbed.util.provenance import machine

    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    own, shared = _configs(3)[:1], _configs(3)[1:]
    store = ResultStore(ctx.cache)

    def evidence(c):
        c.ensure(shared)
        c.touch([store.runs / "absent.csv"])  # read but never trained: not counted
        return "evidence"

    exp = types.SimpleNamespace(NAME="shared_exp", measure=evidence)
    with ctx.reading() as first:
        ctx.ensure(own)
        assert ctx.evidence(exp) == "evidence"
    with ctx.reading() as second:  # another figure of the same experiment: evidence memoized, its runs still count
        assert ctx.evidence(exp) == "evidence"
    here = describe(machine())
    assert machines(first) == {here: 3}
    assert machines(second) == {here: 2}
    _set_machine(store, shared[0].run_id, None)
    assert machines(second) == {NOT_RECORDED: 1, here: 1}
    assert ctx.extra["reading"] == []  # every block closed its set


def test_a_run_recorded_with_other_code_is_trained_again(tmp_path, capsys):
    """The figures' cache knows the code a run ran (testbed/codeprint.py): a record whose fingerprint differs from
    the current code's is not reused; it is trained again and recorded with the current fingerprint."""
    import json

    from testbed.codeprint import config_code

    ctx = Context(out=tmp_path / "out", cache=tmp_path / "cache", progress=False)
    configs = _configs(2)
    ctx.ensure(configs)
    store = ResultStore(ctx.cache)
    path = store.runs / f"{configs[0].run_id}.json"
    record = json.loads(path.read_text())
    current = config_code(configs[0])
    assert record["code"] == current
    record["code"] = {part: "0" * len(value) for part, value in current.items()}  # as if the code changed since
    path.write_text(json.dumps(record))
    capsys.readouterr()
    ctx.ensure(configs)
    assert "1 of 2 runs reused" in capsys.readouterr().out
    assert json.loads(path.read_text())["code"] == current and store.done(configs[0].run_id, current)
