"""The mnist_delay experiment's claims: their margins, preconditions and judges (figures/records.py); no plotting."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from figures import prereg
from figures.budgets import lag_of
from figures.common import arr
from figures.confirm import SpikeReference, phase_endpoints, resolution_margin
from figures.evidence import Cell
from figures.experiments.mnist_delay.evidence import WINDOW, CollapseRule, Evidence, precursor_counts
from figures.experiments.mnist_delay.settings import NAME, claim_cells, largest_at_most
from figures.records import (
    Claim,
    Judgement,
    Margin,
    Precondition,
    Sensitivity,
    healthy_base,
    judged_on,
    resolution,
    with_direction,
)
from testbed.util.stats import Outcome, at_least, equivalence, exact, fmt, proportion, superiority

DG_ETA_SENSITIVITY = Sensitivity(
    "DG's temperature eta", "sweeps/dg_eta/TABLE.md",
    "DG's error on the embedded MNIST at eta = 0.1, 0.3, 1, 3, 10, on-policy and 1,000 versions stale")
VCPO_SENSITIVITY = Sensitivity(
    "vcpo's truncation c, ess_lr's rule and reference ESS", "sweeps/vcpo/TABLE.md",
    "final error of vcpo at c = 2, 8, 32, ess_lr linear / sqrt and rho_base 0.5 / 1, its two ablations and pg, "
    "on-policy and 100 and 1,000 versions stale (2 seeds)")
DATA_SIZE_SENSITIVITY = Sensitivity(
    "the number of training images and the dataset", "sweeps/data_size/TABLE.md",
    "pg, dg, exact IS and supervised CE at 1,000 / 4,000 / 60,000 Fashion-MNIST images and the embedded MNIST, "
    "on-policy and 1,000 versions stale")


DDG1_RATIO = Margin(
    "delta", math.log(7.5 / 2.5), "log",
    "paper (s): DG 'about 2%', exact IS 'about 8%' at D = 1000. Read as rounded to whole percents, DG in "
    "[1.5, 2.5) and IS in [7.5, 8.5); the smallest ratio IS / DG they allow is 7.5 / 2.5 = 3")
DDG1_FAIL = Margin(
    "fail", 0.5, "diff",
    "no number for 'REINFORCE fails': fails = more than half the test images wrong (chance is 0.9; every "
    "method that learns here ends below 0.2)")


@judged_on(NAME)
def judge_ddg1(ev: Evidence) -> Judgement:
    d = ev.delays[-1]
    e, floor = ev.error, ev.floor
    dg, is_, pg = arr(e["dg", d]), arr(e["is", d]), arr(e["pg", d])
    parts = [
        superiority(f"DG below exact IS at D={lag_of(d)} (ratio IS / DG)", is_, dg, DDG1_RATIO.value, "log", floor),
        at_least(f"PG fails at D={lag_of(d)} (error above {DDG1_FAIL.value})", pg, DDG1_FAIL.value),
    ]
    others = ", ".join(f"{r} {fmt(arr(e[r, d]), 3, pct=True)}" for r in ("tis", "ppo", "decoupled_ppo", "vcpo"))
    ours = (f"D={lag_of(d)}: DG {fmt(dg, 3, pct=True)}, exact IS {fmt(is_, 3, pct=True)}, PG {fmt(pg, 3, pct=True)}; "
            f"{others}")
    return Judgement(ours, parts)


VCPO2_TOL = resolution("tol")


def _n_diverged(ev: Evidence, key: Cell) -> int:
    """Diverged runs of a cell among the seeds judged (per-seed flags; an older evidence file: its count)."""
    flags = ((ev.health or {}).get(key) or {}).get("diverged")
    if flags is not None:
        return sum(bool(x) for x in flags if x is not None)
    return int(ev.diverged.get(key, 0))


def phase_view(ev: Any, base_cell: Cell = ()) -> tuple[Any, str]:
    """The evidence (any with ``versions``, ``curves`` and ``error``) with each cell's errors replaced by its
    learning-phase endpoint (the registered design): the mean error over the window in which the registered base
    (``base_cell``, default ``phase.mnist_base`` at sync) makes its registered share of its error drop, chosen
    from the base's curves only; and that window in words."""
    ph = prereg.load().section("phase")
    base_cell = base_cell or (ph["mnist_base"], "sync")
    window, endpoints = phase_endpoints(ev.versions, ev.curves, base_cell)
    error = {k: v.tolist() for k, v in endpoints.items()}
    return dataclasses.replace(ev, error=error), (
        f"learning phase: versions {window[0]:g} to {window[1]:g} ({' at '.join(base_cell)}'s "
        f"{ph['progress_lo']:.0%}-{ph['progress_hi']:.0%} of its error drop), mean error over it")


