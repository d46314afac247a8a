"""The registered design's code paths end to end at the quick setting's size: every experiment computes its
confirmatory evidence (learning curves, the calibrated spike rule, the exact-gradient curves, the unit grid) and
the report judges it, stamps the protocol and labels itself exploratory (the quick seeds are exploratory)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from figures import __main__ as cli
from figures import budgets

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_registered_design_runs_end_to_end_at_quick_size(tmp_path):
    budgets.activate(replace(budgets.QUICK, name="confirmatory"))
    try:
        code = cli.main(["all", "--out", str(tmp_path / "out"), "--cache", str(tmp_path / "runs"), "--no-progress",
                         "--workers", "1"])
    finally:
        budgets.activate(None)
    assert code == 0
    data = json.loads((tmp_path / "out" / "claims.json").read_text())
    assert data["stamp"]["label"] == "exploratory"
    assert any("outside the block" in w for w in data["stamp"]["label_reasons"])
    rows = {r["id"]: r for r in data["claims"]}
    assert all(rows[c]["preregistered"] for c in rows)
    ev = json.loads((tmp_path / "out" / "data" / "async_grpo.json").read_text())["evidence"]["async_grpo"]
    assert ev["confirmatory"] and ev["curves"]["grpo|sync"] and ev["versions"]
    md = json.loads((tmp_path / "out" / "data" / "mnist_delay.json").read_text())["evidence"]["mnist_delay"]
    assert md["confirmatory"] and md["spike"]["window"] == 20 and md["curves"]["pg|sync"]
    ms = json.loads((tmp_path / "out" / "data" / "mnist_samples.json").read_text())["evidence"]["mnist_samples"]
    assert ms["confirmatory"] and len(ms["curves"]["ce"]) == len(ms["seeds"])
