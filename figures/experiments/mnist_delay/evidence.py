"""The mnist_delay experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from figures import prereg
from figures.common import Context, diverged, seed_curves, values
from figures.confirm import SpikeReference, calibrate_factor
from figures.evidence import Cell
from figures.evidence import Evidence as ExperimentEvidence
from figures.experiments.mnist_delay.settings import (
    ABLATIONS,
    CHANCE,
    RECIPES,
    cell,
    configs,
    describe,
    resolution_floor,
    sweep,
)
from figures.staging import cell_health

RISE = 0.2  # a collapse: test error more than RISE above its running minimum
WINDOW = 3  # evaluation intervals up to a collapse whose learner steps are examined for the precursors
ESS_DROP = 0.5  # an ESS drop: a step's ESS below this fraction of the median of every earlier step's
GRAD_SPIKE = 2.0  # a gradient-norm spike: a step's gradient norm above this multiple of the earlier median


@dataclass(frozen=True)
class CollapseRule:
    """VCPO-1's free parameters: what counts as a collapse (``rise``), how many evaluation intervals before it
    are searched (``window``), and the precursors' thresholds (``ess_drop``, ``grad_spike``)."""

    rise: float = RISE
    window: int = WINDOW
    ess_drop: float = ESS_DROP
    grad_spike: float = GRAD_SPIKE
    spike: SpikeReference | None = None  # the registered rule's reference (None: the median of every earlier step)

    def label(self) -> str:
        changed = [f"{f} {getattr(self, f):g}" for f in ("rise", "window", "ess_drop", "grad_spike")
                   if getattr(self, f) != getattr(CollapseRule(), f)]
        changed += [self.spike.label()] if self.spike is not None else []
        return ", ".join(changed) or "the rule judged"


# the sensitivity table: each free parameter moved alone to either side of the rule judged (reported, not judged)
VCPO1_RULES = (CollapseRule(), CollapseRule(rise=0.1), CollapseRule(rise=0.3), CollapseRule(window=1),
               CollapseRule(window=10), CollapseRule(ess_drop=0.3), CollapseRule(ess_drop=0.7),
               CollapseRule(grad_spike=1.5), CollapseRule(grad_spike=3.0))


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell ``(recipe, delay)`` (and ``(ablation, delay)`` at the ablation delays), one value per
    seed: final test error (``error``, chance for a diverged run) and health flags (``health``); diverged runs
    per cell (``diverged``); VCPO-1's collapse events of the first look's sweep and the same test at the ends of
    the runs that did not collapse (``events``, ``quiet``: dicts with recipe, delay, seed and the precursors);
    per `CollapseRule` of `VCPO1_RULES` (by its label), the counts its judge reads (``sensitivity``: n, ess, grad
    among collapses with enough history; nq, ess_q, grad_q at the ends of the other runs)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "health", "curves")
    KEYED: ClassVar[tuple[str, ...]] = ("error", "diverged", "health", "curves")
    SEEDED_EVENTS: ClassVar[tuple[str, ...]] = ("events", "quiet")

    delays: list[str] = field(default_factory=list)
    ablation_delays: list[str] = field(default_factory=list)
    floor: float = float("nan")
    error: dict[Cell, list[float | None]] = field(default_factory=dict)
    diverged: dict[Cell, int] = field(default_factory=dict)
    health: dict[Cell, dict[str, list[Any]]] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    quiet: list[dict[str, Any]] = field(default_factory=list)
    sensitivity: dict[str, dict[str, int]] = field(default_factory=dict)
    # the registered design (the registration's [spike]): the spike rule's reference in its [spike] keys, its factor
    # calibrated on the quiet runs and that factor's false-alarm rate there; empty outside that design
    spike: dict[str, Any] = field(default_factory=dict)
    # the learning curves (per cell, per seed: test error at each of ``versions``) and whether the budget is the
    # pre-registered one (VCPO-2 and VCPO-3 then read the learning phase)
    versions: list[float] = field(default_factory=list)
    curves: dict[Cell, list[list[float | None]]] = field(default_factory=dict)
    confirmatory: bool = False

    @property
    def precursor_flags(self) -> dict[str, list[float | None]]:
        """VCPO-1's judged values per seed: for every cell with a collapse after enough history, one list per
        precursor (keys ``"<cell> ESS drop"``, ``"<cell> spike"``), per seed 1.0 if the precursor showed in the
        window before that run's collapse, 0.0 if not, None where the run has no such collapse."""
        out: dict[str, list[float | None]] = {}
        index = {s: i for i, s in enumerate(self.seeds)}
        for e in self.events:
            if not e.get("enough_history") or e["seed"] not in index:
                continue
            for flag, what in (("ess_drop", "ESS drop"), ("grad_spike", "spike")):
                row = out.setdefault(f"{e['recipe']}|{e['delay']} {what}", [None] * len(self.seeds))
                row[index[e["seed"]]] = float(bool(e[flag]))
        return out