def registered_margin(name: str, view: Any, base: Cell) -> Margin:
    """A margin from the testbed's resolution at the ``base`` cell of a learning-phase view (`resolution_margin`,
    the MNIST design's cap)."""
    reg = prereg.load()
    return resolution_margin(name, arr(view.error[base]), round(0.5 / view.floor),
                             int(reg.section("designs")["mnist"]["cap"]), float(reg.section("margins")["z"]), view.floor)


def registered(ev: Any, judge: Callable[[Any, float], Judgement], base: Cell, margin: Margin | None,
               base_cell: Cell = ()) -> Judgement:
    """A typical-performance claim under the registered design: ``judge`` on the learning-phase view
    (`phase_view` from ``base_cell``), with the margin computed from the testbed's resolution at the ``base`` cell
    (``margin`` None, `registered_margin`) or the paper's; the plateau verdict's parts beside it."""
    view, window = phase_view(ev, base_cell)
    margin = margin or registered_margin("tol", view, base)
    j = judge(view, margin.value)
    final = judge(ev, margin.value)
    j.note = "; ".join(x for x in (j.note, window, f"margin factor {math.exp(margin.value):.3f}: {margin.derivation}")
                       if x)
    j.other_parts.extend(dataclasses.replace(p, name=f"secondary, final error: {p.name}", status="n/a")
                         for p in final.parts)
    return j


@judged_on(NAME)
def judge_vcpo2(ev: Evidence) -> Judgement:
    if ev.confirmatory:
        return registered(ev, _vcpo2, ("vcpo", "sync"), None)
    return _vcpo2(ev, VCPO2_TOL.value)


def _vcpo2(ev: Evidence, tol: float) -> Judgement:
    e, floor, delays = ev.error, ev.floor, ev.delays
    sync = arr(e["vcpo", "sync"])
    lags = [d for d in delays if d != "sync" and lag_of(d) <= 128]
    parts = []
    for d in lags:
        match = equivalence(f"vcpo at D={lag_of(d)} matches vcpo sync", sync, arr(e["vcpo", d]), tol, "log", floor)
        rescue = superiority(f"vcpo below pg at D={lag_of(d)}", arr(e["pg", d]), arr(e["vcpo", d]), tol, "log",
                             floor)
        parts.append(with_direction(match, rescue))
    n_div = sum(_n_diverged(ev, ("vcpo", d)) for d in lags)
    parts.append(exact(f"vcpo never diverges at D <= 128 ({', '.join(str(lag_of(d)) for d in lags)})", n_div == 0,
                       float(n_div), 0.0, f"{n_div} diverged run(s)"))
    ours = f"vcpo sync {fmt(sync, 3, pct=True)}; " + "; ".join(
        f"D={lag_of(d)}: vcpo {fmt(arr(e['vcpo', d]), 3, pct=True)}, pg {fmt(arr(e['pg', d]), 3, pct=True)}"
        for d in delays if d != "sync")
    return Judgement(ours, parts)


VCPO3_DELTA = Margin(
    "delta", math.log1p(2.5 / 28.4), "log",
    "paper (s): removing either component costs 'about 3 to 4 points' of accuracy. Read as [2.5, 4.5) points "
    "at VCPO's own error level, 28.4% (100 - 71.6, VCPO-2's lagged run): at least a 2.5 / 28.4 = 8.8% higher "
    "error rate")


@judged_on(NAME)
def judge_vcpo3(ev: Evidence) -> Judgement:
    if ev.confirmatory:
        return registered(ev, _vcpo3, ("vcpo", "sync"), VCPO3_DELTA)
    return _vcpo3(ev, VCPO3_DELTA.value)


