"""'Not testable' fires exactly when a claim's precondition fails or cannot be checked (figures/records.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from figures.evidence import Evidence
from figures.experiments import async_grpo, mnist_delay, mnist_samples, token_frictions
from figures.experiments.async_grpo.settings import RECIPES
from figures.records import Claim, Judgement, Precondition, assess, healthy_base
from testbed.util import stats


@dataclass
class _Values(Evidence):
    v: list[float] = field(default_factory=list)


def _claim(*pre: Precondition) -> Claim:
    return Claim("X-1", "", "", "", "e", "", (), "", lambda ev: Judgement("x", [stats.at_least("p", ev.v, 0.0)]),
                 (), preconditions=pre)


def _const(status: str) -> Precondition:
    return Precondition(f"always {status}", lambda ev: (status, "by construction"), "change the setting")


def test_not_testable_fires_when_a_precondition_fails_or_is_unknown():
    ev = _Values(seeds=[0, 1, 2], v=[1.0, 1.1, 0.9])
    assert assess(_claim(_const("met")), ev).verdict == "reproduced"
    for status in ("failed", "unknown"):
        j = assess(_claim(_const("met"), _const(status)), ev)
        assert j.verdict == "not testable"
        assert j.verdict_if_testable == "reproduced"  # the parts are still judged and shown
        assert f"always {status}: {status}" in j.note
    with pytest.raises(ValueError, match="precondition status"):
        assess(_claim(_const("maybe")), ev)


def _health(flags: list) -> dict:
    return {"health": flags, "diverged": [False] * len(flags), "stalled": [None] * len(flags)}


def test_healthy_base_tolerates_what_the_trimmed_mean_tolerates():
    pre = healthy_base(lambda ev: [("pg", "sync")], "fix it")
    def ev(health: dict) -> mnist_delay.Evidence:
        return mnist_delay.Evidence(seeds=list(range(5)), health={("pg", "sync"): health})

    ok = ev(_health(["healthy"] * 4 + ["lost_class"]))
    bad = ev(_health(["healthy"] * 3 + ["lost_class", "stalled"]))
    absent = ev(_health([None] * 5))
    assert pre.evaluate(ok)["status"] == "met"
    assert pre.evaluate(bad)["status"] == "failed"
    assert pre.evaluate(absent)["status"] == "unknown"
    assert pre.evaluate(Evidence(seeds=[0]))["status"] == "unknown"  # no health recorded at all
    diverged = ev({"health": ["healthy"] * 5, "diverged": [True, True, False, False, False]})
    assert pre.evaluate(diverged)["status"] == "failed"


def _dg1_evidence(pg_inf_over_ce: float) -> mnist_samples.Evidence:
    rng = np.random.default_rng(0)
    ce = 0.06 * np.exp(rng.normal(0, 0.01, 5))
    pg_inf = ce * pg_inf_over_ce * np.exp(rng.normal(0, 0.01, 5))
    return mnist_samples.Evidence(
        k=[1, 2], seeds=list(range(5)), floor=5e-4,
        error={("pg", "1"): list(ce * 1.3), ("dg", "1"): list(ce * 1.1), ("pg", "2"): list(ce * 1.2),
               ("dg", "2"): list(ce * 1.1), ("pg", "inf"): list(pg_inf), ("dg", "inf"): list(ce), ("ce",): list(ce)},
        health={("pg", "1"): _health(["healthy"] * 5)})


def test_dg1_part_b_is_not_testable_where_the_rule_has_no_room():
    claim = mnist_samples.CLAIMS[0]
    tight = assess(claim, _dg1_evidence(1.11))  # the embedded set: PG(k=inf) / CE = 1.11 < 1.167
    assert tight.verdict == "not testable"
    assert any(p["status"] == "failed" and "room" in p["name"] for p in tight.preconditions)
    roomy = assess(claim, _dg1_evidence(1.6))
    assert roomy.verdict != "not testable"
    assert all(p["status"] == "met" for p in roomy.preconditions)


def test_ddg2_is_not_testable_when_every_method_is_on_the_floor():
    claim = token_frictions.CLAIMS[0]
    rng = np.random.default_rng(1)

    def ev(dg_error: float) -> token_frictions.Evidence:
        e = {(r, "all four"): list(np.clip(0.999 + 0.0005 * rng.standard_normal(3), 0, 1)) for r in ("pg", "pmpo", "ppo")}
        e["dg", "all four"] = list(dg_error + 0.001 * rng.standard_normal(3))
        return token_frictions.Evidence(seeds=[0, 1, 2], H=10, floor=1e-4, error=e)

    floored = assess(claim, ev(0.999))
    assert floored.verdict == "not testable" and "floor" in floored.note
    assert assess(claim, ev(0.003)).verdict != "not testable"


def _async_evidence(across_stale: float | None, degrade: float = 0.15) -> async_grpo.Evidence:
    rng = np.random.default_rng(2)
    levels = ["sync", "bounded:8,4", "bounded:32,4"]
    err, cos, across, health = {}, {}, {}, {}
    for r in RECIPES:
        for i, d in enumerate(levels):
            err[(r, d)] = list(0.2 + (degrade if (r == "grpo" and i) else 0.0) + 0.005 * rng.standard_normal(5))
            cos[(r, d)] = list(0.5 + 0.01 * rng.standard_normal(5))
            val = np.nan if across_stale is None else (0.05 if i == 0 else across_stale)
            across[(r, d)] = list(val + 0.01 * rng.standard_normal(5))
            health[(r, d)] = _health(["healthy"] * 5)
    return async_grpo.Evidence(levels=levels, seeds=list(range(5)), floor=5e-4, registered=True, error=err, cos=cos,
                               cos_across=across, health=health)


def test_gac2_needs_the_stale_aligned_signal_and_a_degrading_base():
    gac2 = async_grpo.CLAIMS[1]
    assert gac2.id == "GAC-2"

    def status(ev: async_grpo.Evidence, word: str) -> str:
        return next(p["status"] for p in assess(gac2, ev).preconditions if word in p["name"])

    assert status(_async_evidence(0.6), "stale-aligned") == "met"
    assert status(_async_evidence(0.05), "stale-aligned") == "failed"
    assert status(_async_evidence(None), "stale-aligned") == "unknown"  # grad_cos_across not logged
    assert assess(gac2, _async_evidence(None)).verdict == "not testable"
    assert status(_async_evidence(0.6, degrade=0.0), "degrades") == "failed"
    assert assess(gac2, _async_evidence(0.6, degrade=0.0)).verdict == "not testable"
    assert assess(gac2, _async_evidence(0.6)).verdict != "not testable"


def test_the_report_lists_per_seed_the_values_each_claim_is_judged_on():
    from figures.claims import per_seed
    from figures.experiments import token_horizon

    ddg3 = token_horizon.CLAIMS[0]
    ev = token_horizon.Evidence(seeds=[0, 1, 2], H=[2, 4], longest={"pg": [2.0, 4.0, 0.0], "dg": [4.0, 4.0, None]},
                                error={"pg|2": [0.0, 0.0, 0.5], "dg|2": [0.0, 0.0, 0.0]})
    shown = per_seed(ddg3, ev, Judgement("x", [], verdict="inconclusive", stop={"n": 2}))
    assert shown["seeds"] == [0, 1] and shown["metric"] == "longest solved H (final sampled error <= 10%)"
    assert shown["cells"] == {"pg": [2.0, 4.0], "dg": [4.0, 4.0]}  # the judged seeds only, not the errors
    gac1 = next(c for c in async_grpo.CLAIMS if c.id == "GAC-1")
    ev = async_grpo.Evidence(seeds=[0, 1], levels=["sync"], error={("grpo", "sync"): [0.1, 0.2]},
                             cos={("grpo", "sync"): [0.3, 0.4]}, cos_exact={("grpo", "sync"): [0.05, float("nan")]})
    shown = per_seed(gac1, ev, Judgement("x", [], verdict="inconclusive"))  # the exact cosine GAC-1 is judged on
    assert shown["cells"] == {"grpo|sync": [0.05, None]} and "cosine" in shown["metric"]  # NaN shown as not run
    vcpo1 = next(c for c in mnist_delay.CLAIMS if c.id == "VCPO-1")
    events = [{"recipe": "is", "delay": "fixed:100", "seed": 0, "enough_history": True, "ess_drop": True,
               "grad_spike": False},
              {"recipe": "is", "delay": "fixed:100", "seed": 2, "enough_history": True, "ess_drop": False,
               "grad_spike": True},
              {"recipe": "pg", "delay": "fixed:1000", "seed": 1, "enough_history": False, "ess_drop": False,
               "grad_spike": False}]  # too early to judge: not one of VCPO-1's values
    ev = mnist_delay.Evidence(seeds=[0, 1, 2, 3], events=events)
    shown = per_seed(vcpo1, ev, Judgement("x", [], verdict="inconclusive", stop={"n": 3}))
    assert shown["seeds"] == [0, 1, 2] and "collapse" in shown["metric"]
    assert shown["cells"] == {"is|fixed:100 ESS drop": [1.0, None, 0.0], "is|fixed:100 spike": [0.0, None, 1.0]}
