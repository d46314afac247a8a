"""The record of a claim: what the paper says, how we test it, and the judgement of the evidence.

One `Claim` per published claim, defined beside the configs and the evidence function of the
experiment that tests it (figures/experiments/, bsuite style: an experiment is its configs plus
their scoring; the figure modules only draw). A record holds the claim's text, source and paper value
(docs/ALGORITHMS.md, "Published claims"), the tolerances and minimum effects with their derivations
(`Margin`, fixed before any run), the rule in words, the judge (evidence -> `Judgement`, built from
testbed/util/stats.py), the figures that show it, and, where theory already explains a failure, the
mechanism. Verdicts: testbed/util/stats.py `VERDICTS`.

Testability. A record lists its preconditions (`Precondition`): what the setting must show before the
claim can be judged on it at all (the base is healthy; the base shows the mechanism the method corrects;
some method leaves the floor; the rule has room). Each is checked from the evidence and is ``met``,
``failed`` or ``unknown`` (the data needed to check it is missing, e.g. health columns a run did not
log). A claim with a precondition not met is "not testable", with the failed precondition and what
would make it testable, whatever its parts say (they are still computed and shown).

Seeds. Each claim is judged under its experiment's sequential design (testbed/util/sequential.py): at the
look where it stopped, on the seeds it had then, with that look's interval level (`assess`).

Shared margins (`RESOLUTION`): where a claim says "matches" or "beats" without a number of its own,
the size that decides is the resolution of the one comparison in these papers that gives both the
numbers and the size of its evaluation (VCPO, arXiv 2602.17616: MATH-500 accuracy 72.0 sync vs 71.6
at lag 10, 500 problems). A 500-problem accuracy near 72% has a binomial standard error of
sqrt(0.72 x 0.28 / 500) = 2.0 points; the difference of two such evaluations has a 90% half-width of
1.645 x sqrt(2) x 2.0 = 4.67 points, which is 4.67 / 28.0 = 16.7% of the error rate (100 - 72.0). A
difference the paper's own evaluation could not resolve cannot be what it claims, so: "matches" =
error rates within a factor 1.167 of each other; "beats" / "degrades" without a number = error rates
differing by more than that factor (tested on log error rates, testbed/util/stats.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from figures.evidence import Cell, Evidence, label
from testbed.util.stats import TRIM, VERDICTS, Outcome, combine, max_needed, rate, using_level

PRECONDITION_STATUSES = ("met", "failed", "unknown")

RHO = 1.645 * math.sqrt(2.0) * math.sqrt(0.72 * 0.28 / 500) / 0.28  # 0.1668
RESOLUTION_DERIVATION = (
    "no number in the claim: the papers' resolution. VCPO's MATH-500 comparison (72.0 sync vs 71.6, 500 "
    "problems) resolves a difference of 1.645 x sqrt(2) x sqrt(0.72 x 0.28 / 500) = 4.67 accuracy points at "
    "90%, i.e. 16.7% of the 28.0% error rate; a smaller difference in error rates is 'the same' by the papers' "
    "own precision (figures/records.py)")


@dataclass(frozen=True)
class Margin:
    """A tolerance (equivalence) or minimum effect (superiority), on a scale, with its derivation."""

    name: str
    value: float
    scale: str  # "diff" (units of the quantity) or "log" (a ratio: value = log of the factor)
    derivation: str

    def shown(self) -> str:
        if self.scale == "log":
            return f"factor {math.exp(self.value):.3g}"
        return f"{self.value:.4g}"


def resolution(name: str) -> Margin:
    """The shared "matches" tolerance / "beats" minimum effect: error rates within a factor 1 + RHO."""
    return Margin(name, math.log1p(RHO), "log", RESOLUTION_DERIVATION)


@dataclass
class Judgement:
    """A judge's output: the verdict (from the parts unless given), our values in words, the parts, and
    per-variant verdicts (e.g. GAC-1 per base)."""

    ours: str
    parts: list[Outcome]
    verdict: str = ""
    variants: dict[str, str] = field(default_factory=dict)
    note: str = ""
    other_parts: list[Outcome] = field(default_factory=list)  # shown in the report, not part of the verdict
    preconditions: list[dict[str, str]] = field(default_factory=list)  # `Precondition.check` results
    verdict_if_testable: str = ""  # the parts' verdict, where a precondition made the claim "not testable"
    stop: dict[str, Any] = field(default_factory=dict)  # the sequential design's stop: seeds, look, level, reason
    # why no later look can change an "inconclusive" verdict (more seeds cannot decide it), else empty: a
    # staged design stops adding seeds to such a claim (figures/staging.py)
    settled: str = ""

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict = combine(self.parts)
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def seeds_needed(self) -> int | None:
        return max_needed(self.parts)


@dataclass(frozen=True)
class Precondition:
    """What the setting must show for a claim to be testable there, checked from the evidence.

    ``check(evidence) -> (status, measured)``: status in `PRECONDITION_STATUSES`, ``measured`` the numbers it
    read, in words. ``remedy``: what would make the claim testable when it is not met."""

    name: str
    check: Callable[[Evidence], tuple[str, str]]
    remedy: str

    def evaluate(self, ev: Evidence) -> dict[str, str]:
        try:
            status, measured = self.check(ev)
        except KeyError as exc:
            status, measured = "unknown", f"the evidence lacks {exc}"
        if status not in PRECONDITION_STATUSES:
            raise ValueError(f"precondition status must be one of {PRECONDITION_STATUSES}, got {status!r}")
        return {"name": self.name, "status": status, "measured": measured, "remedy": self.remedy}


@dataclass(frozen=True)
class Sensitivity:
    """Where a free parameter the verdict hinges on is varied: a committed table (``table``, a path in the
    repository, made by the commands written in it) and what it shows per setting (``shows``)."""

    parameter: str
    table: str
    shows: str

    def line(self) -> str:
        return f"{self.parameter}: {self.table} ({self.shows})"


@dataclass(frozen=True)
class Claim:
    """One published claim and how this project tests it (module docstring)."""

    id: str
    text: str
    source: str  # arXiv id
    paper_value: str
    experiment: str  # figures/experiments/<experiment>.py
    setting: str  # the regime and comparison in words
    margins: tuple[Margin, ...]
    rule: str
    judge: Callable[[Evidence], Judgement]
    figures: tuple[str, ...]
    mechanism: str = ""  # what this project found or derived to explain the result, else empty
    decide: str = ""  # what would settle a negative verdict beyond more seeds
    preconditions: tuple[Precondition, ...] = ()
    cells: Callable[[Evidence], list[Cell | str]] | None = None  # evidence cells compared (their health rates shown)
    # the per-seed values of those cells the report lists: (the evidence field holding them, what they are)
    seed_values: tuple[str, str] = ("error", "final test error")
    staged: bool = True  # more seeds for it when undecided (False: judged at the design's first look only)
    sensitivity: tuple[Sensitivity, ...] = ()  # where the free parameters it hinges on are varied

    def margin(self, name: str) -> Margin:
        for m in self.margins:
            if m.name == name:
                return m
        raise KeyError(f"{self.id} has no margin {name!r}; it has {[m.name for m in self.margins]}")


def cell_health(ev: Evidence, key: Cell | str) -> dict[str, list[Any]]:
    """The health flags of cell ``key`` (empty when the experiment records none for it)."""
    return (getattr(ev, "health", None) or {}).get(key) or {}


def unhealthy_flags(ev: Evidence, key: Cell | str, high_error: float | None = None) -> list[bool | None]:
    """Per seed of cell ``key``: True if the run's health flag is not "healthy", it diverged, or (with
    ``high_error``) its final error (``ev.error[key]``) exceeds ``high_error`` (a seed at 37.5% error is unhealthy
    at 0.25 whichever classes it predicts); False if healthy, None if unknown (not run, or no flag recorded)."""
    h = cell_health(ev, key)
    flags = list(h.get("health", []))
    div = list(h.get("diverged", []))
    errs = (getattr(ev, "error", None) or {}).get(key)  # a list, or an array while the evidence is being made
    err = [] if high_error is None or errs is None else [None if x is None else float(x) for x in errs]
    out: list[bool | None] = []
    for i, f in enumerate(flags):
        d = div[i] if i < len(div) else None
        e = err[i] if i < len(err) else None
        high = e is not None and math.isfinite(e) and e > high_error
        out.append(True if d or high else (None if f is None else f != "healthy"))
    return out


def healthy_base(cells: Callable[[Evidence], list[Cell | str]], remedy: str,
                 name: str = "the base is healthy", high_error: float | None = None) -> Precondition:
    """Met when, in every cell ``cells(evidence)`` names, at most a fraction TRIM of the seeds is unhealthy
    (stalled, lost a class, diverged, or above ``high_error`` final error where given, `unhealthy_flags`): what
    the trimmed estimator tolerates (testbed/util/stats.py); failed when more are; unknown when a cell has no
    health flag at all."""

    def check(ev: Evidence) -> tuple[str, str]:
        seen, failed, unknown = [], [], []
        for key in cells(ev):
            known = [f for f in unhealthy_flags(ev, key, high_error) if f is not None]
            if not known:
                unknown.append(label(key))
                continue
            bad = sum(known)
            seen.append(f"{label(key)}: {bad} of {len(known)} seeds unhealthy")
            if bad > TRIM * len(known):
                failed.append(key)
        if failed:
            return "failed", "; ".join(seen)
        if unknown:
            return "unknown", (f"no health flags recorded for {', '.join(unknown)} (runs logged before the testbed "
                               "recorded health, or not run)")
        return "met", "; ".join(seen)

    return Precondition(name, check, remedy)


def health_rates(ev: Evidence, keys: list[Cell | str]) -> list[Outcome]:
    """Per compared cell: the seeds flagged unhealthy (lost a class, stalled) or diverged, with the exact
    interval (testbed/util/stats.py `rate`); cells without health data are skipped."""
    out = []
    for key in keys:
        flags = unhealthy_flags(ev, key)
        if any(f is not None for f in flags):
            names = list(cell_health(ev, key).get("health", []))
            bad = [f"seed {s}: {names[i] if i < len(names) and names[i] else 'diverged'}"
                   for i, (s, f) in enumerate(zip(ev.seeds, flags, strict=False)) if f]
            out.append(rate(f"{label(key)}: seeds lost a class / stalled / diverged", flags, "; ".join(bad) or "none"))
    return out


def assess(claim: Claim, ev: Evidence) -> Judgement:
    """The claim's judgement of its evidence at its sequential stop (seeds and interval level of that look),
    with its preconditions checked and the compared cells' health rates beside the verdict."""
    stop = dict(ev.sequential.get(claim.id) or {})
    level = stop.get("level")
    sub = ev.truncated(int(stop["n"])) if stop.get("n") else ev
    with using_level(level) if level else contextlib.nullcontext():
        j = claim.judge(sub)
        pre = [p.evaluate(sub) for p in claim.preconditions] if sub else []
        if claim.cells is not None and sub:
            j.other_parts.extend(health_rates(sub, claim.cells(sub)))
    j.preconditions = pre
    j.stop = stop
    blocked = [p for p in pre if p["status"] != "met"]
    if blocked:
        j.verdict_if_testable = j.verdict
        j.verdict = "not testable"
        j.note = "; ".join(f"{p['name']}: {p['status']} ({p['measured']})" for p in blocked) + (
            f"; {j.note}" if j.note else "")
    if stop.get("missing"):  # a partial report (--cached-only) whose look is part-trained: no verdict yet
        j.note = (f"not judged: {stop['missing']} of its runs not yet run; the cached runs alone read "
                  f"'{j.verdict}'") + (f"; {j.note}" if j.note else "")
        j.verdict, j.verdict_if_testable = "inconclusive", None
    return j


