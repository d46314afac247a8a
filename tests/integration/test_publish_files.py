"""The claims report's files: index.html embeds each figure once with its caption once; claims.md and index.html
are written whole or not at all (a full disk leaves the previous files and one error line)."""

from __future__ import annotations

import errno
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from figures.__main__ import main

PAPER = Path(__file__).parents[2] / "results" / "paper"


@pytest.fixture
def report_dir(tmp_path):
    """A copy of the committed full run's evidence and figures, from which `figures claims` rebuilds the report."""
    if not (PAPER / "data").is_dir():
        pytest.skip("results/paper holds no evidence")
    out = tmp_path / "paper"
    shutil.copytree(PAPER / "data", out / "data")
    for path in [*PAPER.glob("*.png"), *PAPER.glob("*.caption.txt"), PAPER / "timings.json"]:
        if path.is_file():
            shutil.copy(path, out / path.name)
    assert main(["claims", "--out", str(out)]) == 0
    return out


def test_each_figure_is_embedded_once_with_its_caption_once(report_dir):
    page = (report_dir / "index.html").read_text()
    embedded = Counter(re.findall(r"<figure id='fig-([^']+)'>", page))
    cited = set(re.findall(r"\[([a-z_0-9]+)\]\(\1\.png\)", (report_dir / "claims.md").read_text()))
    assert embedded and max(embedded.values()) == 1
    assert set(embedded) == {n for n in cited if (report_dir / f"{n}.png").is_file()}
    assert page.count("data:image/png;base64,") == len(embedded)
    for name in embedded:
        caption = (report_dir / f"{name}.caption.txt").read_text().strip()
        words = caption[:60].replace("'", "&#x27;")
        assert page.count(words) == 1, name  # once, as HTML text under the figure
        assert re.search(rf"<figure id='fig-{name}'><h3 class='figtitle'>Figure {name}: [A-Za-z_0-9-]+ ", page), name
        assert re.search(rf"<img alt='Figure {name}, the evidence for claim [A-Za-z_0-9-]+ ", page), name
    toc = page[page.index("<nav id='toc'>"):page.index("</nav>")]
    assert set(re.findall(r"href='#fig-([^']+)'", toc)) == set(embedded)  # the contents reach every figure
    repeats = sum(n - 1 for n in Counter(f for f in re.findall(r"\[([a-z_0-9]+)\]\(\1\.png\)",
                                                              (report_dir / "claims.md").read_text())).values())
    assert page.count("class='seefig'") == repeats  # a later claim citing a shown figure links back to it


def test_full_disk_during_figures_claims_leaves_the_old_files_and_one_line(report_dir, monkeypatch, capsys):
    before = {name: (report_dir / name).read_bytes() for name in ("claims.md", "index.html")}
    capsys.readouterr()
    real_fdopen = os.fdopen

    def full_disk(fd, *args, **kwargs):
        handle = real_fdopen(fd, *args, **kwargs)
        real_write = handle.write

        def write(text):
            real_write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        handle.write = write
        return handle

    monkeypatch.setattr(os, "fdopen", full_disk)
    assert main(["claims", "--out", str(report_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "No space left on device" in err[0]
    for name, data in before.items():
        assert (report_dir / name).read_bytes() == data, name
    assert not [p.name for p in report_dir.iterdir() if p.name.endswith(".tmp")]


def test_cut_short_evidence_file_is_one_line_not_a_smaller_report(report_dir, capsys):
    evidence = sorted((report_dir / "data").glob("*.json"))[0]
    before = (report_dir / "claims.md").read_bytes()
    text = evidence.read_text()
    evidence.write_text(text[: len(text) // 2])
    capsys.readouterr()
    assert main(["claims", "--out", str(report_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"evidence file '{evidence}' is damaged" in err[0] and f"python -m figures {evidence.stem}" in err[0]
    assert (report_dir / "claims.md").read_bytes() == before
