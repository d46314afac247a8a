"""The sequential designs of the claims report (testbed/util/sequential.py, figures/staging.py).

Reference values: Lan-DeMets Pocock-type spending at one-sided 0.05 with three equally spaced looks gives
boundaries close to Pocock's constant 1.992 (Jennison and Turnbull 2000, table 2.1 interpolated to
one-sided 0.05: 1.993); the O'Brien-Fleming-type boundaries fall from above 3 to near z_{0.95} = 1.645.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from figures.claims import looks_text
from figures.experiments import mnist_delay
from figures.records import Claim, Judgement, assess, history_consistent, look_history
from figures.staging import staged
from testbed.util import stats
from testbed.util.sequential import Design, boundaries, equivalence_power, false_verdict_rate, spent


def test_spending_functions_spend_alpha_by_the_end():
    for kind in ("pocock", "obf"):
        assert spent(1.0, 0.05, kind) == pytest.approx(0.05, abs=1e-12)
        assert spent(0.0, 0.05, kind) == 0.0
        assert spent(0.5, 0.05, kind) < 0.05
    # O'Brien-Fleming type spends almost nothing early: 2 - 2 Phi(1.95996 / sqrt(0.25)) = 8.87e-5
    assert spent(0.25, 0.05, "obf") == pytest.approx(8.866e-5, rel=1e-3)
    assert spent(0.5, 0.05, "pocock") == pytest.approx(0.05 * math.log1p((math.e - 1) / 2), rel=1e-12)
    with pytest.raises(ValueError, match="spending"):
        spent(0.5, 0.05, "haybittle")


def test_boundaries_against_known_designs():
    c = boundaries((1 / 3, 2 / 3, 1.0), 0.05, "pocock")
    assert all(1.95 < x < 2.05 for x in c)  # Pocock's constant boundary, about 1.99
    o = boundaries((1 / 3, 2 / 3, 1.0), 0.05, "obf")
    assert o[0] > 3.0 and o[0] > o[1] > o[2]
    assert 1.645 < o[2] < 1.75
    # one look at t = 1 is the fixed design: z_{0.95}
    assert boundaries((1.0,), 0.05, "pocock")[0] == pytest.approx(1.644854, abs=1e-5)
    with pytest.raises(ValueError, match="increase"):
        boundaries((0.5, 0.5), 0.05)


def test_design_looks_and_levels():
    d = Design(5, 5, 15)
    assert d.looks == (5, 10, 15)
    assert Design(3, 4, 9).looks == (3, 7, 9)
    assert Design(2, 1, 2).looks == (2,) and Design(2, 1, 2).level(0) == pytest.approx(1 - 2 * d.alpha)
    levels = [d.level(k) for k in range(3)]
    assert all(1 - 2 * d.alpha < x < 1 for x in levels)  # every look stricter than the fixed design
    with pytest.raises(ValueError, match="n0"):
        Design(6, 1, 5)


def _superiority(delta: float):
    return lambda v, level: stats.decide_superiority(stats.trimmed_interval(v, level), delta)[0]


class _Naive(Design):
    """Looks again and again at the fixed design's 90% interval: what the design exists to prevent."""

    def level(self, look: int) -> float:
        return stats.LEVEL


@pytest.mark.slow
def test_sequential_stopping_keeps_its_error_budget_on_null_data():
    """3,000 simulated claims whose true effect sits exactly on the margin (so "holds" is a false verdict), each
    judged at 5, 10 and 15 seeds: the false-verdict rate stays within ALPHA plus Monte-Carlo slack (2.33 standard
    errors of a rate of ALPHA at 3,000 draws: 0.0093). The same looks at a fixed 90% interval exceed it."""
    reps = 3000
    slack = 2.33 * math.sqrt(stats.ALPHA * (1 - stats.ALPHA) / reps)
    draw = lambda rng, n: rng.normal(0.3, 1.0, n)  # noqa: E731
    design = Design(5, 5, 15)
    rate, se, used = false_verdict_rate(_superiority(0.3), draw, design, "holds", reps, seed=1)
    assert rate <= stats.ALPHA + slack, (rate, se)
    assert 5 < used <= 15
    naive, _, _ = false_verdict_rate(_superiority(0.3), draw, _Naive(5, 5, 15), "holds", reps, seed=1)
    assert naive > stats.ALPHA + slack  # repeated looks at a fixed level inflate the error
    # bimodal null data (a seed in ten loses a class and lands far off): the budget holds too
    bimodal = lambda rng, n: rng.normal(0.3, 1.0, n) + 4.0 * (rng.random(n) < 0.1)  # noqa: E731
    rate_b, _, _ = false_verdict_rate(_superiority(0.3 + 0.4), bimodal, design, "holds", reps, seed=2)
    assert rate_b <= stats.ALPHA + slack


