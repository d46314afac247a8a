"""The shared utilities (testbed/util): one atomic write, one provenance reader, one progress display, one
UsageError, each used by the testbed, theory, figures and llm_scale alike."""

from __future__ import annotations

import csv
import io
import os
import subprocess

import pandas as pd
import pytest

from testbed.util import errors, provenance
from testbed.util.files import atomic_open, atomic_write_frame, atomic_write_text, file_mode
from testbed.util.progress import Progress

# -- atomic writes ------------------------------------------------------------------------------------------------


def test_atomic_open_writes_whole_or_leaves_the_old_file(tmp_path):
    path = tmp_path / "sub" / "rows.csv"
    with atomic_open(path, "w", newline="") as fh:  # the csv module's own line ends pass through unchanged
        csv.writer(fh).writerows([["a", "b"], [1, 2]])
    assert path.read_bytes() == b"a,b\r\n1,2\r\n"
    assert path.stat().st_mode & 0o777 == file_mode()
    with pytest.raises(RuntimeError), atomic_open(path, "wb") as fh:
        fh.write(b"partial")
        raise RuntimeError("killed mid-write")
    assert path.read_bytes() == b"a,b\r\n1,2\r\n" and sorted(p.name for p in path.parent.iterdir()) == ["rows.csv"]


def test_atomic_write_frame_writes_csv_without_the_index(tmp_path):
    df = pd.DataFrame({"x": [1, 2], "y": [0.5, float("nan")]}, index=[7, 9])
    atomic_write_frame(df, tmp_path / "f.csv")
    assert (tmp_path / "f.csv").read_text() == "x,y\n1,0.5\n2,\n"
    atomic_write_text(tmp_path / "f.csv", "replaced\n")
    assert (tmp_path / "f.csv").read_text() == "replaced\n"


# -- provenance ---------------------------------------------------------------------------------------------------


@pytest.fixture
def repo(tmp_path, monkeypatch):
    if provenance.git("--version") is None:
        pytest.skip("git is not installed")
    for key, value in {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                       "GIT_COMMITTER_EMAIL": "t@t", "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(tmp_path)}.items():
        monkeypatch.setenv(key, value)
    root = tmp_path / "repo"
    (root / "results").mkdir(parents=True)
    (root / "code.py").write_text("x = 1\n")
    (root / "results" / "r.json").write_text("{}\n")
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "one"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)
    return root


def test_source_marks_changed_tracked_files_outside_the_ignored_prefixes(repo):
    head = provenance.commit(cwd=repo)
    assert head is not None and len(head) == 40 and provenance.commit(12, cwd=repo) == head[:12]
    assert provenance.source("-dirty", cwd=repo) == head[:12]
    (repo / "untracked.txt").write_text("not a change of the code\n")
    (repo / "results" / "r.json").write_text('{"new": 1}\n')
    assert provenance.source("-dirty", cwd=repo) == head[:12] + "-dirty"
    assert provenance.source("+changes", cwd=repo, ignore=("results/",)) == head[:12]
    (repo / "code.py").write_text("x = 2\n")
    assert provenance.changes(repo, ignore=("results/",)) == ["code.py"]
    assert provenance.source("+changes", cwd=repo, ignore=("results/",)) == head[:12] + "+changes"


def test_file_commit_is_none_for_a_changed_file_and_outside_a_checkout(repo, tmp_path):
    head = provenance.commit(cwd=repo)
    assert provenance.file_commit(repo / "code.py") == head
    (repo / "code.py").write_text("x = 3\n")
    assert provenance.file_commit(repo / "code.py") is None
    (tmp_path / "alone").mkdir()
    assert provenance.git("rev-parse", "HEAD", cwd=tmp_path / "alone") is None
    assert provenance.commit(cwd=tmp_path / "alone") is None and provenance.source("-dirty", cwd=tmp_path / "alone") is None


def test_machine_is_computed_once_and_names_the_cpu():
    m = provenance.machine()
    assert m is provenance.machine() and m["cpu"] == provenance.cpu_model() and m["cpu"]
    assert set(m) == {"cpu", "cpu_capability", "torch", "blas", "python", "os"}


# -- progress -----------------------------------------------------------------------------------------------------


def test_progress_with_tenths_and_a_custom_line():
    stream = io.StringIO()
    bar = Progress(20, desc="train", unit="step", initial=0, stream=stream, interval=3600, tenths=True,
                   line=lambda n, total, elapsed, info: f"step {n}/{total} reward {info['r']:.1f}")
    for step in range(1, 21):
        bar.update_to(step, {"r": step / 10})
    bar.close()
    lines = stream.getvalue().splitlines()
    assert [int(ln.split()[1].split("/")[0]) for ln in lines] == list(range(2, 21, 2))  # each tenth, once
    assert lines[-1] == "step 20/20 reward 2.0"


def test_progress_shows_the_last_count_at_close_and_nothing_when_disabled():
    stream, quiet = io.StringIO(), io.StringIO()
    bar = Progress(25, initial=5, stream=stream, interval=3600, tenths=True, line=lambda n, t, e, i: f"{n}/{t}")
    for _ in range(4):
        bar.update()
    bar.close()  # stopped early at 9, between tenths (25 // 10 = 2 per tenth): the last count is still shown
    assert stream.getvalue().splitlines() == ["6/25", "8/25", "9/25"]
    off = Progress(3, stream=quiet, enabled=False)
    off.update_to(3)
    off.close()
    assert quiet.getvalue() == ""


# -- the one usage error ------------------------------------------------------------------------------------------


def test_one_usage_error_for_every_cli(capsys):
    from testbed import usage

    def bad() -> int:
        raise errors.UsageError("--steps must be >= 1,\n got 0")

    assert usage.UsageError is errors.UsageError and issubclass(errors.UsageError, ValueError)
    assert usage.guarded(bad) == errors.EXIT_USAGE == 2
    assert capsys.readouterr().err == "error: --steps must be >= 1,; got 0\n"
    assert errors.one_line("a\n\n b \n") == "a; b"


def test_llm_scale_raises_the_shared_usage_error():
    import ast
    from pathlib import Path

    tree = ast.parse((Path(__file__).resolve().parents[2] / "llm_scale" / "config.py").read_text())
    assert not [n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "UsageError"]
    assert any(isinstance(n, ast.ImportFrom) and n.module == "testbed.util.errors" and
               [a.name for a in n.names] == ["UsageError"] for n in ast.walk(tree))
    assert os.path.basename(errors.__file__) == "errors.py"


def test_a_script_s_bad_command_line_is_one_line_and_exit_2(capsys):
    """`testbed.util.arguments.CommandLine`: argparse's SystemExit(2), with one ``error:`` line and no usage block."""
    import pytest

    from testbed.util.arguments import CommandLine

    p = CommandLine(prog="python -m x")
    p.add_argument("--workers", type=int, default=1)
    with pytest.raises(SystemExit) as stop:
        p.parse_args(["--workers", "x"])
    assert stop.value.code == 2 and capsys.readouterr().err == "error: --workers: invalid int value: 'x'\n"
    assert p.parse_args(["--workers", "3"]).workers == 3
