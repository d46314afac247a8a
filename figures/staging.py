"""The sequential design at work: train the first look's seeds, judge, add seeds where claims are undecided.

An experiment's evidence is built look by look (testbed/util/sequential.py): look 0 trains every cell of
the experiment with the design's first n0 seeds; each later look trains, for the claims still
undecided only, the cells those claims compare (`Claim` ``runs``) with the next seeds; the evidence
always spans all the design's seeds (NaN where a seed was not trained), and each claim is judged on
the seeds it had at its stop (`figures.records.assess`). A claim whose judge says that no later look can
decide it (`Judgement.settled`: e.g. DDG-3 once a run solves the grid's longest length, which more seeds
cannot undo) stops there as "inconclusive": such a stop never yields a verdict, so it spends none of the
error budget. The evidence's ``sequential`` records per claim the seeds used, the look, the interval level
and why it stopped; its ``design`` the design.

Run health (`cell_health`) is read from the testbed's run records: ``health`` in {"healthy",
"stalled", "lost_class"}, ``stalled`` and ``lost_classes_final`` (testbed/runner.py), None where a run
did not record them (older runs): a claim that needs them is then "not testable" with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from figures.budgets import Budget
from figures.common import Context
from figures.evidence import Evidence
from figures.records import Claim, assess
from testbed.config import RunConfig
from testbed.util.sequential import Design

E = TypeVar("E", bound=Evidence)
HEALTH_KEYS = ("health", "stalled", "lost_classes_final")


def _record_value(rec: dict[str, Any], key: str) -> Any:
    for where in (rec, rec.get("summary") or {}, rec.get("info") or {}):
        if isinstance(where, dict) and key in where:
            return where[key]
    return None


def cell_health(ctx: Context, cell: list[RunConfig]) -> dict[str, list[Any]]:
    """Per config of ``cell`` (= per seed): health, stalled, lost_classes_final (None where not recorded or
    not run) and diverged (None where not run)."""
    from testbed.results import ResultStore

    store = ResultStore(ctx.cache)
    out: dict[str, list[Any]] = {k: [] for k in (*HEALTH_KEYS, "diverged")}
    for cfg in cell:
        rec = store.record(cfg.run_id) if store.done(cfg.run_id) else None
        for k in HEALTH_KEYS:
            out[k].append(None if rec is None else _record_value(rec, k))
        out["diverged"].append(None if rec is None else rec.get("status") == "diverged")
    return out


def staged(ctx: Context, claims: tuple[Claim, ...], design: Design, seeds: tuple[int, ...],
           runs: Callable[[list[int], list[Claim] | None], list[RunConfig]],
           build: Callable[[], E]) -> E:
    """Evidence of an experiment under ``design`` (module docstring).

    ``runs(seeds, claims)``: the configs to train for those seeds, for those claims (None: every cell);
    ``build()``: the evidence over all of ``seeds`` from what is trained so far."""
    if len(seeds) < design.cap:
        raise ValueError(f"the design's cap ({design.cap}) exceeds the seeds given ({len(seeds)})")
    stops: dict[str, dict[str, Any]] = {}
    pending = list(claims)
    ev: E | None = None
    waiting: dict[str, dict[str, Any]] = {}  # the undecided claims' stops and verdicts at the last look taken
    for k, n in enumerate(design.looks):
        look = runs(list(seeds[:n]), None if k == 0 else pending)
        absent = ctx.uncached(look) if ctx.cached_only else 0
        if k and absent:  # a partial report: this look has not run yet
            why = f"look {k + 1} of {len(design.looks)} not yet run (--cached-only)"
            stops.update({claim.id: {**waiting[claim.id], "reason": why} for claim in pending})
            break
        ctx.ensure(look)
        ev = build()
        stop = {"n": n, "look": k, "level": design.level(k), "looks": list(design.looks)}
        if absent:  # a partial report whose first look is part-trained: shown, not judged (`records.assess`)
            why = f"look 1 of {len(design.looks)}: {absent} of {len(look)} runs not yet run (--cached-only)"
            stops.update({claim.id: {**stop, "reason": why, "verdict": "inconclusive", "missing": absent}
                          for claim in pending})
            break
        waiting = {}
        for claim in list(pending):
            ev.sequential = {**stops, claim.id: stop}
            judgement = assess(claim, ev)
            verdict = judgement.verdict
            last = n == design.looks[-1]
            if verdict != "inconclusive" or last or not claim.staged or judgement.settled:
                if len(design.looks) == 1:
                    why = "single look (fixed design)"
                elif verdict != "inconclusive":
                    why = f"decided at look {k + 1} of {len(design.looks)}"
                elif last:
                    why = "cap reached"
                elif judgement.settled:
                    why = f"settled at look {k + 1}: more seeds cannot decide it ({judgement.settled})"
                else:
                    why = "not staged: judged at the first look"
                stops[claim.id] = {**stop, "reason": why, "verdict": verdict}
                pending.remove(claim)
            else:
                waiting[claim.id] = {**stop, "verdict": verdict}
        if not pending:
            break
    assert ev is not None  # a design has at least one look
    ev.sequential = stops
    ev.design = design.to_dict()
    return ev


def staged_evidence(ctx: Context, claims: tuple[Claim, ...], kind: str,
                    configs: Callable[[Budget, tuple[int, ...]], list[RunConfig]],
                    staged_runs: Callable[[Budget, tuple[int, ...], list[str]], list[RunConfig]],
                    build: Callable[[Context, tuple[int, ...]], E],
                    before: Callable[[tuple[int, ...], list[Claim] | None], None] | None = None) -> E:
    """An experiment's evidence under its budget's design ``kind`` (figures/budgets.py: ``<kind>_design``, every seed
    of ``all_seeds(kind)``; `staged`). Look 0 trains ``configs(budget, seeds)``, a later look ``staged_runs(budget,
    seeds, ids of the claims still undecided)``; ``before(seeds, claims)``, where given, first trains what is not a
    testbed run (exact-gradient runs); ``build(ctx, seeds)`` reads the evidence over every seed."""
    b = ctx.budget
    seeds = b.all_seeds(kind)

    def runs(train: list[int], pending: list[Claim] | None) -> list[RunConfig]:
        if before is not None:
            before(tuple(train), pending)
        return configs(b, tuple(train)) if pending is None else staged_runs(b, tuple(train), [c.id for c in pending])

    return staged(ctx, claims, getattr(b, f"{kind}_design"), seeds, runs, lambda: build(ctx, seeds))
