"""A partial report from the runs already cached: `python -m figures all --cached-only` skips every figure none of
whose runs is cached, and the claims those figures decide read "no evidence" instead of failing the report."""

from __future__ import annotations

import json

import pytest

from figures import FIGURES, module
from figures.__main__ import main

pytestmark = pytest.mark.integration


def test_cached_only_on_an_empty_cache_skips_the_figures_that_need_runs(tmp_path, capsys):
    cache, out = tmp_path / "cache", tmp_path / "out"
    cache.mkdir()
    assert main(["all", "--quick", "--cached-only", "--no-progress", "--out", str(out), "--cache", str(cache)]) == 0
    printed = capsys.readouterr().out
    needing = [f for f in FIGURES if module(f).configs(True)]
    assert needing  # the simulator's figures need runs; the theory figures need none
    for name in FIGURES:
        skipped = f"{name}: skipped, none of its" in printed
        assert skipped == (name in needing), name
        assert (out / "data" / f"{name}.json").is_file() == (name not in needing), name
    claims = json.loads((out / "claims.json").read_text())["claims"]
    without = [c for c in claims if all(f in needing for f in c["figures"]) and c["verdict"] != "not applicable"]
    assert without and all(c["verdict"] == "inconclusive" and "no evidence" in c["reason"] for c in without)
