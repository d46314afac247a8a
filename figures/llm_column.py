"""The real-LLM column: what SmolLM2-135M-Instruct shows for the claims it can speak to, beside the testbed.

Sources (read defensively: a file that is absent, unreadable or lacks a field gives "not measured" with
the reason, never an error):

* ``results/llm/fingerprint/<model>__<task>.json`` (`python -m llm_scale fingerprint`; schema in the
  project's fingerprint interface): ``cosine_by_minibatch`` [{m, mean, ci_low, ci_high, pairs}],
  ``noise_scale``, ``staleness`` [{lag, ess_seq, ess_token, ...}], ...
* ``results/llm/study/`` (`python -m llm_scale study`, the promotion study): any ``*.json`` holding a list
  of rows (top level, or under ``rows`` / ``results`` / ``table``) or any ``*.csv``; a row names its
  ``recipe``, its staleness (``max_lag``, ``eta``, ``staleness``, ``lag`` or ``delay``; 0 or "sync" =
  synchronous), optionally ``seed``, and a score (``accuracy``, ``reward``, ``eval_reward``,
  ``final_reward``, ``mean_reward``; or an error ``error`` / ``test_error``, turned into 1 - error). A
  file may also give per-claim verdicts directly (``{"claims": {"AREAL-1": {"verdict": ...}}}``).

Per claim (`LLM_CLAIMS`) the real model's verdict uses the testbed's rule where the data allow:

* GAC-1: the synchronous part at the minibatch size m closest to the testbed regime's (a cosine
  whose interval lies inside +-0.2 is "near orthogonal"); the staleness part is not in the fingerprint;
* VCPO-1: needs collapses in real-model runs with ESS logged before them; the fingerprint's ESS by lag
  is shown, the claim is "not measured" unless the study reports collapses;
* AREAL-1 / GAC-2: naive grpo's score at the largest lag vs sync (it must degrade by 2 points), and the
  method's score there vs grpo's at sync (within the tolerance factor on error rates); with one value
  per cell the comparison is of point values and says so.

Agreement: both verdicts positive (reproduced / direction only) or both negative (not reproduced) =
"agree"; one positive and one negative = "disagree"; otherwise "not measured" or "not decided" with the
reason.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from figures.records import RHO

LLM_CLAIMS = ("GAC-1", "VCPO-1", "AREAL-1", "GAC-2")
POSITIVE = ("reproduced", "direction only")
BAND = 0.2  # GAC-1's "near orthogonal" band (figures/experiments/async_grpo.py)
DEGRADE = 0.02
LAG_KEYS = ("max_lag", "eta", "staleness", "lag", "delay")
SCORE_KEYS = ("accuracy", "reward", "eval_reward", "final_reward", "mean_reward")
ERROR_KEYS = ("error", "test_error")
METHOD = {"AREAL-1": "decoupled_ppo", "GAC-2": "gac"}


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def fingerprints(root: Path) -> list[dict[str, Any]]:
    """Every readable real-model fingerprint, with its file name."""
    out = []
    for path in sorted((Path(root) / "results/llm/fingerprint").glob("*.json")):
        data = _load_json(path)
        if isinstance(data, dict):
            out.append({**data, "_file": str(path)})
    return out


def _lag(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, str):
        if v.strip().lower() in ("sync", "0", "none"):
            return 0.0
        for part in v.replace(",", ":").split(":"):
            try:
                return float(part)
            except ValueError:
                continue
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _score(row: dict[str, Any]) -> float | None:
    for k in SCORE_KEYS:
        if row.get(k) not in (None, ""):
            try:
                return float(row[k])
            except (TypeError, ValueError):
                return None
    for k in ERROR_KEYS:
        if row.get(k) not in (None, ""):
            try:
                return 1.0 - float(row[k])
            except (TypeError, ValueError):
                return None
    return None


def study(root: Path) -> tuple[list[dict[str, Any]], dict[str, str], list[str]]:
    """(rows {recipe, lag, seed, score}, per-claim verdicts given directly, files read)."""
    rows, given, files = [], {}, []
    base = Path(root) / "results/llm/study"
    if not base.is_dir():
        return rows, given, files
    raw: list[dict[str, Any]] = []
    for path in sorted(base.rglob("*.json")):
        data = _load_json(path)
        if data is None:
            continue
        files.append(str(path))
        if isinstance(data, dict):
            for cid, v in (data.get("claims") or {}).items():
                if isinstance(v, dict) and isinstance(v.get("verdict"), str):
                    given[str(cid)] = v["verdict"]
                elif isinstance(v, str):
                    given[str(cid)] = v
            for key in ("rows", "results", "table"):
                if isinstance(data.get(key), list):
                    raw += [r for r in data[key] if isinstance(r, dict)]
        elif isinstance(data, list):
            raw += [r for r in data if isinstance(r, dict)]
    for path in sorted(base.rglob("*.csv")):
        try:
            with open(path, newline="") as fh:
                raw += list(csv.DictReader(fh))
            files.append(str(path))
        except (OSError, csv.Error):
            continue
    for r in raw:
        lag = next((_lag(r[k]) for k in LAG_KEYS if k in r), None)
        score = _score(r)
        if r.get("recipe") and lag is not None and score is not None and math.isfinite(score):
            rows.append({"recipe": str(r["recipe"]), "lag": lag, "seed": r.get("seed"), "score": score})
    return rows, given, files


def _gac1(fps: list[dict[str, Any]], m_testbed: float | None) -> tuple[str, str]:
    best = None
    for fp in fps:
        for c in fp.get("cosine_by_minibatch") or []:
            try:
                m, lo, hi, mean = float(c["m"]), float(c["ci_low"]), float(c["ci_high"]), float(c["mean"])
            except (KeyError, TypeError, ValueError):
                continue
            dist = abs(math.log(m / m_testbed)) if m_testbed and m > 0 else 0.0
            if best is None or dist < best[0]:
                best = (dist, m, lo, hi, mean, fp.get("model", "?"), fp.get("task", "?"), fp.get("noise_scale"))
    if best is None:
        return "not measured", "no real-model fingerprint with cosine_by_minibatch under results/llm/fingerprint"
    _, m, lo, hi, mean, model, task, bn = best
    status = "holds" if lo > -BAND and hi < BAND else "fails" if (lo > BAND or hi < -BAND) else "undecided"
    return f"sync part {status}", (f"{model} on {task}: sync cosine at m = {m:g} (testbed m = {m_testbed or '?'}) "
                                   f"{mean:+.3f} [{lo:+.3f}, {hi:+.3f}], B_noise {bn}; the staleness part is not in "
                                   "the fingerprint, so the two are compared on the synchronous part only")


def _vcpo1(fps: list[dict[str, Any]], rows: list[dict[str, Any]]) -> tuple[str, str]:
    ess = []
    for fp in fps:
        for s in fp.get("staleness") or []:
            if isinstance(s, dict) and s.get("lag") is not None and s.get("ess_seq") is not None:
                ess.append(f"lag {s['lag']}: ESS/N {float(s['ess_seq']):.2f}")
    shown = ("; fingerprint ESS by lag: " + ", ".join(ess[:6])) if ess else ""
    return "not measured", "no collapse in the real-model runs to test precursors against" + shown


def _rescue(rows: list[dict[str, Any]], method: str) -> tuple[str, str]:
    def cell(recipe: str, lag: float) -> np.ndarray:
        return np.asarray([r["score"] for r in rows if r["recipe"] == recipe and r["lag"] == lag], dtype=float)

    lags = sorted({r["lag"] for r in rows if r["recipe"] == "grpo"})
    if 0.0 not in lags or len(lags) < 2:
        return "not measured", "the promotion study has no grpo rows at sync and at a stale level"
    stale = lags[-1]
    g0, gs, ms = cell("grpo", 0.0), cell("grpo", stale), cell(method, stale)
    if not len(ms):
        return "not measured", f"the promotion study has no {method} rows at lag {stale:g}"
    n = min(len(g0), len(gs), len(ms))
    drop = float(g0.mean() - gs.mean())
    err0, errm = 1.0 - float(g0.mean()), 1.0 - float(ms.mean())
    ratio = errm / err0 if err0 > 0 else float("inf")
    shown = (f"score (1 - error) grpo sync {g0.mean():.3f}, grpo lag {stale:g} {gs.mean():.3f}, {method} lag "
             f"{stale:g} {ms.mean():.3f} (n={n}{', point values: no spread' if n < 2 else ''})")
    if drop < DEGRADE:
        return "not testable", shown + ": grpo does not degrade by 2 points"
    if ratio <= 1 + RHO:
        return "reproduced", shown + f": {method}'s error within a factor {1 + RHO:.3g} of grpo's at sync"
    if errm < 1.0 - float(gs.mean()):
        return "direction only", shown + f": {method} better than grpo at that lag, not as good as sync"
    return "not reproduced", shown


def agreement(testbed: str, real: str) -> str:
    if testbed.startswith("sync part") or real.startswith("sync part"):  # GAC-1: part against part
        a, b = testbed.removeprefix("sync part ").split(" ")[0], real.removeprefix("sync part ")
        if not testbed.startswith("sync part") or not real.startswith("sync part"):
            return "not measured"
        if "undecided" in (a, b):
            return "not decided"
        return "agree" if a == b else "disagree"
    if real in ("not measured", "not testable"):
        return "not measured"
    if testbed in ("not testable", "not applicable"):
        return "not measured"
    if testbed == "inconclusive" or real == "inconclusive":
        return "not decided"
    if (testbed in POSITIVE) == (real in POSITIVE):
        return "agree"
    return "disagree"


def llm_rows(root: Path, testbed: dict[str, str], m_testbed: float | None = None) -> list[dict[str, str]]:
    """One row per claim the real model can speak to: testbed verdict, real-model verdict, what it read,
    agreement (module docstring). ``testbed``: claim id -> verdict; for GAC-1, "sync part <status> (...)"
    (the status of its synchronous part) so that part is compared with the real model's."""
    root = Path(root)
    fps = fingerprints(root)
    rows, given, files = study(root)
    out = []
    for cid in LLM_CLAIMS:
        if cid in given:
            real, why = given[cid], "verdict given by the promotion study (" + ", ".join(files) + ")"
        elif cid == "GAC-1":
            real, why = _gac1(fps, m_testbed)
        elif cid == "VCPO-1":
            real, why = _vcpo1(fps, rows)
        elif not rows:
            real, why = "not measured", ("no promotion-study results under results/llm/study" if not files else
                                         "no readable rows (recipe, staleness, score) in " + ", ".join(files))
        else:
            real, why = _rescue(rows, METHOD[cid])
        tb = testbed.get(cid, "not measured")
        ag = agreement(tb, real)
        if ag == "not measured" and real not in ("not measured", "not testable"):
            why += f"; the testbed's verdict is '{tb}'"
        out.append({"id": cid, "testbed": tb, "real": real, "agreement": ag, "evidence": why})
    return out


def markdown(rows: list[dict[str, str]]) -> list[str]:
    """The section of claims.md: one table, testbed verdict vs the real model."""
    lines = ["", "## Does the testbed predict the LLM? (SmolLM2-135M-Instruct)", "",
             "| claim | testbed | real model | agreement | what the real model shows |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['id']} | {r['testbed']} | {r['real']} | **{r['agreement']}** | {r['evidence']} |" for r in rows]
    return lines
