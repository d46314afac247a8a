"""The token_frictions experiment's claims: their margins, preconditions and judges (figures/records.py); no plotting."""

from __future__ import annotations

import math
from typing import Any

from figures import prereg
from figures.common import arr
from figures.confirm import baselines_off_floor, solved_counts
from figures.evidence import Cell, label
from figures.experiments.token_frictions.evidence import Evidence
from figures.experiments.token_frictions.settings import METHODS, NAME
from figures.records import Claim, Judgement, Margin, Precondition, Sensitivity, judged_on
from testbed.util.stats import Outcome, at_most, fmt, rate, superiority

FRICTION_SENSITIVITY = Sensitivity(
    "the token-reversal frictions' kinds and strengths and the budget unit", "sweeps/calibration/TABLE.md",
    "the baselines' sequence error under each candidate friction, alone and all four together")


OFF_FLOOR = Margin(
    "off_floor", 0.95, "diff",
    "no number in the claim: a method has left the floor (every sequence wrong) when the interval of its trimmed "
    "mean sequence error lies below 0.95, i.e. it gets at least 5% of the sampled sequences exactly right")


def off_floor(errors: dict[str, Any], setting: str) -> tuple[str, str]:
    """Some method's sequence error is below OFF_FLOOR (a ranking of methods needs one off the floor)."""
    shown, undecided = [], False
    for r in METHODS:
        o = at_most(f"{r} off the floor", arr(errors.get((r, setting))), OFF_FLOOR.value)
        shown.append(f"{r.upper()} {fmt(arr(errors.get((r, setting))), 3, pct=True)}: {o.status}")
        if o.status == "holds":
            return "met", "; ".join(shown)
        undecided |= o.status == "undecided"
    if undecided:
        return "met", "; ".join(shown) + " (undecided: the parts stay inconclusive and seeds are added)"
    return "failed", "every method's sequence error is above 95%: " + "; ".join(shown)


def _ratio_margin(other: str, low: float) -> Margin:
    return Margin(f"delta_{other}", math.log(low / 0.35), "log",
                  f"paper (s): {other.upper()} about {low + 0.5:g}% vs DG 0.3%. Read as rounded at their last digits, "
                  f"{other.upper()} in [{low:g}, {low + 1:g})% and DG in [0.25, 0.35)%: the smallest ratio they allow "
                  f"is {low:g} / 0.35 = {low / 0.35:.3g}")


# A run solves the task when its final sampled sequence error is at most SOLVED (DDG-3's threshold, declared with
# its grid). Token reversal's failures are partial: a run that learns most of the task but ends with a fifth or
# more of its sequences wrong is not stalled, diverged or short of a class, so the health rate does not see it;
# the per-cell rate of runs that do not solve the task shows it beside the verdict (never part of it).
SOLVED = 0.10


def unsolved_rates(error: dict[Cell, Any], cells: list[Cell], seeds: list[int]) -> list[Outcome]:
    """Per cell: the seeds whose final sequence error is above SOLVED, k of n with the exact interval (NaN errors,
    runs not finished, are not counted); ``seeds`` aligned with each cell's per-seed errors."""
    out = []
    for key in cells:
        errs = arr(error[key])
        flags = [None if not math.isfinite(x) else bool(x > SOLVED) for x in errs]
        bad = [f"seed {s}: {x:.1%}" for s, x, f in zip(seeds, errs, flags, strict=True) if f]
        known = sum(f is not None for f in flags)
        out.append(rate(f"{label(key)}: seeds not solving the task (final error above {SOLVED:.0%})", flags,
                        "none" if not bad else "every seed" if len(bad) == known else "; ".join(bad)))
    return out


MARGINS = {"pg": _ratio_margin("pg", 59.5), "pmpo": _ratio_margin("pmpo", 14.5), "ppo": _ratio_margin("ppo", 9.5)}