def look_history(claim: Claim, ev: Evidence) -> list[dict[str, Any]]:
    """The claim judged again at every look of its design up to its stop, each on the evidence cut to that look's
    seeds (`Evidence.truncated`) at that look's interval level:
    [{"look", "n", "level", "verdict", "seeds_needed", "settled"}] ([] for evidence without a design or a stop).

    Each look before the stop saw exactly these seeds (a claim still undecided at a look has every cell it compares
    trained with that look's seeds, figures/staging.py), so the history shows how the interval narrowed and how
    many seeds each look asked for, and a record is consistent (`history_consistent`) when every look before the
    stop reads "inconclusive" and the stop's look reads the claim's verdict."""
    stop = ev.sequential.get(claim.id) or {}
    looks = list(stop.get("looks") or [])
    levels = list((ev.design or {}).get("levels") or [])
    if not stop.get("n") or not looks or len(levels) != len(looks):
        return []
    out = []
    for k, (n, level) in enumerate(zip(looks, levels, strict=True)):
        if n > stop["n"]:
            break
        at = dataclasses.replace(ev, sequential={**ev.sequential, claim.id: {**stop, "n": n, "look": k,
                                                                               "level": level}})
        j = assess(claim, at)
        out.append({"look": k, "n": n, "level": level, "verdict": j.verdict, "seeds_needed": j.seeds_needed,
                    "settled": j.settled})
    return out


