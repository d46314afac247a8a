"""The claims report: every published claim, the paper's value, ours, and a verdict by a stated rule.

Verdicts are computed from the experiments' evidence (``<out>/data/*.json``) by the judges of the
claim records (figures/experiments/, figures/records.py) with the statistics of testbed/util/stats.py,
never typed in. The allowed verdicts are `VERDICTS`:

* **reproduced**: every part of the claim holds by its test;
* **direction only**: the effect goes the way the paper says, significantly, but the claim's size
  (its minimum effect, or "matches") is not reached;
* **not reproduced**: a part fails by its test (the interval lies on the wrong side of the margin);
* **inconclusive**: the data cannot decide a part; the seeds that would (from the measured spread)
  are printed beside it;
* **not testable**: a precondition of the claim's record failed or could not be checked from the data
  (the base is unhealthy or its health was not recorded; the base does not show the mechanism the
  method corrects; every method is on the floor; the rule has no room); the report names the
  precondition and what would make the claim testable, and shows the parts' verdict beside it;
* **not applicable**: the claim is about something the simulator does not measure (by rule).

Seeds: each claim is judged at the stop of its experiment's sequential design (testbed/util/sequential.py):
the report gives per claim the seeds used, the look, the interval level and why it stopped, and each look
before the stop replayed on its seeds (`figures.records.look_history`: its verdict and the seeds its spread
asked for), checked to lead to the recorded stop. Evidence written before the design existed (no
``sequential`` record) is judged as the design's first look.
The statistic (20% trimmed mean, Yuen's interval; rates with exact intervals) and the designs were
fixed in testbed/util/stats.py, testbed/util/sequential.py and figures/budgets.py before the runs they judge.

The real-LLM column (figures/llm_column/) sets each testbed verdict the real model can speak to
beside SmolLM2-135M-Instruct's, from results/llm/ when present.

`write_report` writes claims.md, claims.json and the self-contained page index.html (figures/publish.py)
from the same rows. Every "not reproduced" and "inconclusive" row carries a paragraph with three slots:
what we measured (from the evidence), the mechanism (from the claim's record, where this project found
or derived one), what would decide it (from the undecided or failing parts and the seeds they need).
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from figures import prereg
from figures.budgets import DESIGN_OF, budget
from figures.common import arr
from figures.confirm import near_edge
from figures.evidence import Evidence, label
from figures.experiments import all_claims, experiment
from figures.prereg import CLAIM_KEYS, Prereg
from figures.records import Claim, Judgement, assess, history_consistent, look_history
from testbed.util.files import atomic_write_text
from testbed.util.stats import ALPHA, BETA, LEVEL, MAX_SEEDS, TRIM, VERDICTS, Outcome, fmt, fmt_interval, fmt_margin

__all__ = ["VERDICTS", "evaluate", "judge", "write_report"]

NEGATIVE = ("not reproduced", "inconclusive", "not testable")
# Claims whose judges read their pre-registered endpoint, estimator and margins (figures/preregistration.toml,
# figures/confirm.py; DDG-1 is registered at its paper's endpoint, which its judge reads). A report judging any
# other seeded claim cannot be confirmatory (`protocol`; docs/claims_protocol.md, "What is not yet wired").
WIRED: frozenset[str] = frozenset({"GAC-1", "GAC-2", "AREAL-1", "VCPO-1", "VCPO-2", "VCPO-3", "DG-1", "DDG-1", "DDG-2",
                              "DDG-3"})
SHARED_RULES = (
    f"Per-seed values, paired by seed (same seed = same initialisation and context stream). Every decision reads "
    f"the interval of the {TRIM:.0%}-trimmed mean of the (paired) differences (Yuen's interval; fixed before the "
    f"runs, so that one seed that lost a class cannot swing a verdict; the plain mean's status and each compared "
    f"cell's lost-class / stalled / diverged rate with its exact interval are shown beside it), two-sided "
    f"{LEVEL:.0%} in a fixed design, i.e. one-sided tests at {ALPHA}; in the sequential designs each look reads the "
    f"stricter level its alpha spending allots (testbed/util/sequential.py), and a claim stops at the first look that "
    f"decides it or at the cap. A claim whose precondition fails or cannot be checked is 'not testable'. 'Matches': the whole interval inside the tolerance (TOST). 'Beats by delta': the whole interval above "
    f"delta; below delta it is 'direction only' if the interval excludes 0 on the claimed side, else 'not "
    f"reproduced'; an interval containing delta is 'inconclusive', with the seeds needed n* = min{{n >= 2: n >= "
    f"((t_{{1-{ALPHA},n-1}} + t_{{1-{BETA},n-1}}) s / m)^2}} (s the measured spread, m the distance of the mean from "
    f"the margin). Error ratios are compared on log error rates floored at half a test example. A claim is "
    f"reproduced only when all its parts hold (intersection-union test). Diverged runs count as chance level "
    f"(0.9 on MNIST, every sequence wrong on token reversal). Details: testbed/util/stats.py.")


def by_experiment(payloads: dict[str, dict[str, Any]]) -> dict[str, Evidence]:
    """{experiment: its typed evidence} from the figures' payloads (`figures.common.read_evidence`; several figures
    may carry one experiment). A payload that does not fit the experiment's record is one clear error."""
    from testbed.util.errors import UsageError

    merged: dict[str, Evidence] = {}
    for figure, payload in payloads.items():
        for name, data in (payload.get("evidence") or {}).items():
            try:
                merged[name] = experiment(name).Evidence.from_json(data)
            except (ValueError, TypeError) as exc:
                raise UsageError(f"the {name!r} evidence in {figure}'s data file does not fit this code's record "
                                 f"({exc}); remake it with python -m figures {figure}") from None
    return merged


