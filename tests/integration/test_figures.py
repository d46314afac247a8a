"""Smoke test of ``python -m figures all --quick`` plus the numbers the figures and verdicts rest on.

The quick run trains every figure's runs at a handful of steps (one seed) and checks that every
figure exists as PNG and PDF with its caption, that the claims report holds every claim id of
ALGORITHMS.md with an allowed verdict, and that a second invocation retrains nothing (the results
store is the cache). The theory adapter and the verdict rules are checked on numbers.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from figures import FIGURES
from figures import __main__ as cli
from figures import theory_bridge as tb
from figures.claims import CLAIMS, RULES, VERDICTS

pytestmark = pytest.mark.integration

CLAIM_IDS = ("GAC-1", "GAC-2", "VCPO-1", "VCPO-2", "VCPO-3", "DG-1", "DDG-1", "DDG-2", "DDG-3", "DDG-4",
             "AREAL-1", "AREAL-2")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    code = cli.main(["all", "--quick", "--out", str(out), "--cache", str(out / "runs"), "--no-progress",
                     "--workers", "2"])
    assert code == 0
    return out


def test_every_figure_is_written_with_caption(quick_run):
    for name in FIGURES:
        png, pdf, cap = (quick_run / f"{name}{ext}" for ext in (".png", ".pdf", ".caption.txt"))
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert pdf.read_bytes()[:5] == b"%PDF-", name
        assert png.stat().st_size > 10_000 and pdf.stat().st_size > 5_000, name
        text = cap.read_text()
        assert text.startswith("Tests "), text
        assert f"made by: python -m figures {name} --quick" in text
        data = json.loads((quick_run / "data" / f"{name}.json").read_text())
        assert data["figure"] == name and data["quick"] is True and data["evidence"]


def test_claims_report_holds_every_claim_with_a_verdict(quick_run):
    report = json.loads((quick_run / "claims.json").read_text())
    assert report["setting"] == "quick"
    rows = {r["id"]: r for r in report["claims"]}
    assert set(rows) == set(CLAIM_IDS) == set(CLAIMS)
    for cid, row in rows.items():
        assert row["verdict"] in VERDICTS, (cid, row["verdict"])
        assert row["rule"] and row["ours"] and row["paper_value"]
    assert rows["AREAL-2"]["verdict"] == "not applicable"
    md = (quick_run / "claims.md").read_text()
    for cid in CLAIM_IDS:
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {cid} |"))
        assert f"**{rows[cid]['verdict']}**" in line


def test_rerun_uses_the_cache(quick_run, monkeypatch):
    import testbed.sweep

    def refuse(*a, **k):
        raise AssertionError("a cached figure was retrained")

    monkeypatch.setattr(testbed.sweep, "run_sweep", refuse)
    before = sorted((quick_run / "runs" / "runs").glob("*.json"))
    assert cli.main(["mnist_delay", "token_horizon", "--quick", "--out", str(quick_run), "--cache",
                     str(quick_run / "runs"), "--no-progress"]) == 0
    assert sorted((quick_run / "runs" / "runs").glob("*.json")) == before
    assert cli.main(["claims", "--out", str(quick_run)]) == 0


def test_cli_rejects_unknown_figure(capsys):
    assert cli.main(["no_such_figure"]) == 2
    assert "unknown figure" in capsys.readouterr().err
    assert cli.main(["list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in FIGURES)


# -- numbers behind the theory figures -------------------------------------------------------------------


def test_delayed_sgd_closed_forms():
    # stability edge 2 sin(pi / (2 (2 tau + 1))): 1.0, 0.618, 0.347, 0.185 for tau = 1, 2, 4, 8
    for tau, edge in ((0, 2.0), (1, 1.0), (2, 0.6180), (4, 0.3473), (8, 0.1845)):
        assert tb.a_crit(tau) == pytest.approx(edge, abs=1e-4)
    # no delay: lag-1 autocorrelation of applied gradients is exactly -a/2
    for a in (0.05, 0.3, 1.2):
        assert tb.grad_autocorr(a, 0) == pytest.approx(-a / 2, abs=1e-9)
    # with delay it is positive, grows with a / a_crit and with tau at fixed a
    assert 0 < tb.grad_autocorr(0.2, 1) < tb.grad_autocorr(0.5, 1)
    assert tb.grad_autocorr(0.1, 2) < tb.grad_autocorr(0.1, 4) < tb.grad_autocorr(0.1, 8)
    assert math.isnan(tb.grad_autocorr(1.01 * tb.a_crit(2), 2))
    # the closed form agrees with a simulation of the recurrence
    rng = np.random.default_rng(1)
    assert tb.simulate_autocorr(0.5, 1, 4000, rng) == pytest.approx(tb.grad_autocorr(0.5, 1), abs=0.02)


def test_contamination_model():
    from figures.theory_bridge import _contamination_exact

    for delta in (0.3, 1e-2, 1e-4):
        res = tb.contamination(delta, 0.2)
        own = _contamination_exact(delta, 0.2, 5, 1.0, (1, 100))
        for m in tb.CONTAMINATION_METHODS:
            # the figures' own exact computation agrees with theory.delight (the real stabilizers)
            assert own[m]["cos"] == pytest.approx(res[m]["cos"], abs=1e-5)
            assert own[m]["share"] == pytest.approx(res[m]["share"], rel=1e-4)
            assert -1 <= res[m]["align_1"] <= res[m]["align_100"] <= abs(res[m]["cos"]) + 1e-12
        # importance sampling against the true (mixture) sampler is unbiased: cosine 1
        assert res["mix_is"]["cos"] == pytest.approx(1.0, abs=1e-9)
    # without contamination pg is exactly on-policy: cosine 1
    assert tb.contamination(0.1, 0.0)["pg"]["cos"] == pytest.approx(1.0, abs=1e-6)
    # pg's true-gradient share falls like delta: 1e-2 -> 1e-4 divides it by about 100
    r = tb.contamination(1e-2, 0.1)["pg"]["share"] / tb.contamination(1e-4, 0.1)["pg"]["share"]
    assert 50 < r < 200


# -- verdict rules on synthetic evidence -----------------------------------------------------------------


def _ddg1(dg, is_, pg):
    fe = {f"{r}|fixed:1000": v for r, v in (("dg", dg), ("is", is_), ("pg", pg))}
    return {"mnist_delay": {"evidence": {"DDG-1": {"largest_delay": "fixed:1000", "final_error": fe}}}}


def test_rules_follow_the_numbers():
    assert RULES["DDG-1"](_ddg1([0.02, 0.03, 0.025], [0.08, 0.09, 0.085], [0.8, 0.85, 0.9]))[0] == "reproduced"
    assert RULES["DDG-1"](_ddg1([0.09, 0.08, 0.085], [0.02, 0.03, 0.025], [0.1, 0.12, 0.11]))[0] == "not reproduced"
    # overlapping seeds are not a significant difference
    assert RULES["DDG-1"](_ddg1([0.02, 0.10, 0.05], [0.03, 0.09, 0.06], [0.1, 0.1, 0.1]))[0] == "not reproduced"
    assert RULES["AREAL-2"]({})[0] == "not applicable"
    collapse = {"vcpo_traces": {"evidence": {"VCPO-1": {
        "events": [{"recipe": "is", "delay": "fixed:1000", "seed": s, "step": 500, "ess_drop": True,
                    "grad_spike": True, "enough_history": True} for s in range(3)],
        "quiet": [{"ess_drop": False, "grad_spike": False, "enough_history": True}]}}}}
    assert RULES["VCPO-1"](collapse)[0] == "reproduced"
    assert RULES["VCPO-1"]({"vcpo_traces": {"evidence": {"VCPO-1": {"events": [], "quiet": []}}}})[0] == "not applicable"
