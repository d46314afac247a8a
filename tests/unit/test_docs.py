"""The front door and the guides: README.md and docs/*.md hold no commit id, date or UTC clock time (those live
in results files), README stays a short guide whose commands are the ones CI runs, its generated tables equal
their sources, and its own-stabilizer example is a working stabilizer."""

from __future__ import annotations

import configparser
import importlib.util
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

HEX = re.compile(r"(?<![0-9A-Za-z_])[0-9a-f]{7,40}(?![0-9A-Za-z_])")
# words before a hex token that make it a commit: "commit 5f56d9b", "at `a568879`", "sha: ...", "rev ..."
COMMITISH = re.compile(r"(commit|commits|sha|sha1|revision|rev|tree|HEAD|@)\W{0,3}(\w+\W{1,3}){0,2}$", re.I)
DATE = re.compile(r"(?<!\d)(19|20)\d{2}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])(?!\d)")
CLOCK_UTC = re.compile(r"(?<!\d)\d{1,2}:\d{2}(:\d{2})?(\s*(-|to)\s*\d{1,2}:\d{2}(:\d{2})?)?\s*(UTC|GMT|Z)\b"
                       r"|T\d{2}:\d{2}(:\d{2})?(\.\d+)?(Z|[+-]\d{2}:?\d{2})")