def _vcpo3(ev: Evidence, delta: float) -> Judgement:
    e, floor = ev.error, ev.floor
    d = largest_at_most(ev.ablation_delays, 128) or ev.ablation_delays[0]
    full = arr(e["vcpo", d])
    # the candidate is the full recipe: its error must be lower than each ablation's
    parts = [superiority(f"removing {name.split()[1]} hurts at D={lag_of(d)} (ratio ablation / vcpo)",
                         arr(e[name, d]), full, delta, "log", floor)
             for name in ("no ess_lr", "no opob")]
    ours = "; ".join(f"D={lag_of(x)}: vcpo {fmt(arr(e['vcpo', x]), 3, pct=True)}, no ess_lr "
                     f"{fmt(arr(e['no ess_lr', x]), 3, pct=True)}, no opob {fmt(arr(e['no opob', x]), 3, pct=True)}"
                     for x in ev.ablation_delays)
    return Judgement(ours, parts, note=f"judged at D={lag_of(d)} (the largest ablation delay <= 128, VCPO's stated range)")


VCPO1_MOST = Margin(
    "most", 0.5, "diff",
    "qualitative claim: 'precede collapse' read as 'before most collapses' (a rate above 1/2) and more often "
    "than at the end of runs that do not collapse (Fisher's exact test)")


def precursor_parts(c: dict[str, int], prefix: str = "") -> list[Outcome]:
    """VCPO-1's two proportions from `precursor_counts`."""
    return [proportion(f"{prefix}{what} before the collapse", c[k], c["n"], VCPO1_MOST.value, c[kq], c["nq"],
                       f"{c[k]}/{c['n']} collapses; {c[kq]}/{c['nq']} non-collapsing run ends")
            for k, kq, what in (("ess", "ess_q", "ESS drop"), ("grad", "grad_q", "gradient-norm spike"))]


def precursor_leads(events: list[dict], unit: str = "learner steps") -> list[str]:
    """Per precursor, among the collapses with enough history that show it, the median lead (``lead_*`` of
    `precursors`) from its first showing to the evaluation that shows the collapse, in ``unit``."""
    leads = []
    for key, what in (("lead_ess", "ESS drop"), ("lead_grad", "spike")):
        shown = [x[key] for x in events if x.get("enough_history") and x.get(key) is not None]
        if shown:
            leads.append(f"{what} first shows a median {np.median(shown):.0f} {unit} before the evaluation that "
                         "shows the collapse")
    return leads


@judged_on(NAME)
def judge_vcpo1(ev: Evidence) -> Judgement:
    events = [x for x in ev.events if x.get("enough_history")]
    n = len(events)
    sensitivity = [q for label, c in (ev.sensitivity or {}).items() if label != CollapseRule().label() and c["n"]
                   for q in precursor_parts(c, f"sensitivity ({label}): ")]
    if n == 0:
        return Judgement(f"{len(ev.events)} collapse(s), none with enough logged history before it", [],
                         verdict="not testable", note="no run collapsed after enough logged steps",
                         other_parts=sensitivity)
    parts = precursor_parts(precursor_counts(ev.events, ev.quiet))
    which = sorted({f"{x['recipe']}@{lag_of(x['delay'])}" for x in events})
    leads = precursor_leads(events)
    ours = (f"{n} collapses ({', '.join(which[:8])}{'...' if len(which) > 8 else ''}): "
            + "; ".join(p.detail for p in parts) + (f" ({'; '.join(leads)})" if leads else ""))
    return Judgement(ours, parts, other_parts=sensitivity)


def _healthy_sync(recipes: tuple[str, ...]) -> Precondition:
    return healthy_base(lambda ev: [(r, "sync") for r in recipes],
                        "runs that record health (the testbed's health flags) with at most one seed in five stalled "
                        "or missing a class at sync; else a regime that is healthy at sync",
                        f"the base is healthy at sync ({', '.join(recipes)})")


def _calibrated(ev: Evidence) -> tuple[str, str]:
    """The registered design's precondition: a spike factor whose false-alarm rate on quiet runs meets the target."""
    if not ev.spike:
        return "met", "a precondition of the registered design only"
    sp = ev.spike
    if sp.get("factor") is None or not math.isfinite(float(sp["factor"])):
        return "failed", (f"no factor of the grid keeps false alarms at the ends of {sp['quiet_runs']} quiet runs at "
                          f"or below {sp['target']:.0%}")
    ref = SpikeReference.of(sp)
    return "met", (f"{ref.kind} spike rule: {ref.describe(float(sp['factor']))}; {sp['false_alarm']:.1%} false alarms "
                   f"at the ends of {sp['quiet_runs']} quiet runs")


def _collapsed(ev: Evidence) -> tuple[str, str]:
    events = [x for x in ev.events if x.get("enough_history")]
    if events:
        return "met", f"{len(events)} collapse(s) after enough logged history"
    return "failed", (f"{len(ev.events)} collapse(s), none with per-step records and {WINDOW} evaluation "
                      "intervals of history before its window")