def test_equivalence_power_two_looks_keeps_the_budget_and_has_power_at_zero():
    """A two-look equivalence design (24 then 48 seeds, Pocock, alpha 0.05): at an effect on the margin its false
    "holds" rate stays within ALPHA plus Monte-Carlo slack (2.33 standard errors at 1,500 draws); at effect 0 with
    sd / tol = 1.8 it decides "holds" in more than 90% of claims, most of them at the first look, and never "fails"."""
    reps = 1500
    slack = 2.33 * math.sqrt(stats.ALPHA * (1 - stats.ALPHA) / reps)
    design = Design(24, 24, 48, alpha=stats.ALPHA)
    edge = equivalence_power(design, 1.8, 1.0, 1.0, reps=reps, seed=3)
    assert edge["holds"] <= stats.ALPHA + slack, edge
    null = equivalence_power(design, 1.8, 0.0, 1.0, reps=reps, seed=4)
    assert null["holds"] > 0.9 and null["fails"] == 0.0, null
    assert 24 <= null["mean_seeds"] < 36, null  # most claims stop at the first look


def test_truncated_keeps_the_first_seeds_and_their_events():
    ev = mnist_delay.Evidence(
        seeds=[0, 1, 2, 3], error={("a", "x"): [1, 2, 3, 4], ("b", "x"): [5, 6, None, 8]},
        health={("a", "x"): {"health": ["healthy", None, "stalled", "healthy"], "diverged": [False] * 4}},
        delays=["sync", "fixed:10", "fixed:100", "fixed:1000"], events=[{"seed": 0}, {"seed": 3}], floor=1e-4)
    t = ev.truncated(2)
    assert t.seeds == [0, 1] and t.error == {("a", "x"): [1, 2], ("b", "x"): [5, 6]}
    assert t.health["a", "x"]["health"] == ["healthy", None]
    assert t.delays == ev.delays  # not per seed: untouched
    assert t.events == [{"seed": 0}]
    assert ev.truncated(4) is ev and ev.seeds == [0, 1, 2, 3]  # the original is not changed


class _Ctx:
    def __init__(self, cached_only: bool = False, cached: set | None = None) -> None:
        self.trained: list[list] = []
        self.cached_only, self.cached = cached_only, cached

    def ensure(self, configs: list) -> None:
        self.trained.append(list(configs))

    def uncached(self, configs: list) -> int:
        return sum(c not in self.cached for c in configs) if self.cached is not None else 0


def test_staged_adds_seeds_only_to_undecided_claims_and_records_why_each_stopped():
    rng = np.random.default_rng(0)
    seeds = tuple(range(15))
    clear = 1.0 + 0.01 * rng.standard_normal(15)  # decided at the first look
    vague = 0.3 + 1.0 * rng.standard_normal(15)  # stays undecided up to the cap

    def judge(key):
        def j(ev):
            return Judgement("x", [stats.at_least("above 0", ev.error[key], 0.0)])
        return j

    def settled(ev):  # undecided, and its judge knows that no later look can change that
        return Judgement("x", [stats.at_least("above 0", ev.error["vague"], 0.0)], verdict="inconclusive",
                         settled="by construction")

    claims = (Claim("A", "", "", "", "e", "", (), "", judge("clear"), ()),
              Claim("B", "", "", "", "e", "", (), "", judge("vague"), ()),
              Claim("C", "", "", "", "e", "", (), "", settled, ()))
    ctx = _Ctx()
    trained = set()

    def runs(train, cls):
        names = ["A", "B", "C"] if cls is None else [c.id for c in cls]
        out = [(name, s) for name in names for s in train]
        trained.update(out)
        return out

    def build():
        def col(name, v):
            return [float(v[s]) if (name, s) in trained else None for s in seeds]
        return mnist_delay.Evidence(seeds=list(seeds), error={"clear": col("A", clear), "vague": col("B", vague)})

    ev = staged(ctx, claims, Design(5, 5, 15), seeds, runs, build)
    a, b = ev.sequential["A"], ev.sequential["B"]
    assert (a["n"], a["look"], a["verdict"]) == (5, 0, "reproduced") and a["reason"].startswith("decided at look 1")
    assert b["n"] == 15 and b["reason"] == "cap reached"
    assert not any(name == "A" and s >= 5 for name, s in trained)  # no seed bought for a decided claim
    c = ev.sequential["C"]  # nor for one that more seeds cannot decide
    assert (c["n"], c["verdict"], c["reason"]) == (5, "inconclusive", "settled at look 1: more seeds cannot decide "
                                                                      "it (by construction)")
    assert not any(name == "C" and s >= 5 for name, s in trained)
    hc = look_history(claims[2], ev)
    assert [h["settled"] for h in hc] == ["by construction"] and history_consistent(hc, "inconclusive")
    assert ev.design["looks"] == [5, 10, 15]
    assert b["level"] == pytest.approx(Design(5, 5, 15).level(2))

    # the looks again, from the final evidence cut to each look's seeds: they lead to the recorded stops
    hb = look_history(claims[1], ev)
    assert [(h["n"], h["verdict"]) for h in hb] == [(5, "inconclusive"), (10, "inconclusive"), (15, "inconclusive")]
    assert [h["level"] for h in hb] == pytest.approx([Design(5, 5, 15).level(k) for k in range(3)])
    assert all(h["seeds_needed"] > 15 for h in hb) and history_consistent(hb, b["verdict"])
    text = looks_text(hb, 15, True)
    assert "look 3 (15 seeds): inconclusive, n* " in text and text.count("(beyond the cap of 15)") == 3
    ran_on = [{**h, "settled": "by construction"} for h in hb[:2]]  # a record made before it could stop there
    assert looks_text(ran_on, 15, True).count(", settled: more seeds cannot decide it") == 2
    assert "these data went on past it" in looks_text(ran_on, 15, True)
    assert "went on past" not in looks_text([{**hb[0], "settled": ""}, {**hb[1], "settled": "x"}], 15, True)
    ha = look_history(claims[0], ev)
    assert [(h["n"], h["verdict"]) for h in ha] == [(5, "reproduced")] and looks_text(ha, 15, True) == ""
    # a record that claims A ran on to its second look although the first already decided it is inconsistent
    moved = dataclasses.replace(ev, sequential={**ev.sequential, "A": {**a, "n": 10, "look": 1}})
    hm = look_history(claims[0], moved)
    assert [h["verdict"] for h in hm] == ["reproduced", "reproduced"] and not history_consistent(hm, "reproduced")
    assert look_history(claims[0], dataclasses.replace(ev, design=None)) == []  # no design: no looks to replay