def evidence_of(evidence: dict[str, Evidence], name: str) -> Evidence:
    """The experiment's evidence, or its empty record when it has not run."""
    return evidence.get(name) or experiment(name).Evidence()


def judge(claim: Claim, evidence: dict[str, Evidence], quick: bool = False) -> Judgement:
    """The claim's judgement of its experiment's evidence at its sequential stop (empty evidence: the judge says
    so). Evidence without a stop record (written before the designs) is judged as its design's first look."""
    ev = evidence_of(evidence, claim.experiment)
    kind = DESIGN_OF.get(claim.experiment)
    if ev and kind and claim.id not in ev.sequential:
        design = getattr(budget(quick), f"{kind}_design")
        n = min(len(ev.seeds), design.n0) or None
        stop = {"n": n, "look": 0, "level": design.level(0), "looks": list(design.looks),
                "reason": "evidence from before the sequential design: judged as its first look"}
        ev = dataclasses.replace(ev, sequential={**ev.sequential, claim.id: stop})
    return assess(claim, ev)


def _part_row(o: Outcome) -> dict[str, Any]:
    return {**o.to_dict(), "shown": fmt_interval(o), "margin_shown": fmt_margin(o), "edge": near_edge(o)}


def registered(claim_id: str, reg: Prereg | None) -> dict[str, Any]:
    """The claim's pre-registered design (figures/preregistration.toml): kind, endpoint, estimator, rule, margins
    with their sources, preconditions and design; {} when the file does not list it."""
    c = (reg.claims if reg else {}).get(claim_id)
    if not c:
        return {}
    return {k: c[k] for k in CLAIM_KEYS} | {"margins": [dict(m) for m in c["margins"]]}


def cross_cpu(root: Path) -> dict[str, dict[str, str]]:
    """{report: {claim id: verdict}} of the committed reports under results/cross_cpu/ (beside each verdict)."""
    out = {}
    for f in sorted((root / "results" / "cross_cpu").glob("*/claims.json")):
        try:
            out[f.parent.name] = {str(r["id"]): str(r["verdict"]) for r in json.loads(f.read_text())["claims"]}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def paragraph(claim: Claim, j: Judgement) -> dict[str, str]:
    """The three slots of a negative or inconclusive verdict, filled from the record and the evidence."""
    judged = [p for p in j.parts if p.status != "n/a"]
    measured = f"{j.ours}. " + "; ".join(
        f"{p.name}: {fmt_interval(p)} vs {fmt_margin(p) or 'its rule'} -> {p.status}" for p in judged)
    mechanism = claim.mechanism or "not established by this project; the curves are in the claim's figures."
    if j.verdict == "not testable":
        blocked = [p for p in j.preconditions if p["status"] != "met"]
        measured = ("precondition " + "; ".join(f"'{p['name']}' {p['status']}: {p['measured']}" for p in blocked)
                    + f". The parts alone would say '{j.verdict_if_testable}': " + measured)
        decide = "; ".join(f"{p['name']}: {p['remedy']}" for p in blocked) or j.note
        return {"measured": measured, "mechanism": mechanism, "decide": decide}
    if j.verdict == "inconclusive":
        undecided = [p for p in judged if p.status == "undecided"]
        need = j.seeds_needed
        names = "; ".join(p.name + (f" ({p.detail})" if p.detail else "") for p in undecided) or j.note
        if j.settled:
            decide = f"not more seeds, which cannot decide it: {j.settled}" + (f"; {claim.decide}" if claim.decide
                                                                               else "")
        elif need is not None:
            decide = (f"about {need} seeds per setting would decide it at the measured spread (n*, testbed/util/stats.py): "
                      f"{names}")
        else:
            decide = f"more data: {names or 'the evidence is missing'} (the spread is not yet known)"
    else:
        failed = [p.name for p in judged if p.status == "fails"]
        decide = f"{'; '.join(failed)} fails by its test" + (f"; {claim.decide}" if claim.decide else "")
    return {"measured": measured, "mechanism": mechanism, "decide": decide}


