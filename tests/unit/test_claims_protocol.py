"""The report's protocol stamp (figures/claims.py `protocol`), the pre-registered design in claims.json and the
verdict table printed from it (figures/table.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures import claims, prereg, table

ROOT = Path(__file__).resolve().parents[2]


def _rows(seeds):
    return [{"id": "GAC-2", "per_seed": {"seeds": list(seeds)}}]


@pytest.fixture
def committed(monkeypatch):
    reg = prereg.load()
    st = {"sha256": reg.sha256, "commit": "c0ffee", "status": "registered", "seed_block": [10000, 10099],
          "file": "figures/preregistration.toml"}
    monkeypatch.setattr(prereg, "stamp", lambda path=prereg.PATH: dict(st))
    monkeypatch.setattr(claims, "WIRED", frozenset(reg.claims))
    return reg


def test_first_confirmatory_report_records_the_rules_and_later_ones_are_checked_against_them(tmp_path, committed):
    reg = committed
    seeds = reg.seeds("async")
    meta = claims.protocol(tmp_path, reg, _rows(seeds), ROOT, {reg.sha256: 3})
    assert meta["label"] == "confirmatory" and meta["label_reasons"] == []
    assert meta["judged_seeds"] == [10000, 10029] and meta["seed_block"] == [10000, 10099]
    first = json.loads((tmp_path / "preregistration.json").read_text())
    assert first["sha256"] == reg.sha256 and first["commit"] == "c0ffee"
    assert claims.protocol(tmp_path, reg, _rows(seeds), ROOT, {reg.sha256: 3})["label"] == "confirmatory"
    # the rules changed after the first confirmatory run: refused
    (tmp_path / "preregistration.json").write_text(json.dumps({**first, "sha256": "f" * 64}))
    meta = claims.protocol(tmp_path, reg, _rows(seeds), ROOT, {reg.sha256: 3})
    assert meta["label"] == "exploratory" and "rules changed" in meta["label_reasons"][0]


def test_judges_that_do_not_read_the_registration_refuse_the_label(tmp_path, committed, monkeypatch):
    monkeypatch.setattr(claims, "WIRED", frozenset(committed.claims) - {"AREAL-1", "DDG-3"})
    meta = claims.protocol(tmp_path, committed, _rows(committed.seeds("async")), ROOT, {committed.sha256: 3})
    assert meta["label"] == "exploratory"
    assert meta["label_reasons"] == ["the judges of AREAL-1, DDG-3 do not read their pre-registered endpoint and "
                                     "estimator"]


def test_another_friction_preset_refuses_the_label(tmp_path, committed, monkeypatch):
    import testbed.frictions

    monkeypatch.setattr(testbed.frictions, "TOKEN_REVERSAL_PRESET", "G9")
    meta = claims.protocol(tmp_path, committed, _rows(committed.seeds("async")), ROOT, {committed.sha256: 3})
    assert meta["label"] == "exploratory"
    assert meta["label_reasons"] == ["the code's token-reversal preset is 'G9', the registered one 'F1'"]


def test_exploratory_seeds_refuse_the_label(tmp_path, committed):
    meta = claims.protocol(tmp_path, committed, _rows(range(15)), ROOT, {committed.sha256: 3})
    assert meta["label"] == "exploratory"
    assert any("outside the block" in w for w in meta["label_reasons"])
    assert any("appear in earlier records" in w for w in meta["label_reasons"])
    assert not (tmp_path / "preregistration.json").exists()


def test_run_records_without_the_registrations_stamp_refuse_the_label(tmp_path, committed):
    """Every confirmatory run record carries the stamp (`Context.protocol_stamp`, written into the records of the runs
    an invocation trains); a record without it, or with another registration's digest, keeps the report
    exploratory."""
    from figures import budgets
    from figures.common import Context, stamps

    reg = committed
    trained, reused, foreign = (tmp_path / f"{n}.csv" for n in ("trained", "reused", "foreign"))
    for rows in (trained, reused, foreign):
        rows.write_text("step\n1\n")
        rows.with_suffix(".json").write_text(json.dumps({"run_id": rows.stem}))
    foreign.with_suffix(".json").write_text(json.dumps({"preregistration": {"sha256": "e" * 64}}))
    assert Context(out=tmp_path, cache=tmp_path).protocol_stamp is None  # outside the confirmatory budget: none
    assert stamps([trained]) == {"none": 1}
    budgets.activate(budgets.confirmatory_budget(reg))
    try:
        stamp = Context(out=tmp_path, cache=tmp_path).protocol_stamp
    finally:
        budgets.activate(None)
    assert stamp["sha256"] == reg.sha256
    trained.with_suffix(".json").write_text(json.dumps({"run_id": "trained", "preregistration": stamp}))
    seeds = reg.seeds("async")
    ok = claims.protocol(tmp_path / "a", reg, _rows(seeds), ROOT, stamps([trained]))
    assert ok["label"] == "confirmatory" and ok["record_stamps"] == {reg.sha256: 1}
    for files, why in (([trained, reused], "1 unstamped"), ([trained, foreign], "1 stamped eeeeeeeeeeee")):
        meta = claims.protocol(tmp_path / "b", reg, _rows(seeds), ROOT, stamps(files))
        assert meta["label"] == "exploratory"
        assert meta["label_reasons"] == [f"run records without this pre-registration's stamp: {why}"]
    meta = claims.protocol(tmp_path / "c", reg, _rows(seeds), ROOT)
    assert meta["label"] == "exploratory" and "no run record's protocol stamp" in meta["label_reasons"][0]
    # the report reads the stamps the figures' evidence payloads recorded (the most any payload counts)
    assert claims.record_stamps({"a": {"stamps": {reg.sha256: 2}}, "b": {"stamps": {reg.sha256: 5, "none": 1}},
                                 "c": {}}) == {reg.sha256: 5, "none": 1}


def test_report_carries_the_design_edges_and_the_table_prints_it(tmp_path):
    rows = claims.write_report(tmp_path / "out", {}, True, "test", root=ROOT)
    data = json.loads((tmp_path / "out" / "claims.json").read_text())
    assert data["stamp"]["label"] == "exploratory" and data["stamp"]["preregistration"]["sha256"] == prereg.load().sha256
    by_id = {r["id"]: r for r in rows}
    for r in rows:  # every claim: endpoint, estimator kind, margins with their source
        pre = r["preregistered"]
        assert pre["endpoint"] and pre["kind"] in prereg.KINDS and pre["estimator"] in prereg.ESTIMATORS
        assert all(m["source"] in prereg.SOURCES for m in pre["margins"])
        assert isinstance(r["on_edge"], bool)
    assert by_id["GAC-2"]["preregistered"]["estimator"] == "mean+collapse"
    assert by_id["AREAL-1"]["beside"] == {"intel-xeon-avx512": json.loads(
        (ROOT / "results/cross_cpu/intel-xeon-avx512/claims.json").read_text())["claims"][10]["verdict"]}
    lines = table.verdict_table(data)
    assert lines[0].startswith("Report: exploratory; setting quick")
    real = " real model |" if data.get("llm") else ""
    assert lines[2] == f"| id | claim | paper | verdict |{real} intel-xeon-avx512 |"
    assert len(lines) == 4 + len(rows) and lines[4].startswith("| GAC-1 | ")
    assert f"**{by_id['GAC-1']['verdict']}**" in lines[4]
    assert table.verdict_table(data, header=False) == lines[2:]
    # the real model's column, from the report's llm rows
    with_llm = {**data, "llm": [{"id": "GAC-1", "real": "agree-ish"}]}
    lines = table.verdict_table(with_llm, header=False)
    assert lines[0] == "| id | claim | paper | verdict | real model | intel-xeon-avx512 |"
    assert "| agree-ish |" in lines[2] and lines[3].count("|  |") >= 1


def test_table_cli_errors_are_one_line(tmp_path, capsys):
    assert table.main([str(tmp_path / "none.json")]) == 2
    (tmp_path / "x.json").write_text("{}")
    assert table.main([str(tmp_path / "x.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(e.startswith("error: ") for e in err)


def test_confirmatory_budget_reads_the_registration_only():
    from figures import budgets

    reg = prereg.load()
    b = budgets.confirmatory_budget(reg)
    d = reg.section("designs")
    assert b.async_seeds == tuple(range(10000, 10000 + d["async"]["n0"]))
    assert b.all_seeds("async") == reg.seeds("async") and b.all_seeds("tr") == reg.seeds("tr")
    assert (b.async_design.n0, b.async_design.cap) == (d["async"]["n0"], d["async"]["cap"])
    assert b.tr_horizons == tuple(range(reg.section("ddg")["h_min"], reg.section("ddg")["h_max"] + 1))
    assert b.async_log == reg.section("phase")["async_log"] and b.async_steps == budgets.FULL.async_steps
    budgets.activate(b)
    try:
        assert budgets.budget(False) is b and budgets.budget(True) is budgets.QUICK
    finally:
        budgets.activate(None)
    assert budgets.budget(False) is budgets.FULL


def test_confirmatory_flag_refuses_quick(capsys):
    from figures.__main__ import main

    assert main(["all", "--confirmatory", "--quick"]) == 2
    assert "cannot be combined with --quick" in capsys.readouterr().err