def test_the_estimate_plans_the_first_look_and_the_cap():
    from figures.estimate import CAP_ROW, plan

    quick = dict(plan(2, quick=True, cap=True))
    assert sum(len(loop) for loop in quick[CAP_ROW]) == 0  # the quick designs have one look
    full = plan(2, quick=False, cap=True)
    first = {c.run_id for name, loops in full if name != CAP_ROW for loop in loops for c in loop}
    extra = [c for loop in dict(full)[CAP_ROW] for c in loop]
    assert extra and not first & {c.run_id for c in extra}
    assert max(c.seed for c in extra) == 14  # MNIST and async-GRPO designs: cap 15 seeds


def test_the_grid_line_counts_the_seeds_a_design_may_add():
    from testbed.util.sequential import Design

    assert Design(5, 5, 15).seeds_shown() == "5 seeds at the first look, up to 15 where a claim's design adds seeds"
    assert Design(3, 3, 3).seeds_shown() == "3 seeds"  # one look: nothing is added


def test_a_partial_report_stops_at_the_last_look_the_cache_holds():
    """--cached-only: a later look whose runs are not all cached is not taken; the claims it would have judged
    stop at the look before, saying so (never "cap reached" on the first look's seeds)."""
    rng = np.random.default_rng(0)
    seeds = tuple(range(15))
    vague = 0.3 + 1.0 * rng.standard_normal(15)
    claims = (Claim("B", "", "", "", "e", "", (), "", lambda ev: Judgement("x", [stats.at_least("above 0", ev.error["vague"], 0.0)]), ()),)
    cached = {("B", s) for s in range(5)}
    ctx = _Ctx(cached_only=True, cached=cached)

    def runs(train, cls):
        return [("B", s) for s in train]

    def build():
        return mnist_delay.Evidence(seeds=list(seeds), error={"vague": [float(vague[s]) if ("B", s) in cached else None
                                                                         for s in seeds]})

    ev = staged(ctx, claims, Design(5, 5, 15), seeds, runs, build)
    b = ev.sequential["B"]
    assert (b["n"], b["look"], b["verdict"]) == (5, 0, "inconclusive")
    assert b["reason"] == "look 2 of 3 not yet run (--cached-only)"
    assert ctx.trained == [[("B", s) for s in range(5)]]  # nothing asked of the later looks


def test_a_partial_report_does_not_judge_a_part_trained_first_look():
    """--cached-only with only some of the first look's runs cached: the evidence is built (the figure shows it),
    but the claims read "inconclusive", naming how many runs are missing and what the cached ones alone say."""
    seeds = tuple(range(5))
    claims = (Claim("C", "", "", "", "e", "", (), "", lambda ev: Judgement("x", [stats.at_least("above 0", ev.error["clear"], 0.0)]), ()),)
    cached = {("C", s) for s in range(3)}
    ctx = _Ctx(cached_only=True, cached=cached)

    def build():
        return mnist_delay.Evidence(seeds=list(seeds), error={"clear": [1.0 + 0.01 * s if ("C", s) in cached else None
                                                                        for s in seeds]})

    ev = staged(ctx, claims, Design(5, 5, 5), seeds, lambda train, cls: [("C", s) for s in train], build)
    c = ev.sequential["C"]
    assert (c["n"], c["missing"], c["verdict"]) == (5, 2, "inconclusive")
    assert c["reason"] == "look 1 of 1: 2 of 5 runs not yet run (--cached-only)"
    j = assess(claims[0], ev)
    assert j.verdict == "inconclusive" and j.note.startswith("not judged: 2 of its runs not yet run; the cached runs "
                                                             "alone read 'reproduced'")
    whole = staged(_Ctx(cached_only=True, cached={("C", s) for s in seeds}), claims, Design(5, 5, 5), seeds,
                   lambda train, cls: [("C", s) for s in train], build)
    assert "missing" not in whole.sequential["C"]  # every run cached: judged as usual