def commits() -> list[str]:
    """Every commit of the repository (empty outside a git checkout)."""
    if shutil.which("git") is None:
        return []
    out = subprocess.run(["git", "rev-list", "--all"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.split() if out.returncode == 0 else []


def commit_ids(text: str, known: list[str]) -> list[str]:
    """Hex tokens of 7-40 characters that are a commit of this repository or read as one from their context."""
    found = []
    for m in HEX.finditer(text):
        token = m.group(0)
        before = text[max(0, m.start() - 40) : m.start()]
        if any(h.startswith(token) for h in known) or (COMMITISH.search(before) and re.search(r"\d", token)):
            found.append(token)
    return found


def timestamps(text: str) -> list[str]:
    return [m.group(0) for m in DATE.finditer(text)] + [m.group(0) for m in CLOCK_UTC.finditer(text)]


@pytest.fixture(scope="module")
def known_commits() -> list[str]:
    return commits()


def test_the_checks_see_what_they_are_for(known_commits):
    assert commit_ids("made at commit `5f56d9b` on the EPYC", []) == ["5f56d9b"]
    assert commit_ids("the run of 5f56d9b37364", ["5f56d9b37364aa"]) == ["5f56d9b37364"]
    assert commit_ids('alphabet = "0123456789=", a run id 6373307046e6', []) == []
    assert commit_ids("commit deadbeefcafe", []) == []  # no digit: an English-looking token is not read as one
    assert timestamps("2026-11-28 11:27-13:24 UTC, started 2026-11-28T11:27:10+00:00, 10:52-12:11 UTC") == [
        "2026-11-28", "2026-11-28", "11:27-13:24 UTC", "T11:27:10+00:00", "10:52-12:11 UTC"]
    assert timestamps("1:57:00 wall, 2,130 s, arXiv 2603.20521, lr 1e-5") == []
    if known_commits:
        head = known_commits[0]
        assert commit_ids(f"see {head[:7]} and {head[:12]}", known_commits) == [head[:7], head[:12]]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_commit_id_or_timestamp_in_readme_or_docs(page, known_commits):
    text = page.read_text()
    assert commit_ids(text, known_commits) == [], f"{page.name}: commit ids belong in results files"
    assert timestamps(text) == [], f"{page.name}: dates and UTC times belong in results files"


def test_readme_is_a_short_guide():
    assert len(README.read_text().splitlines()) <= 200


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_readme_opening_commands_are_the_ones_ci_and_tox_run():
    first, second = _bash_blocks(README.read_text())[:2]
    m = re.fullmatch(r'pip install (torch==\S+) && pip install -e "\.\[([a-z,]+)\]" && python -m testbed demo --out runs/demo',
                     first)
    assert m, first
    torch_pin, extras = m.group(1), m.group(2)
    assert second == "pytest"

    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in ci if line and not line.startswith("#")]
    assert f"python -m pip install --quiet {torch_pin}" in commands
    assert f'python -m pip install --quiet -e ".[{extras}]"' in commands
    assert commands[-1] == second  # the last thing CI does is README's test command

    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    assert tox["testenv"]["commands_pre"].strip() == f"python -m pip install {torch_pin}"
    assert set(tox["testenv"]["extras"].split(",")) == set(extras.split(","))
    assert tox["testenv:tests"]["commands"].strip() == f"{second} {{posargs}}"


def _tables_module() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "tools" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_tables_equal_their_sources():
    tables = _tables_module()
    generated = tables.tables()
    assert set(generated) == set(tables.PAGES)
    for name, table in generated.items():
        text = tables.PAGES[name].read_text()
        assert tables.fill(text, name, table) == text, f"run: python tools/readme_tables.py ({name})"
    assert tables.main(["--check"]) == 0


def test_readme_verdict_table_has_one_row_per_claim_with_its_verdicts():
    import json

    tables = _tables_module()
    claims = json.loads(tables.CLAIMS.read_text())
    lines = tables.tables()["verdicts"].splitlines()
    assert lines[0].startswith("| id | claim | paper | verdict | real model")  # no report line: it names a commit
    rows = lines[2:]
    real = {r["id"]: r["real"] for r in claims["llm"]}
    assert len(rows) == len(claims["claims"]) > 0 and real
    for row, claim in zip(rows, claims["claims"], strict=True):
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        assert cells[0] == claim["id"] and cells[3].startswith(f"**{claim['verdict']}**")
        assert cells[4] == real.get(claim["id"], "")


def test_wall_table_sums_to_the_recorded_total():
    tables = _tables_module()
    timings = {"cmd": {"wall_s": {"a": 30.0, "b": 90.0, "_total": 120.0, "_cpu_s": 200.0}}}
    assert tables.wall_table(timings, "cmd").splitlines()[2:] == [
        "| a | 30 | 25.0% |", "| b | 90 | 75.0% |", "| **total** | 120 (0:02:00) | 100.0% |",
        "| CPU time, all workers | 200 | |"]


def test_fill_refuses_a_page_without_markers():
    with pytest.raises(ValueError, match="verdicts:begin"):
        _tables_module().fill("no markers here", "verdicts", "| x |")


@pytest.fixture
def own_stabilizer():
    from testbed.stabilizers import SURROGATES

    block = README.read_text().split("<!-- own-stabilizer-example -->", 1)[1]
    source = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    module = types.ModuleType("my_stabilizers")
    sys.modules["my_stabilizers"] = module
    try:
        exec(compile(source, "my_stabilizers.py", "exec"), module.__dict__)
        yield module
    finally:
        SURROGATES.pop("capped_is", None)
        sys.modules.pop("my_stabilizers", None)


def test_readme_own_stabilizer_is_the_library_tis(own_stabilizer):
    from testbed.stabilizers import PolicyTerms, build

    g = torch.Generator().manual_seed(0)
    behavior = torch.randn(6, 5, generator=g) - 1.0
    logp = (behavior + torch.randn(6, 5, generator=g)).requires_grad_(True)
    adv = torch.randn(6, 5, generator=g)
    mask = torch.rand(6, 5, generator=g) > 0.2
    terms = PolicyTerms(logp, behavior, adv, mask)
    ratio = torch.exp(logp - behavior).detach()
    assert ((ratio > 2) & mask).any() and ((ratio < 2) & mask).any()  # the cap binds on some tokens, not all

    for agg in ("token-mean", "seq-mean-token-sum"):
        ours, lib = build("capped_is(c=2)").loss(terms, agg=agg), build("tis(c=2)").loss(terms, agg=agg)
        (g_ours,) = torch.autograd.grad(ours.loss, logp)
        (g_lib,) = torch.autograd.grad(lib.loss, logp)
        torch.testing.assert_close(ours.loss, lib.loss, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(g_ours, g_lib, rtol=1e-6, atol=1e-7)
    uncapped = build("is").loss(terms).loss
    assert not torch.allclose(build("capped_is(c=2)").loss(terms).loss, uncapped)