def per_seed(claim: Claim, ev: Evidence, j: Judgement) -> dict[str, Any]:
    """The compared cells' per-seed values (`Claim.seed_values`; the seeds the claim was judged on; None = not
    run); {} for a claim whose verdict reads no seeded cells."""
    if claim.cells is None:
        return {}
    name, metric = claim.seed_values
    if not ev:
        return {"seeds": [], "metric": metric, "cells": {}}
    n = j.stop.get("n") or len(ev.seeds)
    seeds = list(ev.seeds)[:n]
    cells = {}
    for key in claim.cells(ev):
        v = (getattr(ev, name, None) or {}).get(key)
        if v is not None:
            cells[label(key)] = [None if x is None or not math.isfinite(x) else round(float(x), 5) for x in arr(v)[:n]]
    return {"seeds": seeds, "metric": metric, "cells": cells}


def stop_text(j: Judgement) -> str:
    s = j.stop
    if not s:
        return "fixed evidence (no sequential design)"
    return (f"{s.get('n')} seeds, look {int(s.get('look', 0)) + 1} of {len(s.get('looks', [0]))} (looks at "
            f"{', '.join(map(str, s.get('looks', [])))}), {float(s.get('level', LEVEL)):.2%} intervals: "
            f"{s.get('reason', '')}")


def looks_text(history: list[dict[str, Any]], cap: int | None, consistent: bool) -> str:
    """A staged claim's looks in words: seeds, verdict and the seeds its spread asked for (n*, testbed/util/stats.py),
    marked where n* lies beyond the design's cap; "" for a claim judged at one look."""
    if len(history) < 2:
        return ""
    parts = []
    for h in history:
        need = h["seeds_needed"]
        shown = "" if need is None else (f", n* > {MAX_SEEDS:,}" if need > MAX_SEEDS else f", n* {need}") + (
            f" (beyond the cap of {cap})" if cap is not None and need > cap else "")
        settled = ", settled: more seeds cannot decide it" if h.get("settled") else ""
        parts.append(f"look {h['look'] + 1} ({h['n']} seeds): {h['verdict']}{shown}{settled}")
    text = "per look: " + "; ".join(parts)
    if any(h.get("settled") for h in history[:-1]):
        text += " (the design stops at the first settled look; these data went on past it)"
    return text if consistent else text + " (this history does not lead to the recorded stop: inconsistent record)"


