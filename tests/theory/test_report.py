"""`python -m theory report`: the table, its exit status and its errors."""

from __future__ import annotations

import pytest

from theory.__main__ import main
from theory.checks import Check
from theory.report import format_table, to_frame

pytestmark = pytest.mark.theory


def test_check_margin_and_pass():
    assert Check(1, "x", 1.0, 1.05, 0.1).margin == pytest.approx(0.05)
    assert not Check(1, "x", 1.0, 1.2, 0.1).passed
    assert Check(1, "bound", 1.0, 0.5, 0.0, "upper").passed
    assert not Check(1, "bound", 1.0, 1.5, 0.0, "upper").passed
    assert not Check(1, "nan", 1.0, float("nan"), 1.0).passed
    with pytest.raises(ValueError, match="comparison"):
        Check(1, "x", 1.0, 1.0, 0.1, "both")


def test_table_columns_and_notes():
    rows = [Check(4, "a", 0.0, 1e-9, 1e-6, note="a finding"), Check(5, "b", 1.0, 2.0, 0.5, "upper")]
    frame = to_frame(rows)
    assert list(frame["pass"]) == ["PASS", "FAIL"]
    text = format_table(frame)
    assert "a [1]" in text and "[1] a finding" in text


def test_report_prints_and_exits_zero(capsys):
    assert main(["report", "--items", "4", "5"]) == 0
    out = capsys.readouterr().out
    assert "predicted" in out and "tolerance" in out and "FAIL" not in out


def test_report_rejects_unknown_item(capsys):
    with pytest.raises(SystemExit) as err:
        main(["report", "--items", "11"])
    assert err.value.code == 2
    assert "allowed: 1, 2" in capsys.readouterr().err
