"""Token reversal with each friction alone and all four together: DDG-2.

Setting (DDG arXiv 2603.20521, from a secondary summary: M = 2, H = 10, a decoder-only transformer with
d_model 64, 2 layers, 2 heads, 10 actors, 100 episodes per step, Adam): the testbed's token reversal
(testbed/tasks/token_reversal.py), one optimizer step per batch, 1,000 learner steps, 3 seeds; methods
pg, pmpo, ppo, dg (the paper's four). How the paper simulates its frictions is not known; ours are the
frozen preset of testbed/frictions.py (`token_reversal_preset`), calibrated on the baselines alone (PG,
PPO, PMPO; DG never run) by the rule in sweeps/calibration/RULE.md, its table in TABLE.md:

* staleness: each actor chunk lagged 0 or 1 versions uniformly (``uniform:1``);
* actor bugs: 2 of the 10 actors sample at temperature 2 while recording the clean policy's log-probs;
* reward corruption: 1% of episodes get 1 - r;
* rare discovery: nothing for fewer than 7 of the H = 10 tokens right, the fraction right above that
  (graded); without it every correct token earns its share (``partial_credit``), the task's documented
  "rare discovery off". At another H (DDG-3's sweep) the threshold keeps its fraction of H, rounded up
  (`rare_threshold`).

Metric: the fraction of sampled held-out sequences not exactly right (the paper's), each held-out
context sampled several times (``n_eval`` samples per evaluation); per seed the mean over the last 5%
of the evaluations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from figures import prereg
from figures.budgets import Budget
from figures.common import Context, arr, values
from figures.confirm import baselines_off_floor, solved_counts
from figures.evidence import Evidence as ExperimentEvidence
from figures.records import FRICTION_SENSITIVITY, Claim, Judgement, Margin, Precondition, judged_on
from figures.staging import cell_health, staged
from testbed.config import RunConfig
from testbed.frictions import TOKEN_REVERSAL_PRESET, token_reversal_preset
from testbed.util.stats import Outcome, at_most, fmt, rate, superiority

NAME = "token_frictions"
METHODS = ("pg", "pmpo", "ppo", "dg")
FAILED = 1.0  # a diverged run: every sequence wrong
CALIBRATED_H = 10  # the sequence length the preset was calibrated at (sweeps/calibration/RULE.md)
# the panel's settings, by name, and the preset's panel entry for each (testbed.frictions.PANEL)
SETTINGS = {"none": "none", "staleness": "staleness", "actor bugs": "bugs", "reward corruption": "corruption",
            "rare discovery": "rare", "all four": "all"}


def rare_threshold(min_correct: int, H: int) -> int:
    """The preset's rare-discovery threshold (``min_correct`` of `CALIBRATED_H` tokens right) at length ``H``:
    the same fraction of the sequence, ceil(min_correct * H / CALIBRATED_H), at least 1."""
    return max(1, math.ceil(min_correct * H / CALIBRATED_H))


def settings(b: Budget) -> dict[str, dict[str, Any]]:
    """name -> the frozen preset's run settings (``delay``, ``frictions``, ``task_args``) of that panel entry."""
    return {name: token_reversal_preset(which) for name, which in SETTINGS.items()}


def run(b: Budget, recipe: str, setting: str, seed: int, H: int | None = None) -> RunConfig:
    entry = settings(b)[setting]
    H = H or b.tr_H
    args = {"H": H, "M": b.tr_M, "n_eval": b.tr_n_eval, **entry["task_args"]}
    if "min_correct" in args:
        args["min_correct"] = rare_threshold(int(args["min_correct"]), H)
    return RunConfig(task="token_reversal", recipe=recipe, delay=entry["delay"], frictions=entry["frictions"],
                     seed=seed, steps=b.tr_steps, log_every=b.tr_log, n_actors=b.tr_actors, batch_size=b.tr_episodes,
                     task_args=args)


def cell(b: Budget, recipe: str, setting: str, H: int | None = None, seeds: tuple[int, ...] | None = None
         ) -> list[RunConfig]:
    return [run(b, recipe, setting, s, H) for s in (b.tr_seeds if seeds is None else seeds)]


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The first look's runs (``seeds``: those seeds instead)."""
    return [c for r in METHODS for s in settings(b) for c in cell(b, r, s, seeds=seeds)]


@dataclass
class Evidence(ExperimentEvidence):
    """Per cell ``"<method>|<setting>"`` (the panel's settings, `SETTINGS`), one value per seed: final sampled
    sequence error (``error``, every sequence wrong for a diverged run) and health flags (``health``); the
    sequence length ``H`` and the error floor of one evaluation (``floor``)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ("error", "health")

    settings: list[str] = field(default_factory=list)
    H: int = 0
    floor: float = float("nan")
    error: dict[str, list[float | None]] = field(default_factory=dict)
    health: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    confirmatory: bool = False  # the pre-registered design: solved seeds with exact tests, baselines off the floor


def describe(b: Budget) -> str:
    return (f"token reversal M = {b.tr_M}, H = {b.tr_H}, {b.tr_actors} actors, {b.tr_episodes} episodes per step, "
            f"{b.tr_steps:,} learner steps, {b.tr_design.seeds_shown()}; settings {', '.join(settings(b))}; frictions: "
            f"the calibrated preset {TOKEN_REVERSAL_PRESET} (testbed/frictions.py); methods {', '.join(METHODS)}")


def resolution_floor(b: Budget, H: int | None = None) -> float:
    """Half a sampled sequence of one evaluation: the floor of an error rate on the log scale."""
    import torch

    from testbed.tasks import make_task

    task = make_task("token_reversal", H=H or b.tr_H, M=b.tr_M, n_eval=b.tr_n_eval)
    return 0.5 / int(task.eval_contexts(torch.Generator().manual_seed(0)).shape[0])


def evidence(ctx: Context) -> Evidence:
    b = ctx.budget
    seeds = b.all_seeds("tr")

    def runs(train: list[int], claims: list | None) -> list[RunConfig]:
        return configs(b, tuple(train)) if claims is None else staged_runs(b, tuple(train), [c.id for c in claims])

    return staged(ctx, CLAIMS, b.tr_design, seeds, runs, lambda: _evidence(ctx, seeds))


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The runs a later look trains for DDG-2: every method with all four frictions."""
    return [c for r in METHODS for c in cell(b, r, "all four", seeds=seeds)] if claim_ids else []


