"""The claims report: every published claim, the paper's value, ours, and a verdict by a stated rule.

Verdicts are computed from the experiments' evidence (``<out>/data/*.json``) by the judges of the
claim records (figures/experiments/, figures/records.py) with the statistics of figures/stats.py,
never typed in. The allowed verdicts are `VERDICTS`:

* **reproduced**: every part of the claim holds by its test;
* **direction only**: the effect goes the way the paper says, significantly, but the claim's size
  (its minimum effect, or "matches") is not reached;
* **not reproduced**: a part fails by its test (the interval lies on the wrong side of the margin);
* **inconclusive**: the data cannot decide a part; the seeds that would (from the measured spread)
  are printed beside it;
* **not applicable**: the claim's precondition does not hold here (e.g. the base does not degrade),
  or the claim is about something the simulator does not measure.

`write_report` writes claims.md, claims.json and the self-contained page index.html (figures/publish.py)
from the same rows. Every "not reproduced" and "inconclusive" row carries a paragraph with three slots:
what we measured (from the evidence), the mechanism (from the claim's record, where this project found
or derived one), what would decide it (from the undecided or failing parts and the seeds they need).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from figures.common import by_experiment
from figures.experiments import all_claims
from figures.records import Claim, Judgement
from figures.stats import ALPHA, BETA, LEVEL, VERDICTS, Outcome, fmt_interval, fmt_margin

__all__ = ["VERDICTS", "evaluate", "judge", "write_report"]

NEGATIVE = ("not reproduced", "inconclusive")
SHARED_RULES = (
    f"Per-seed values, paired by seed (same seed = same initialisation and context stream). Every decision reads "
    f"the two-sided {LEVEL:.0%} Student-t interval of the mean (paired) difference, i.e. one-sided tests at "
    f"{ALPHA}. 'Matches': the whole interval inside the tolerance (TOST). 'Beats by delta': the whole interval above "
    f"delta; below delta it is 'direction only' if the interval excludes 0 on the claimed side, else 'not "
    f"reproduced'; an interval containing delta is 'inconclusive', with the seeds needed n* = min{{n >= 2: n >= "
    f"((t_{{1-{ALPHA},n-1}} + t_{{1-{BETA},n-1}}) s / m)^2}} (s the measured spread, m the distance of the mean from "
    f"the margin). Error ratios are compared on log error rates floored at half a test example. A claim is "
    f"reproduced only when all its parts hold (intersection-union test). Diverged runs count as chance level "
    f"(0.9 on MNIST, every sequence wrong on token reversal). Details: figures/stats.py.")


def judge(claim: Claim, evidence: dict[str, dict[str, Any]]) -> Judgement:
    """The claim's judgement of its experiment's evidence (empty evidence: the judge says so)."""
    return claim.judge(evidence.get(claim.experiment, {}))


def _part_row(o: Outcome) -> dict[str, Any]:
    return {**o.to_dict(), "shown": fmt_interval(o), "margin_shown": fmt_margin(o)}


def paragraph(claim: Claim, j: Judgement) -> dict[str, str]:
    """The three slots of a negative or inconclusive verdict, filled from the record and the evidence."""
    judged = [p for p in j.parts if p.status != "n/a"]
    measured = f"{j.ours}. " + "; ".join(
        f"{p.name}: {fmt_interval(p)} vs {fmt_margin(p) or 'its rule'} -> {p.status}" for p in judged)
    mechanism = claim.mechanism or "not established by this project; the curves are in the claim's figures."
    if j.verdict == "inconclusive":
        undecided = [p for p in judged if p.status == "undecided"]
        need = j.seeds_needed
        names = "; ".join(p.name + (f" ({p.detail})" if p.detail else "") for p in undecided) or j.note
        if need is not None:
            decide = (f"about {need} seeds per setting would decide it at the measured spread (n*, figures/stats.py): "
                      f"{names}")
        else:
            decide = f"more data: {names or 'the evidence is missing'} (the spread is not yet known)"
    else:
        failed = [p.name for p in judged if p.status == "fails"]
        decide = f"{'; '.join(failed)} fails by its test" + (f"; {claim.decide}" if claim.decide else "")
    return {"measured": measured, "mechanism": mechanism, "decide": decide}


def evaluate(evidence: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per claim from {experiment: evidence}."""
    rows = []
    for claim in all_claims():
        ev = evidence.get(claim.experiment, {})
        try:
            j = judge(claim, evidence)
        except KeyError as exc:  # the evidence lacks a key the judge needs (an older or partial data file)
            j = Judgement(f"incomplete data (missing {exc})", [], verdict="inconclusive", note=f"missing evidence {exc}")
        assert j.verdict in VERDICTS, j.verdict
        row = {
            "id": claim.id, "claim": claim.text, "source": f"arXiv {claim.source}", "paper_value": claim.paper_value,
            "ours": j.ours, "verdict": j.verdict, "setting": claim.setting, "grid": ev.get("grid", ""),
            "rule": claim.rule, "figures": list(claim.figures), "experiment": claim.experiment,
            "margins": [{"name": m.name, "value": m.value, "scale": m.scale, "shown": m.shown(),
                         "derivation": m.derivation} for m in claim.margins],
            "parts": [_part_row(p) for p in j.parts], "other_parts": [_part_row(p) for p in j.other_parts],
            "variants": dict(j.variants), "seeds_needed": j.seeds_needed, "note": j.note,
            "reason": "; ".join(f"{p.name}: {p.status}" for p in j.parts) or j.note,
        }
        if j.verdict in NEGATIVE:
            row["paragraph"] = paragraph(claim, j)
        rows.append(row)
    return rows


def write_report(out: Path, evidence: dict, quick: bool, command: str, missing_runs: int = 0,
                 total_runs: int | None = None) -> list[dict[str, Any]]:
    """claims.md, claims.json and index.html under ``out`` from the figures' evidence payloads
    ({figure: payload}, as `figures.common.read_evidence` returns them)."""
    from figures.publish import stamp, write_html, write_markdown

    out = Path(out)
    exp_evidence = by_experiment(evidence)
    rows = evaluate(exp_evidence)
    meta = stamp(out, command, quick)
    meta.update({"missing_runs": missing_runs, "total_runs": total_runs,
                 "provisional_regime": exp_evidence.get("async_grpo", {}).get("registered") is False})
    payload = {"setting": "quick" if quick else "full", "command": command, "verdicts": list(VERDICTS),
               "stamp": meta, "missing_runs": missing_runs, "total_runs": total_runs, "shared_rules": SHARED_RULES,
               "claims": rows}
    (out / "claims.json").write_text(json.dumps(payload, indent=1))
    write_markdown(out / "claims.md", payload)
    write_html(out / "index.html", payload, out)
    return rows
