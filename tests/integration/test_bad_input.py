"""Every category of bad input, table-driven (tests/integration/bad_inputs.py): exit 2, exactly one line
``error: ...`` on stderr naming the bad value and what is allowed, nothing on stdout, nothing written."""

from __future__ import annotations

import gzip
import os

import pytest

from figures.__main__ import main as figures_main
from testbed.cli import main
from tests.integration.bad_inputs import CASES, REPORTS, SWEEPS

pytestmark = pytest.mark.integration

IDX = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def materialise(arg: str, tmp) -> str:
    """Replace the placeholders of bad_inputs.py by real files under ``tmp``."""
    if "{file}" in arg:
        (tmp / "plain.txt").write_text("not a directory\n")
        arg = arg.replace("{file}", str(tmp / "plain.txt"))
    if "{gz}" in arg:
        data = tmp / "idx"
        data.mkdir(exist_ok=True)
        for name in IDX:
            (data / f"{name}.gz").write_bytes(b"\x1f\x8b\x08\x00corrupt" if "images" in name else gzip.compress(b"\0\0\x08\x01\0\0\0\0"))
        arg = arg.replace("{gz}", str(data))
    if arg.startswith("{sweep:"):
        name = arg[len("{sweep:"):-1]
        path = tmp / f"{name}.{'yaml' if name.startswith('yaml') else 'toml'}"
        path.write_text(SWEEPS[name])
        return str(path)
    if arg.startswith("{report:"):
        name = arg[len("{report:"):-1]
        (tmp / name).mkdir()
        (tmp / name / "summary.csv").write_bytes(REPORTS[name].encode("latin-1"))
        return str(tmp / name)
    return arg.replace("{tmp}", str(tmp))


def snapshot(root) -> set[str]:
    return {os.path.join(d, n) for d, dirs, files in os.walk(root) for n in dirs + files}


def invoke(argv: list[str], tmp) -> int:
    if argv[0] == "figures":
        return figures_main(argv[1:])
    if argv[0] in ("run", "sweep", "demo") and "--out" not in argv:
        argv = [*argv, "--out", str(tmp / "out")]
    return main(argv)


@pytest.mark.parametrize("category, argv, fragment", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, monkeypatch, category, argv, fragment):
    monkeypatch.chdir(tmp_path)
    argv = [materialise(a, tmp_path) for a in argv]
    before = snapshot(tmp_path)
    code = invoke(argv, tmp_path)
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert code == 2, captured
    assert len(err) == 1 and err[0].startswith("error: "), err
    assert fragment in err[0], err[0]
    assert captured.out == "" and "Traceback" not in captured.err
    assert snapshot(tmp_path) == before  # nothing written, no directory half-made


def test_cases_cover_every_category_with_distinct_inputs():
    categories = {c for c, _, _ in CASES}
    assert categories == {"type", "range", "syntax", "unknown", "consistency", "fit", "files"}
    assert len({tuple(a) for _, a, _ in CASES}) == len(CASES)  # no input counted twice
