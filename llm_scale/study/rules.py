"""The study's rules, fixed by its sweep file: a search cell's degradation (`degrades`, Holm over the cells:
`holm_cells`) and a recipe's promotion (`promotion`)."""

from __future__ import annotations

import math
from typing import Any

import testbed.util.stats as stats
from testbed.util.stats import ALPHA

PROMOTION_VERDICTS = ("promote", "do not promote", "undecided", "no gap to close", "too few seeds")
# Settings left out of a run's key at these values: the behaviour of every run made before the setting existed
# (so those runs keep their keys); any other value, the default included, is part of the key.


# -- verdicts ---------------------------------------------------------------------------------------
def degrades(
    sync: dict[int, float], stale: dict[int, float], min_drop: float, min_se: float, eval_problems: int = 0,
    alpha: float | None = ALPHA,
) -> dict[str, Any]:  # fmt: skip
    """The search rule on one cell, paired by seed (same seed: same prompts and held-out problems in both arms).

    drop = mean_s (sync_s - stale_s) over the seeds both arms finished; the cell degrades when
    drop >= ``min_drop`` and drop >= ``min_se`` x SE(drop), SE = sd of the paired differences / sqrt(n),
    but never below the binomial floor of the evaluation itself, sqrt(p_1 (1 - p_1) / E + p_2 (1 - p_2) / E)
    / sqrt(n) with E = ``eval_problems`` scored per run: a few seeds whose differences happen to be equal
    (accuracies on E problems move in steps of 1 / E) would otherwise give SE 0; and the one-sided p-value
    of drop / SE on n - 1 degrees of freedom (``p_value``, `testbed.util.stats.p_greater`) is <= ``alpha``
    (the cell's level; over a grid, `holm_cells` sets it). ``alpha=None``: the size rule alone (a sweep file
    that fixes no ``[search] alpha``, as the studies run before the test was part of the rule).
    """
    ms, ss, ns = stats.mean_se(list(sync.values()))
    mt, st, nt = stats.mean_se(list(stale.values()))
    pairs = sorted(set(sync) & set(stale))
    drop, se, n = stats.mean_se([sync[k] - stale[k] for k in pairs])
    if eval_problems and n >= 2 and math.isfinite(ms + mt):
        se = max(se, stats.binomial_diff_sd(ms, mt, eval_problems, n))
    size = n >= 2 and math.isfinite(se) and drop >= min_drop and drop >= min_se * se
    p = stats.p_greater(drop, se, n - 1) if n >= 2 else math.nan
    return {"sync_acc": ms, "sync_se": ss, "stale_acc": mt, "stale_se": st, "drop": drop, "drop_se": se, "pairs": n,
            "n_sync": ns, "n_stale": nt, "size_ok": size, "p_value": p, "level": math.nan if alpha is None else alpha,
            "degrades": bool(size and (alpha is None or p <= alpha))}  # fmt: skip


def holm_cells(rows: list[dict[str, Any]], alpha: float) -> None:
    """Spend the search's error ``alpha`` over its cells by Holm's step-down (`testbed.util.stats.holm`), in place.

    Each row (a `degrades` record) gets ``level`` (the level of its rank) and ``degrades`` = its size rule
    holds and Holm rejects "no drop" for it. A cell whose size rule fails, or that is not complete, enters
    with p = 1 (it counts among the cells but cannot be rejected). Holm is monotone, so a cell rejected
    while others are unfinished stays rejected when they finish.
    """
    ps = [r["p_value"] if r["size_ok"] and r.get("complete", True) else math.nan for r in rows]
    for row, (rejected, level) in zip(rows, stats.holm(ps, alpha), strict=True):
        row["level"], row["degrades"] = level, bool(rejected)


def promotion(
    sync: dict[int, float], stale: dict[int, float], recipe: dict[int, float], *, threshold: float, alpha: float,
    min_seeds: int, gap_tol: float,
) -> dict[str, Any]:  # fmt: skip
    """The promotion rule for one recipe in the chosen cell (module docstring), paired by seed.

    Over the seeds all three arms finished: gap = mean(sync - stale); fraction = mean(recipe - stale) / gap
    with Fieller's paired interval at two-sided level 1 - 2 alpha (`testbed.util.stats.ratio_interval`).
    Verdict: "no gap to close" (fraction NaN) when gap < ``gap_tol``; "too few seeds" below ``min_seeds``
    pairs (fraction NaN when none pairs up); "promote" when the lower end > ``threshold``; "do not promote" when the
    upper end < ``threshold``; else "undecided". Promotion is the one-sided t test of
    mean(recipe - stale - threshold (sync - stale)) > 0 at alpha with the gap itself established.
    """
    seeds = sorted(set(sync) & set(stale) & set(recipe))
    num = [recipe[k] - stale[k] for k in seeds]
    den = [sync[k] - stale[k] for k in seeds]
    gap = sum(den) / len(den) if den else math.nan
    out = {"pairs": len(seeds), "gap": gap, "gap_tol": gap_tol, "threshold": threshold, "level": 1.0 - 2.0 * alpha,
           "min_seeds": min_seeds}  # fmt: skip
    if not seeds or gap < gap_tol:
        return {**out, "fraction_closed": math.nan, "fraction_lo": math.nan, "fraction_hi": math.nan,
                "verdict": "no gap to close" if seeds else "too few seeds"}  # fmt: skip
    iv = stats.ratio_interval(num, den, level=1.0 - 2.0 * alpha)
    if len(seeds) < min_seeds:
        verdict = "too few seeds"
    elif iv.lo > threshold:
        verdict = "promote"
    elif iv.hi < threshold:
        verdict = "do not promote"
    else:
        verdict = "undecided"
    return {**out, "fraction_closed": iv.estimate, "fraction_lo": iv.lo, "fraction_hi": iv.hi, "verdict": verdict}
