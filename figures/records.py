"""The record of a claim: what the paper says, how we test it, and the judgement of the evidence.

One `Claim` per published claim, defined beside the configs and the evidence function of the
experiment that tests it (figures/experiments/, bsuite style: an experiment is its configs plus
their scoring; the figure modules only draw). A record holds the claim's text, source and paper value
(docs/ALGORITHMS.md, "Published claims"), the tolerances and minimum effects with their derivations
(`Margin`, fixed before any run), the rule in words, the judge (evidence -> `Judgement`, built from
figures/stats.py), the figures that show it, and, where theory already explains a failure, the
mechanism. Verdicts: figures/stats.py `VERDICTS`.

Shared margins (`RESOLUTION`): where a claim says "matches" or "beats" without a number of its own,
the size that decides is the resolution of the one comparison in these papers that gives both the
numbers and the size of its evaluation (VCPO, arXiv 2602.17616: MATH-500 accuracy 72.0 sync vs 71.6
at lag 10, 500 problems). A 500-problem accuracy near 72% has a binomial standard error of
sqrt(0.72 x 0.28 / 500) = 2.0 points; the difference of two such evaluations has a 90% half-width of
1.645 x sqrt(2) x 2.0 = 4.67 points, which is 4.67 / 28.0 = 16.7% of the error rate (100 - 72.0). A
difference the paper's own evaluation could not resolve cannot be what it claims, so: "matches" =
error rates within a factor 1.167 of each other; "beats" / "degrades" without a number = error rates
differing by more than that factor (tested on log error rates, figures/stats.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from figures.stats import VERDICTS, Outcome, combine, max_needed

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

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict = combine(self.parts)
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def seeds_needed(self) -> int | None:
        return max_needed(self.parts)


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
    judge: Callable[[dict[str, Any]], Judgement]
    figures: tuple[str, ...]
    mechanism: str = ""  # what this project found or derived to explain the result, else empty
    decide: str = ""  # what would settle a negative verdict beyond more seeds

    def margin(self, name: str) -> Margin:
        for m in self.margins:
            if m.name == name:
                return m
        raise KeyError(f"{self.id} has no margin {name!r}; it has {[m.name for m in self.margins]}")


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


def judged_on(experiment: str) -> Callable[[Callable[[dict[str, Any]], Judgement]], Callable[[dict[str, Any]], Judgement]]:
    """Decorate a judge: empty evidence (the experiment has not run) gives `no_evidence`."""

    def wrap(fn: Callable[[dict[str, Any]], Judgement]) -> Callable[[dict[str, Any]], Judgement]:
        @functools.wraps(fn)
        def judge(ev: dict[str, Any]) -> Judgement:
            return fn(ev) if ev else no_evidence(experiment)

        return judge

    return wrap