def _evidence(ctx: Context, seeds: tuple[int, ...]) -> Evidence:
    b = ctx.budget
    table = ctx.rows(configs(b, seeds))
    ev = Evidence(grid=describe(b), seeds=list(seeds), settings=list(settings(b)), H=b.tr_H,
                  floor=resolution_floor(b), confirmatory=b.name == "confirmatory")
    for r in METHODS:
        for s in settings(b):
            ev.error[f"{r}|{s}"] = values(table, cell(b, r, s, seeds=seeds), "test_error", FAILED)
            ev.health[f"{r}|{s}"] = cell_health(ctx, cell(b, r, s, seeds=seeds))
    return ev


OFF_FLOOR = Margin(
    "off_floor", 0.95, "diff",
    "no number in the claim: a method has left the floor (every sequence wrong) when the interval of its trimmed "
    "mean sequence error lies below 0.95, i.e. it gets at least 5% of the sampled sequences exactly right")


def off_floor(errors: dict[str, Any], setting: str) -> tuple[str, str]:
    """Some method's sequence error is below OFF_FLOOR (a ranking of methods needs one off the floor)."""
    shown, undecided = [], False
    for r in METHODS:
        o = at_most(f"{r} off the floor", arr(errors.get(f"{r}|{setting}")), OFF_FLOOR.value)
        shown.append(f"{r.upper()} {fmt(arr(errors.get(f'{r}|{setting}')), 3, pct=True)}: {o.status}")
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


def unsolved_rates(error: dict[str, Any], cells: list[str], seeds: list[int]) -> list[Outcome]:
    """Per cell: the seeds whose final sequence error is above SOLVED, k of n with the exact interval (NaN errors,
    runs not finished, are not counted); ``seeds`` aligned with each cell's per-seed errors."""
    out = []
    for key in cells:
        errs = arr(error[key])
        flags = [None if not math.isfinite(x) else bool(x > SOLVED) for x in errs]
        bad = [f"seed {s}: {x:.1%}" for s, x, f in zip(seeds, errs, flags, strict=True) if f]
        known = sum(f is not None for f in flags)
        out.append(rate(f"{key}: seeds not solving the task (final error above {SOLVED:.0%})", flags,
                        "none" if not bad else "every seed" if len(bad) == known else "; ".join(bad)))
    return out


MARGINS = {"pg": _ratio_margin("pg", 59.5), "pmpo": _ratio_margin("pmpo", 14.5), "ppo": _ratio_margin("ppo", 9.5)}


@judged_on(NAME)
def judge_ddg2(ev: Evidence) -> Judgement:
    e, floor = ev.error, ev.floor
    dg = arr(e["dg|all four"])
    parts = [superiority(f"DG below {o.upper()} with all four frictions (ratio {o.upper()} / DG)", arr(e[f"{o}|all four"]),
                         dg, MARGINS[o].value, "log", floor) for o in ("pg", "pmpo", "ppo")]
    ours = f"H={ev.H}, all four: " + ", ".join(f"{r.upper()} {fmt(arr(e[f'{r}|all four']), 3, pct=True)}"
                                                  for r in METHODS)
    rates = unsolved_rates(e, [f"{r}|all four" for r in METHODS], ev.seeds)
    if ev.confirmatory:  # the registered design: solved seeds per method, Fisher's exact test; the ratios beside
        solved = float(prereg.load().section("ddg")["solved_error"])
        counts = [solved_counts(f"DG solves more seeds than {o.upper()} (error <= {solved:g})", dg,
                                arr(e[f"{o}|all four"]), solved) for o in ("pg", "pmpo", "ppo")]
        return Judgement(ours, counts, other_parts=[*parts, *rates])
    return Judgement(ours, parts, other_parts=rates)


def _off_floor_of_paper(ev: Evidence) -> tuple[str, str]:
    """The registered design's precondition: every baseline within ``ddg.floor_factor`` of its paper level."""
    if not ev.confirmatory:
        return "met", "a precondition of the registered design only"
    d = prereg.load().section("ddg")
    return baselines_off_floor({m: arr(ev.error.get(f"{m}|all four")) for m in d["paper_error"]}, d["paper_error"],
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
                                      "frictions under which PG, PMPO and PPO reach their paper levels within the "
                                      "factor: a calibration of the preset against the paper's baselines")),
          cells=lambda ev: [f"{r}|all four" for r in METHODS], seed_values=("error", "final sampled sequence error"),
          sensitivity=(FRICTION_SENSITIVITY,)),
)
