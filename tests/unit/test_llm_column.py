"""The real-LLM column of the claims report (figures/llm_column.py) on synthetic result files."""

from __future__ import annotations

import json

from figures.llm_column import agreement, llm_rows, markdown


def _fingerprint(tmp_path, cos):
    d = tmp_path / "results/llm/fingerprint"
    d.mkdir(parents=True)
    (d / "smollm2__arith.json").write_text(json.dumps({
        "model": "smollm2", "task": "arith", "noise_scale": 120.0,
        "cosine_by_minibatch": [{"m": 8, "mean": -0.01, "ci_low": -0.1, "ci_high": 0.08, "pairs": 20},
                                {"m": 64, "mean": cos, "ci_low": cos - 0.05, "ci_high": cos + 0.05, "pairs": 20}],
        "staleness": [{"lag": 0, "ess_seq": 1.0}, {"lag": 4, "ess_seq": 0.7}]}))


def _study(tmp_path, rows, name="study.json"):
    d = tmp_path / "results/llm/study"
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text(json.dumps({"rows": rows}))


def test_nothing_measured_says_so():
    rows = llm_rows(__import__("pathlib").Path("/nonexistent"), {"AREAL-1": "reproduced"})
    assert [r["agreement"] for r in rows] == ["not measured"] * 4
    assert "no promotion-study results" in rows[2]["evidence"]


def test_gac1_compares_the_sync_part_at_the_matched_minibatch_size(tmp_path):
    _fingerprint(tmp_path, 0.45)
    tb = {"GAC-1": "sync part fails (claim: not reproduced)"}
    row = llm_rows(tmp_path, tb, m_testbed=50.0)[0]
    assert row["real"] == "sync part fails" and row["agreement"] == "agree"  # m = 64 is the closest to 50
    near = llm_rows(tmp_path, tb, m_testbed=8.0)[0]
    assert near["real"] == "sync part holds" and near["agreement"] == "disagree"
    assert "ESS/N 0.70" in llm_rows(tmp_path, tb)[1]["evidence"]


def test_promotion_study_rows_are_judged_like_the_testbed(tmp_path):
    rows = [{"recipe": "grpo", "max_lag": 0, "accuracy": 0.60, "seed": 0},
            {"recipe": "grpo", "max_lag": 4, "accuracy": 0.40, "seed": 0},
            {"recipe": "decoupled_ppo", "max_lag": 4, "accuracy": 0.59, "seed": 0},
            {"recipe": "gac", "max_lag": "4", "error": 0.65, "seed": 0},
            {"recipe": "junk"}, "not a row"]
    _study(tmp_path, rows)
    out = {r["id"]: r for r in llm_rows(tmp_path, {"AREAL-1": "reproduced", "GAC-2": "reproduced"})}
    assert out["AREAL-1"]["real"] == "reproduced" and out["AREAL-1"]["agreement"] == "agree"
    assert "no spread" in out["AREAL-1"]["evidence"]  # one value per cell: point values, said so
    assert out["GAC-2"]["real"] == "not reproduced" and out["GAC-2"]["agreement"] == "disagree"
    (tmp_path / "results/llm/study/broken.json").write_text("{not json")
    assert llm_rows(tmp_path, {})[2]["real"] == "reproduced"  # an unreadable file is skipped
    assert any("| AREAL-1 |" in ln for ln in markdown(llm_rows(tmp_path, {})))


def test_agreement_table():
    assert agreement("reproduced", "direction only") == "agree"
    assert agreement("not reproduced", "reproduced") == "disagree"
    assert agreement("inconclusive", "reproduced") == "not decided"
    assert agreement("not testable", "reproduced") == "not measured"
    assert agreement("reproduced", "not measured") == "not measured"