def _cells_of(claim_id: str):
    def keys(ev: Evidence) -> list[str]:
        return claim_cells(claim_id, ev.delays, ev.ablation_delays)
    return keys


CLAIMS = (
    Claim("VCPO-1", "ESS drops and gradient-norm spikes precede collapse", "2602.17616", "qualitative", NAME,
          "every run of the MNIST delay sweep (all recipes and delays)", (VCPO1_MOST,),
          "A collapse: test error rises more than 0.2 above its running minimum, or the run diverges. Precursors at "
          "per-step resolution, among the learner steps of the 3 evaluation intervals up to the evaluation that shows "
          "it: some step's ESS below half the median of all earlier steps'; some step's gradient norm above a spike "
          "threshold (exploratory: twice the median of all earlier steps; registered: the registration's [spike] "
          "reference times the smallest factor of its grid whose false-alarm rate at the ends of the quiet runs "
          "meets its target, stated under the preconditions). Per precursor: holds if its rate among collapses has a "
          "90% Clopper-Pearson interval above 1/2 and exceeds the rate at the ends of non-collapsing runs (Fisher, one-sided 0.05); direction if only the "
          "latter; fails if the interval is below 1/2; not testable if nothing collapsed.",
          judge_vcpo1, ("vcpo_traces",),
          decide="collapses in a setting where they are common (more delays or recipes that collapse)",
          preconditions=(Precondition("some run collapses (with logged history before it)", _collapsed,
                                      "a setting where runs collapse after a stretch of stable training"),
                         Precondition("the spike rule's false-alarm rate on quiet runs is at most the registered rate",
                                      _calibrated, "a wider factor grid or a longer local window")),
          cells=lambda ev: list(ev.precursor_flags),
          seed_values=("precursor_flags", "per run that collapsed after enough history: 1 if the precursor showed in "
                                          "the window before the collapse, 0 if not; - where the run did not collapse"),
          staged=False),
    Claim("VCPO-2", "stable to 128 steps of lag, matches sync accuracy", "2602.17616",
          "MATH-500 72.0 sync vs 71.6 at k = 10", NAME,
          "MNIST, vcpo at every delay <= 128 of the grid vs vcpo synchronous (paired by seed)", (VCPO2_TOL,),
          "Each delay D <= 128: vcpo's error matches vcpo sync (TOST: the interval of the 20%-trimmed mean log error "
          "ratio inside +-log 1.167), softened to 'direction' when it does not match but beats pg at the same D by "
          "that factor; and no vcpo run diverges at D <= 128.", judge_vcpo2, ("vcpo_traces",),
          preconditions=(_healthy_sync(("vcpo", "pg")),), cells=_cells_of("VCPO-2"), sensitivity=(VCPO_SENSITIVITY,)),
    Claim("VCPO-3", "removing either component hurts", "2602.17616", "about 3 to 4 points (s)", NAME,
          "MNIST, vcpo vs vcpo without ess_lr and without opob, paired by seed, at the largest ablation delay <= 128",
          (VCPO3_DELTA,),
          "Each ablation's error exceeds full vcpo's by more than the minimum effect (paired, 20%-trimmed mean of the "
          "log error ratios, interval above log 1.088).", judge_vcpo3, ("vcpo_ablation",),
          preconditions=(_healthy_sync(("vcpo",)),), cells=_cells_of("VCPO-3"), sensitivity=(VCPO_SENSITIVITY,)),
    Claim("DDG-1", "MNIST, actor D steps stale, D = 1000: DG without correction about 2% error, PG with exact IS about "
          "8%, REINFORCE fails", "2603.20521", "DG ~2%, IS ~8%, PG fails (s)", NAME,
          "MNIST at the largest delay of the grid (1000): dg, is, pg paired by seed", (DDG1_RATIO, DDG1_FAIL),
          "(a) exact IS's error exceeds DG's by at least a factor 3 (interval of the 20%-trimmed mean log(IS / DG) "
          "above log 3); (b) PG's error is above 0.5 (interval of its trimmed mean above 0.5).", judge_ddg1,
          ("mnist_delay",),
          decide="absolute levels are not comparable (5,000-image MNIST here, 60,000 in the paper); the ratio is",
          preconditions=(_healthy_sync(("dg", "is", "pg")),), cells=_cells_of("DDG-1"),
          sensitivity=(DATA_SIZE_SENSITIVITY, DG_ETA_SENSITIVITY)),
)