def evaluate(evidence: dict[str, Evidence], quick: bool = False, reg: Prereg | None = None,
             beside: dict[str, dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """One row per claim from {experiment: evidence}; ``reg``: the pre-registration each row carries its design
    from; ``beside``: other reports' verdicts ({report: {claim id: verdict}}) set beside each row's."""
    rows = []
    for claim in all_claims():
        ev = evidence_of(evidence, claim.experiment)
        try:
            j = judge(claim, evidence, quick)
            history = look_history(claim, ev) if ev else []
        except KeyError as exc:  # the evidence lacks a key the judge needs (an older or partial data file)
            j = Judgement(f"incomplete data (missing {exc})", [], verdict="inconclusive", note=f"missing evidence {exc}")
            history = []
        assert j.verdict in VERDICTS, j.verdict
        row = {
            "id": claim.id, "claim": claim.text, "source": f"arXiv {claim.source}", "paper_value": claim.paper_value,
            "ours": j.ours, "verdict": j.verdict, "setting": claim.setting, "grid": ev.grid,
            "rule": claim.rule, "figures": list(claim.figures), "experiment": claim.experiment,
            "margins": [{"name": m.name, "value": m.value, "scale": m.scale, "shown": m.shown(),
                         "derivation": m.derivation} for m in claim.margins],
            "parts": [_part_row(p) for p in j.parts], "other_parts": [_part_row(p) for p in j.other_parts],
            "variants": dict(j.variants), "seeds_needed": j.seeds_needed, "note": j.note,
            "reason": "; ".join(f"{p.name}: {p.status}" for p in j.parts) or j.note,
            "preconditions": list(j.preconditions), "verdict_if_testable": j.verdict_if_testable,
            "stop": dict(j.stop), "seeds_used": j.stop.get("n"), "stop_reason": j.stop.get("reason", ""),
            "stop_shown": stop_text(j), "per_seed": per_seed(claim, ev, j),
            "looks": history, "looks_consistent": history_consistent(history, j.verdict),
            "sensitivity": [x.line() for x in claim.sensitivity],
            "preregistered": registered(claim.id, reg),
            "on_edge": any(near_edge(x) for x in j.parts),
            "beside": {name: v.get(claim.id) for name, v in (beside or {}).items()},
        }
        if j.verdict in NEGATIVE:
            row["paragraph"] = paragraph(claim, j)
        rows.append(row)
    return rows


def testability_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """claims.md's section on preconditions, seeds and stops, and per-seed values."""
    lines = ["", "## Preconditions, seeds and stopping", "",
             "| id | verdict | preconditions | seeds and stop |", "| --- | --- | --- | --- |"]
    for r in rows:
        pre = "; ".join(f"{p['name']}: **{p['status']}** ({p['measured']})"
                        + (f" -> to make it testable: {p['remedy']}" if p["status"] != "met" else "")
                        for p in r["preconditions"]) or "none"
        v = r["verdict"] + (f" (parts alone: {r['verdict_if_testable']})" if r.get("verdict_if_testable") else "")
        looks = r.get("stop", {}).get("looks") or [None]
        per_look = looks_text(r.get("looks") or [], looks[-1], r.get("looks_consistent", True))
        lines.append(f"| {r['id']} | {v} | {pre} | {r['stop_shown']}{'; ' + per_look if per_look else ''} |")
    lines += ["", "## Per-seed values (the seeds each claim was judged on)", ""]
    for r in rows:
        ps = r.get("per_seed") or {}
        if not ps:
            why = "nothing here to run" if r["verdict"] == "not applicable" else r["setting"]
            lines.append(f"- **{r['id']}**: none; its verdict reads no seeded runs ({why})")
            continue
        if not ps["cells"]:
            lines.append(f"- **{r['id']}** ({ps['metric']}): no run of the judged seeds has such a value")
            continue
        lines.append(f"- **{r['id']}** ({ps['metric']}, seeds {', '.join(map(str, ps['seeds']))}): " + "; ".join(
            f"{k}: [{', '.join('-' if x is None else f'{x:.4g}' for x in v)}] ({fmt(arr(v), 3)})"
            for k, v in ps["cells"].items()))
    return lines


def write_report(out: Path, evidence: dict, quick: bool, command: str, missing_runs: int = 0,
                 total_runs: int | None = None, root: Path | None = None,
                 runs_s: float | None = None) -> list[dict[str, Any]]:
    """claims.md, claims.json and index.html under ``out`` from the figures' evidence payloads
    ({figure: payload}, as `figures.common.read_evidence` returns them); the real-LLM column from ``root``
    (default: the working directory)/results/llm; ``runs_s`` the runs' summed training time for the stamp."""
    from figures import FIGURES, publish
    from figures.budgets import budget
    from figures.llm_column import llm_rows
    from figures.llm_column import markdown as llm_markdown

    out = Path(out)
    exp_evidence = by_experiment(evidence)
    active = budget(quick)
    reg = prereg.registration(active.registration or None)  # a later registration judges only its claims
    rows = [r for r in evaluate(exp_evidence, quick, reg, cross_cpu(Path(root or ".")))
            if not active.claims or r["id"] in active.claims]
    grpo = evidence_of(exp_evidence, "async_grpo")
    m = grpo.minibatch
    llm = llm_rows(Path(root or "."), _testbed_column(rows), m)
    made = [f for f in FIGURES if f in evidence] + sorted(set(evidence) - set(FIGURES))
    meta = publish.stamp(out, command, quick, runs_s, figures=made,
                         machines={f: evidence[f].get("machines") for f in made})
    meta.update({"missing_runs": missing_runs, "total_runs": total_runs,
                 "provisional_regime": bool(grpo) and grpo.registered is False})
    meta.update(protocol(out, reg, rows, Path(root or "."), record_stamps(evidence)))
    payload = {"setting": "quick" if quick else "full", "command": command, "verdicts": list(VERDICTS),
               "stamp": meta, "missing_runs": missing_runs, "total_runs": total_runs, "shared_rules": SHARED_RULES,
               "claims": rows, "llm": llm}
    atomic_write_text(out / "claims.json", json.dumps(payload, indent=1))
    extra = testability_markdown(rows) + llm_markdown(llm, Path(root or "."))
    publish.write_markdown(out / "claims.md", payload, extra)
    publish.write_html(out / "index.html", payload, out, extra)
    return rows


def record_stamps(evidence: dict) -> dict[str, int]:
    """The protocol stamps of the run records behind the figures' evidence ({digest or "none": records}, the most
    any figure's payload counts; `figures.common.stamps`); {} when no payload records them."""
    out: dict[str, int] = {}
    for payload in evidence.values():
        for k, n in ((payload or {}).get("stamps") or {}).items():
            out[k] = max(out.get(k, 0), int(n))
    return out


def protocol(out: Path, reg: Prereg, rows: list[dict[str, Any]], root: Path,
             stamps: dict[str, int] | None = None) -> dict[str, Any]:
    """The report's protocol stamp: the pre-registration's digest, commit and seed block, and its label,
    "confirmatory" only when `figures.prereg.label` allows it and every run record read carries the registration's
    stamp (``stamps``: `record_stamps`; else "exploratory" with the reasons). The first confirmatory report under
    ``out`` records the digest it was judged under (``out``/preregistration.json); every later one is compared
    with it."""
    first_file = out / "preregistration.json"
    try:
        first = json.loads(first_file.read_text()).get("sha256")
    except (OSError, ValueError, AttributeError):
        first = None
    seeds = {int(s) for r in rows for s in (r.get("per_seed") or {}).get("seeds", [])}
    st = prereg.stamp_of(reg)
    from testbed.frictions import TOKEN_REVERSAL_PRESET

    unwired = [cid for cid, c in reg.claims.items() if c["design"] != "none" and cid not in WIRED]
    label, why = prereg.label(reg, st["commit"], first, seeds, prereg.used_seeds(root), unwired)
    if reg.section("ddg").get("friction_preset") != TOKEN_REVERSAL_PRESET:
        label, why = "exploratory", [*why, f"the code's token-reversal preset is {TOKEN_REVERSAL_PRESET!r}, the "
                                           f"registered one {reg.section('ddg').get('friction_preset')!r}"]
    other = {k: n for k, n in (stamps or {}).items() if k != reg.sha256}
    if not stamps:
        label, why = "exploratory", [*why, "no run record's protocol stamp is recorded in the evidence"]
    elif other:
        label, why = "exploratory", [*why, "run records without this pre-registration's stamp: " + ", ".join(
            f"{n} {'unstamped' if k == 'none' else 'stamped ' + k[:12]}" for k, n in sorted(other.items()))]
    if label == "confirmatory" and first is None:
        atomic_write_text(first_file, json.dumps(st, indent=1))
    return {"preregistration": st, "label": label, "label_reasons": why, "record_stamps": stamps or {},
            "seed_block": st["seed_block"], "judged_seeds": [min(seeds), max(seeds)] if seeds else None}


def _testbed_column(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Claim id -> verdict; GAC-1 -> the status of its synchronous part (what the real model's fingerprint
    measures), and "GAC-1 claim" -> its whole verdict (what the real model's trainer runs measure)."""
    col = {r["id"]: r["verdict"] for r in rows}
    for r in rows:
        if r["id"] == "GAC-1":
            col["GAC-1 claim"] = r["verdict"]
            sync = [p["status"] for p in r["parts"] if "sync cosine" in p["name"]]
            if sync:
                col["GAC-1"] = f"sync part {sync[0]} (claim: {r['verdict']})"
    return col