def history_consistent(history: list[dict[str, Any]], verdict: str) -> bool:
    """Whether a look history agrees with the stop it leads to: "inconclusive" before the last look, ``verdict``
    at it (an empty history agrees with anything)."""
    if not history:
        return True
    return all(h["verdict"] == "inconclusive" for h in history[:-1]) and history[-1]["verdict"] == verdict


def with_direction(match: Outcome, rescue: Outcome) -> Outcome:
    """A "matches" part whose failure is softened to "direction" when the method at least beats its base.

    ``match`` (equivalence to the synchronous reference) decides; if it *fails* (the whole interval is
    outside the tolerance) but ``rescue`` (superiority over the stale base) holds, the part is "direction"
    (better than the base, not as good as sync), never "partly"."""
    if match.status == "fails" and rescue.status == "holds":
        detail = f"{match.detail}; does not match, but beats the stale base ({rescue.name})".lstrip("; ")
        return Outcome(match.name, match.kind, "direction", match.margin, match.scale, match.interval, None, detail,
                       {"rescue": rescue.to_dict()})
    match.extra["rescue"] = rescue.to_dict()
    return match


def no_evidence(what: str) -> Judgement:
    """The judgement when an experiment's evidence is missing (e.g. a figure not yet made)."""
    return Judgement(f"no data ({what})", [], verdict="inconclusive", note=f"no evidence: {what}")


def judged_on(experiment: str) -> Callable[[Callable[[Evidence], Judgement]], Callable[[Evidence], Judgement]]:
    """Decorate a judge: empty evidence (the experiment has not run) gives `no_evidence`."""

    def wrap(fn: Callable[[Evidence], Judgement]) -> Callable[[Evidence], Judgement]:
        @functools.wraps(fn)
        def judge(ev: Evidence) -> Judgement:
            return fn(ev) if ev else no_evidence(experiment)

        return judge

    return wrap