def collapse_index(run, rise: float = RISE) -> int | None:
    """Index (into the run's logged rows) of the collapse (test error more than ``rise`` above its running
    minimum, or divergence), or None."""
    if run["status"].iloc[0] == "diverged":
        return len(run) - 1
    err = run["test_error"].to_numpy(dtype=float)
    best = np.fmin.accumulate(np.where(np.isfinite(err), err, np.inf))
    hit = np.flatnonzero(err > best + rise)
    return int(hit[0]) if len(hit) else None


def precursors(steps, end: float, span: float, ess_drop: float = ESS_DROP,
               grad_spike: float = GRAD_SPIKE, spike: SpikeReference | None = None) -> dict[str, Any]:
    """Per-step precursors of an event at learner step ``end``: among the optimizer steps in the window
    (end - span, end], did ESS drop below ``ess_drop`` times the median of every earlier step's ESS, and did
    the gradient norm exceed ``grad_spike`` times the earlier steps' median? ``steps``: the run's per-step
    records (None: not recorded).
    ``lead_*``: learner steps from the first step that shows the precursor to ``end`` (None when it does not).
    ``enough_history``: the records exist and at least ``span`` learner steps come before the window.
    ``spike``: the spike is judged against that reference instead (`figures.confirm.SpikeReference`: the median of
    the steps just before it, so that a slow upward drift of the norm is not a spike, or of the run's first
    learner steps)."""
    none = {"ess_drop": False, "grad_spike": False, "lead_ess": None, "lead_grad": None, "enough_history": False}
    if steps is None or not len(steps):
        return none
    t = steps["step"].to_numpy(dtype=float)
    ess, gn = steps["ess"].to_numpy(dtype=float), steps["grad_norm"].to_numpy(dtype=float)
    before, window = t <= end - span, (t > end - span) & (t <= end)
    if not window.any() or t[before].size == 0 or t[before].max() < span:
        return none
    out: dict[str, Any] = {"enough_history": True}
    for key, lead, series, hit in (("ess_drop", "lead_ess", ess, lambda x, m: x < ess_drop * m),
                                   ("grad_spike", "lead_grad", gn, lambda x, m: x > grad_spike * m)):
        if key == "grad_spike" and spike is not None:
            shown = window & spike.spikes(np.nan_to_num(series, nan=0.0), grad_spike)
        else:
            ref = np.nanmedian(series[before]) if np.isfinite(series[before]).any() else float("nan")
            shown = window & np.isfinite(series) & (hit(series, ref) if math.isfinite(ref) else False)
        out[key] = bool(shown.any())
        out[lead] = float(end - t[shown].min()) if shown.any() else None
    return out


def collapses(table, step_records: dict[str, Any], log_every: int,
              rule: CollapseRule = CollapseRule()) -> tuple[list[dict], list[dict]]:
    """(collapse events, the same test at the last logged step of runs that did not collapse) by ``rule``;
    the window of `precursors` is ``rule.window`` evaluation intervals of ``log_every`` learner steps."""
    events, quiet = [], []
    if not len(table):
        return events, quiet
    span = rule.window * log_every
    for (recipe, delay, seed, run_id), run in table.groupby(["recipe", "delay", "seed", "run_id"], sort=False):
        run = run.sort_values("step")
        idx = collapse_index(run, rule.rise)
        steps = step_records.get(run_id)
        if idx is not None:
            end = float(run["step"].iloc[idx])
            events.append({"recipe": recipe, "delay": delay, "seed": int(seed), "step": end,
                           **precursors(steps, end, span, rule.ess_drop, rule.grad_spike, rule.spike)})
        elif len(run) > rule.window + 3:
            quiet.append({"recipe": recipe, "delay": delay, "seed": int(seed),
                          **precursors(steps, float(run["step"].iloc[-1]), span, rule.ess_drop, rule.grad_spike,
                                       rule.spike)})
    return events, quiet


def quiet_norms(table, step_records: dict[str, Any], rise: float = RISE) -> list[np.ndarray]:
    """The per-step gradient norms of the runs that do not collapse (`collapse_index` None), up to their last
    evaluation: what the registered spike rule is calibrated on."""
    out = []
    if not len(table):
        return out
    for run_id, run in table.groupby("run_id", sort=False):
        steps = step_records.get(run_id)
        run = run.sort_values("step")
        if steps is None or collapse_index(run, rise) is not None:
            continue
        gn = steps.loc[steps["step"] <= float(run["step"].iloc[-1]), "grad_norm"].to_numpy(dtype=float)
        if gn.size:
            out.append(np.nan_to_num(gn, nan=0.0))
    return out