@judged_on(NAME)
def judge_ddg2(ev: Evidence) -> Judgement:
    e, floor = ev.error, ev.floor
    dg = arr(e["dg", "all four"])
    parts = [superiority(f"DG below {o.upper()} with all four frictions (ratio {o.upper()} / DG)", arr(e[o, "all four"]),
                         dg, MARGINS[o].value, "log", floor) for o in ("pg", "pmpo", "ppo")]
    ours = f"H={ev.H}, all four: " + ", ".join(f"{r.upper()} {fmt(arr(e[r, 'all four']), 3, pct=True)}"
                                                  for r in METHODS)
    rates = unsolved_rates(e, [(r, "all four") for r in METHODS], ev.seeds)
    if ev.confirmatory:  # the registered design: solved seeds per method, Fisher's exact test; the ratios beside
        solved = float(prereg.load().section("ddg")["solved_error"])
        counts = [solved_counts(f"DG solves more seeds than {o.upper()} (error <= {solved:g})", dg,
                                arr(e[o, "all four"]), solved) for o in ("pg", "pmpo", "ppo")]
        return Judgement(ours, counts, other_parts=[*parts, *rates])
    return Judgement(ours, parts, other_parts=rates)


def _off_floor_of_paper(ev: Evidence) -> tuple[str, str]:
    """The registered design's precondition: every baseline within ``ddg.floor_factor`` of its paper level."""
    if not ev.confirmatory:
        return "met", "a precondition of the registered design only"
    d = prereg.load().section("ddg")
    return baselines_off_floor({m: arr(ev.error.get((m, "all four"))) for m in d["paper_error"]}, d["paper_error"],
                               float(d["floor_factor"]))


CLAIMS = (
    Claim("DDG-2", "token reversal (M = 2, H = 10) with staleness, actor bugs, reward corruption and rare discovery "
          "together: sequence error PG about 60%, PMPO 15%, PPO 10%, DG 0.3%", "2603.20521",
          "PG 60%, PMPO 15%, PPO 10%, DG 0.3% (s)", NAME,
          "token reversal H = 10, all four frictions; dg vs pg, pmpo, ppo paired by seed", tuple(MARGINS.values()),
          "For each of PG, PMPO and PPO: its error exceeds DG's by at least the smallest ratio the paper's rounded "
          "numbers allow (90% interval of the log ratio above it; error rates floored at half a sampled sequence of "
          "one evaluation).", judge_ddg2, ("token_frictions",),
          mechanism="the frictions are the preset calibrated on PG, PPO and PMPO alone (testbed/frictions.py, "
          "sweeps/calibration/TABLE.md): no candidate brought the baselines near the paper's numbers (its all-four "
          "panel left them at 88-91% sequence error, not 10-60%), so a ranking here compares methods in a harder "
          "setting than the paper's",
          decide="the paper's frictions are not public: ours are calibrated choices (testbed/frictions.py); a "
          "different simulation of them could change the ranking",
          preconditions=(Precondition("some method leaves the floor with all four frictions",
                                      lambda ev: off_floor(ev.error, "all four"),
                                      "a budget or rare-discovery strength at which at least one method solves "
                                      "some sequences (more learner steps, or a shorter H)"),
                         Precondition("the baselines are not at the floor (within a stated factor of the paper's "
                                      "levels)", _off_floor_of_paper,
                                      "baselines that reach their paper levels within the factor: neither the "
                                      "frictions' calibration nor the 1M-episode budget nor PMPO's screened "
                                      "recipes bring PMPO there, even without frictions (sweeps/calibration/"
                                      "RULE.md, stages 5 and the PMPO screen); the paper's own PMPO settings or a "
                                      "PMPO with a bounded rejected-sample term, screened on the baselines alone")),
          cells=lambda ev: [(r, "all four") for r in METHODS], seed_values=("error", "final sampled sequence error"),
          sensitivity=(FRICTION_SENSITIVITY,)),
)
