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


@pytest.mark.parametrize(
    ("where", "message"),
    [("missing/dir/out.csv", "directory"), ("", "is a directory"), ("/proc/version", "is not writable"),
     ("/proc/new.csv", "is not writable")],
)  # fmt: skip
def test_bad_csv_path_is_one_line_and_exit_2_before_any_check(tmp_path, capsys, where, message):
    path = where if where.startswith("/") else str(tmp_path / where) if where else str(tmp_path)
    assert main(["report", "--items", "4", "--csv", path]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --csv") and message in lines[0]
    assert "predicted" not in captured.out  # refused before the checks ran


def test_csv_is_written_whole(tmp_path, capsys):
    path = tmp_path / "t.csv"
    assert main(["report", "--items", "4", "--csv", str(path)]) == 0
    text = path.read_text()
    assert text.startswith("item,") and len(text.splitlines()) >= 2 and not list(tmp_path.glob(".*tmp"))


def test_the_table_fits_a_terminal_and_a_log_gets_no_progress_frames(capsys):
    """Long result names are shortened (the CSV keeps them whole) and notes wrapped, so no line is wider than a
    terminal; with stderr not a terminal (a log file) no progress-bar frames are written."""
    long = "the delayed-SGD recurrence's stationary variance against its closed form " * 3
    rows = [Check(4, long, 0.0, 1e-9, 1e-6, note="x " * 200), Check(5, "b", 1.0, 2.0, 0.5, "upper")]
    frame = to_frame(rows)
    assert frame["result"][0] == long
    text = format_table(frame)
    assert max(map(len, text.splitlines())) <= 140 and "[1] x x" in text
    assert main(["report", "--items", "4"]) == 0
    captured = capsys.readouterr()
    assert max(map(len, captured.out.splitlines())) <= 140
    assert "theory checks" not in captured.err