def registered_rule(table, step_records: dict[str, Any], log_every: int,
                    section: dict[str, Any]) -> tuple[CollapseRule, dict[str, Any]]:
    """The registered collapse rule: the spike rule of the registration's [spike] ``section`` (its reference,
    `figures.confirm.SpikeReference`) with the smallest factor of its grid whose false-alarm rate at the quiet
    runs' ends is at most the registered rate (`figures.confirm.calibrate_factor`), and that calibration's
    record."""
    ref = SpikeReference.of(section)
    quiet = quiet_norms(table, step_records)
    span = WINDOW * log_every
    factor, rate = calibrate_factor(quiet, ref, section["factor_grid"], float(section["false_alarm"]), span)
    rule = CollapseRule(grad_spike=factor if math.isfinite(factor) else max(section["factor_grid"]), spike=ref)
    return rule, {**ref.section(), "factor": factor, "false_alarm": rate, "target": section["false_alarm"],
                  "quiet_runs": len(quiet)}


def staleness_caused(found: list[dict]) -> list[dict]:
    """The collapse events of stale runs whose paired sync run (same recipe and seed) has no event of its own: a
    collapse counts as caused by staleness only where the synchronous run does not collapse. Read on the collapse
    list only; the quiet list stays whole, since a quiet stale run is quiet whatever its sync run did."""
    at_sync = {(x["recipe"], x["seed"]) for x in found if x["delay"] == "sync"}
    return [x for x in found if x["delay"] != "sync" and (x["recipe"], x["seed"]) not in at_sync]


def precursor_counts(events: list[dict], quiet: list[dict]) -> dict[str, int]:
    """What VCPO-1's judge reads: among collapses with enough history, how many show each precursor (n, ess,
    grad), and the same at the ends of the other runs (nq, ess_q, grad_q)."""
    ev = [x for x in events if x.get("enough_history")]
    qu = [x for x in quiet if x.get("enough_history")]
    return {"n": len(ev), "ess": sum(bool(x["ess_drop"]) for x in ev), "grad": sum(bool(x["grad_spike"]) for x in ev),
            "nq": len(qu), "ess_q": sum(bool(x["ess_drop"]) for x in qu),
            "grad_q": sum(bool(x["grad_spike"]) for x in qu)}


def build(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    ev = Evidence(grid=describe(b), seeds=list(seeds), delays=list(b.mnist_delays),
                  ablation_delays=list(b.ablation_delays), floor=resolution_floor(),
                  confirmatory=b.name == "confirmatory")
    for r in RECIPES:
        for d in b.mnist_delays:
            c = cell(b, r, d, seeds=seeds)
            ev.error[r, d] = values(table, c, "test_error", CHANCE)
            if ev.confirmatory:
                ev.versions, ev.curves[r, d] = seed_curves(table, c, ev.versions, CHANCE)
            ev.diverged[r, d] = diverged(table, c)
            ev.health[r, d] = cell_health(ctx, c)
    for name, spec in ABLATIONS.items():
        for d in b.ablation_delays:
            c = cell(b, spec, d, seeds=seeds)
            ev.error[name, d] = values(table, c, "test_error", CHANCE)
            ev.health[name, d] = cell_health(ctx, c)
            if ev.confirmatory:
                ev.versions, ev.curves[name, d] = seed_curves(table, c, ev.versions, CHANCE)
    first = sweep(b)  # VCPO-1 reads the first look's sweep (not staged)
    ids = {cfg.run_id for cfg in first}
    sweep_rows = table[table["run_id"].isin(ids)] if len(table) else table
    records = ctx.step_records(first)
    if b.name == "confirmatory":
        spike = prereg.registration(b.registration or None).section("spike")  # the first file's or a later one's
        rule, ev.spike = registered_rule(sweep_rows, records, b.mnist_log, spike)
        events, ev.quiet = collapses(sweep_rows, records, b.mnist_log, rule)
        ev.events = staleness_caused(events)
        ev.sensitivity[rule.label()] = precursor_counts(ev.events, ev.quiet)
        return ev
    for rule in VCPO1_RULES:
        events, quiet = collapses(sweep_rows, records, b.mnist_log, rule)
        if rule == CollapseRule():
            ev.events, ev.quiet = events, quiet
        ev.sensitivity[rule.label()] = precursor_counts(events, quiet)
    return ev
