"""The confirmatory design's measurements: where each claim's effect can show, and how its tail is judged.

Pure functions on per-seed arrays, one per rule of figures/preregistration.toml (docs/claims_protocol.md):

* the learning phase (`registered_window`, `phase_endpoints`; the rules in testbed/util/endpoints.py): the
  window of versions in which the *base* (grpo at sync) makes the registered share of its error drop, read from
  the base's curve only, never a method's; the endpoint is the mean error over that window (the area under the
  learning curve divided by its width);
* the fingerprint like for like (`fingerprint_gap`): token-level ESS against token-level ESS, sequence-level
  only at equal sequence length, clip fraction by lag;
* stability (`collapsed`, `high_error`, `stability_parts`): the plain paired mean and the collapse rate with
  exact intervals, a collapse defined against the paired sync cell, and staleness-caused collapses counted
  only where the paired sync run did not collapse (exact McNemar test);
* GAC's signal where it is not capped (`cosine_cap`, `accumulated_cosines`, `accumulation`): two gradient
  estimates of a mean gradient g from m samples each, with noise scale B = tr(Sigma) / |g|^2 (McCandlish et al.
  2018, arXiv 1812.06162), have expected cosine about r / (1 + r), r = m / B, whatever the optimizer does;
* VCPO-1's spike rule against a stated reference (`SpikeReference`: the steps just before, `local_spikes`, or the
  run's learning-phase level, `early_spikes`), its factor calibrated on quiet runs (`false_alarm_rate`,
  `calibrate_factor`);
* DDG-2's floor precondition and solved-seed test (`baselines_off_floor`, `solved_counts`), DDG-3's unit grid
  and per-seed exact comparison (`unit_grid`, `longest_solved`, `grid_covers`, `exceeds_by`);
* margins from the testbed's own resolution (`resolution_margin`), and whether a verdict sits on an edge
  (`near_edge`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from figures import prereg
from figures.records import Margin
from testbed.util.endpoints import endpoint_per_seed, learning_window
from testbed.util.stats import (
    ALPHA,
    BETA,
    Interval,
    Outcome,
    binomial_diff_sd,
    current_level,
    decide_equivalence,
    decide_superiority,
    difference,
    mcnemar_greater,
    proportion,
    t_quantile,
)

# --- (a) the learning phase ----------------------------------------------------------------------------


def registered_window(versions: Sequence[float], base_error: Any) -> tuple[float, float]:
    """The learning window of the registered phase rule (preregistration.toml ``[phase]`` progress_lo,
    progress_hi) on the base's curves ``base_error`` [seeds, versions] (`testbed.util.endpoints.learning_window`)."""
    ph = prereg.load().section("phase")
    return learning_window(versions, base_error, ph["progress_lo"], ph["progress_hi"])


def phase_endpoints(versions: Sequence[float], curves: Mapping[Any, Any], base: Any
                    ) -> tuple[tuple[float, float], dict[Any, np.ndarray]]:
    """The registered learning window on ``curves[base]`` (`registered_window`, the base's curves alone) and per
    cell of ``curves`` ([seeds, versions] test error) the per-seed mean error over it
    (`testbed.util.endpoints.endpoint_per_seed`): the learning-phase endpoint of every cell."""
    window = registered_window(versions, np.array(curves[base], dtype=float))
    return window, {k: endpoint_per_seed(versions, np.array(v, dtype=float), window) for k, v in curves.items()}


# --- (b) the fingerprint, like for like ---------------------------------------------------------------


def fingerprint_gap(testbed: Sequence[Mapping[str, Any]], real: Sequence[Mapping[str, Any]], lags: Sequence[int],
                    ess_tol: float, clip_tol: float, unit: str = "token",
                    seq_len: tuple[float, float] | None = None) -> dict[str, Any]:
    """Per lag, the testbed's minus the real model's ESS (``unit`` token: ``ess_token`` of both; sequence:
    ``ess_seq`` of both, only when ``seq_len`` = (testbed's, real's) sequence lengths are equal) and clip
    fraction; ``status`` met when every difference is within its tolerance, failed when one is not, unknown
    when a lag is missing on either side. Rows: llm_scale's fingerprint schema (``staleness`` entries)."""
    if unit not in ("token", "sequence"):
        raise ValueError(f"unit must be 'token' or 'sequence', got {unit!r}")
    if unit == "sequence" and (seq_len is None or seq_len[0] != seq_len[1]):
        raise ValueError(f"sequence-level ESS compares only at equal sequence lengths, got {seq_len!r}: compare "
                         "token-level ESS instead")
    key = "ess_token" if unit == "token" else "ess_seq"
    t, r = {int(x["lag"]): x for x in testbed}, {int(x["lag"]): x for x in real}
    rows, status = [], "met"
    for lag in lags:
        if lag not in t or lag not in r or t[lag].get(key) is None or r[lag].get(key) is None:
            rows.append({"lag": lag, "ess_diff": None, "clip_diff": None})
            status = "unknown" if status == "met" else status
            continue
        de = float(t[lag][key]) - float(r[lag][key])
        dc = float(t[lag]["clip_frac"]) - float(r[lag]["clip_frac"])
        rows.append({"lag": lag, "ess_diff": de, "clip_diff": dc})
        if abs(de) > ess_tol or abs(dc) > clip_tol:
            status = "failed"
    return {"status": status, "unit": unit, "rows": rows}


# --- (c) stability: the tail is the effect -------------------------------------------------------------


def collapsed(error: Any, sync_error: Any, multiple: float, floor: float) -> np.ndarray:
    """Per seed: error above max(``multiple`` x the median of the paired sync cell, ``floor``) (NaN -> False)."""
    e = np.asarray(error, dtype=float)
    ref = max(multiple * float(np.nanmedian(np.asarray(sync_error, dtype=float))), floor)
    with np.errstate(invalid="ignore"):
        return np.isfinite(e) & (e > ref)


def high_error(error: Any, limit: float) -> list[bool | None]:
    """The health flag that sees a high-error seed: True where the final error exceeds ``limit``, None where
    the seed has no value (a seed at 37.5% error is unhealthy at ``limit`` 0.25, whichever classes it predicts)."""
    return [None if not math.isfinite(x) else bool(x > limit) for x in np.asarray(error, dtype=float)]


def _plain(name: str, kind: str, a: Any, b: Any, margin: float, floor: float, detail: str) -> Outcome:
    iv = difference(a, b, "log", floor, estimator="mean")
    status, need = (decide_equivalence(iv, margin) if kind == "equivalence" else decide_superiority(iv, margin))
    return Outcome(name, kind, status, margin, "log", iv, need, detail)


def stability_parts(name: str, reference: Any, candidate: Any, sync_ref: Any, sync_cand: Any, kind: str,
                    margin: float, floor: float, multiple: float, collapse_floor: float) -> list[Outcome]:
    """A stability claim's parts on per-seed errors, paired by seed: the plain paired mean of log errors
    (t interval: no seed trimmed) against ``margin`` (``kind`` "equivalence": candidate matches reference;
    "superiority": candidate worse than reference by more than margin), and the candidate's
    staleness-caused collapses (`collapsed` against its own paired sync cell ``sync_cand``, `mcnemar_greater`):
    for "superiority", a significant excess of collapses (p < ALPHA) also makes the part hold."""
    if kind not in ("equivalence", "superiority"):
        raise ValueError(f"kind must be 'equivalence' or 'superiority', got {kind!r}")
    mean = _plain(name, kind, reference, candidate, margin, floor, "plain paired mean of log errors")
    cc = collapsed(candidate, sync_cand, multiple, collapse_floor)
    cr = collapsed(reference, sync_ref, multiple, collapse_floor)
    m = mcnemar_greater(cc, collapsed(sync_cand, sync_cand, multiple, collapse_floor))
    iv = Interval(m["rate"], m["lo"], m["hi"], m["n"], float("nan"), float("nan"), 0.0, level=current_level())
    caused = Outcome(f"{name}: staleness-caused collapses", "proportion", "n/a", float("nan"), "diff", iv, None,
                     f"{m['caused']} of {m['n']} seeds collapse where their sync run does not (exact McNemar "
                     f"p = {m['p']:.3g}); reference collapses {int(cr.sum())} of {cr.size}",
                     {"mcnemar_p": m["p"], "candidate_collapses": int(cc.sum()), "reference_collapses": int(cr.sum())})
    if kind == "superiority" and m["p"] < ALPHA and mean.status != "holds":
        mean.status, mean.seeds_needed = "holds", None
        mean.detail += f"; holds by its collapses (exact McNemar p = {m['p']:.3g} < {ALPHA})"
    return [mean, caused]


# --- (d) GAC's cosine where the noise does not cap it -----------------------------------------------------


def cosine_cap(r: float) -> float:
    """r / (1 + r): the expected cosine of two independent m-sample estimates of one mean gradient, r = m / B_noise
    (E[g1 . g2] = |g|^2, E|g_i|^2 = |g|^2 (1 + 1 / r)); what staleness must beat to show in the cosine."""
    return r / (1.0 + r) if r >= 0 else float("nan")


def accumulation(b_noise: float, minibatch: int, r_min: float) -> int:
    """Consecutive minibatch gradients to sum so that the accumulated sample count reaches r_min x B_noise."""
    if not (b_noise > 0 and minibatch >= 1 and r_min > 0):
        raise ValueError(f"need b_noise > 0, minibatch >= 1, r_min > 0; got {b_noise}, {minibatch}, {r_min}")
    return max(1, math.ceil(r_min * b_noise / minibatch))


def accumulated_cosines(grads: Any, k: int) -> np.ndarray:
    """Cosines between consecutive sums of ``k`` consecutive gradients (rows of ``grads`` [T, P]; blocks
    [0, k), [k, 2k), ...; a last partial block is dropped): r grows k-fold, the cap moves to kr / (1 + kr)."""
    g = np.asarray(grads, dtype=float)
    n = g.shape[0] // k
    if n < 2:
        return np.array([])
    s = g[: n * k].reshape(n, k, -1).sum(axis=1)
    a, b = s[:-1], s[1:]
    return np.einsum("ij,ij->i", a, b) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# --- (e) VCPO-1's spike rule: a stated reference, a calibrated factor ------------------------------------


def local_spikes(norms: Any, window: int, factor: float) -> np.ndarray:
    """Per step t: norm_t > factor x median(norm_{t-window} .. norm_{t-1}) (False for the first ``window``
    steps): a spike against the run's recent level, not against its whole history, so a slow drift does not
    count."""
    x = np.asarray(norms, dtype=float)
    out = np.zeros(x.size, dtype=bool)
    if x.size <= window:
        return out
    ref = np.median(np.lib.stride_tricks.sliding_window_view(x[:-1], window), axis=1)
    out[window:] = x[window:] > factor * ref
    return out


def early_spikes(norms: Any, early: int, factor: float) -> np.ndarray:
    """Per step t: norm_t > factor x median(norm_1 .. norm_early) (False for those first ``early`` steps): a spike
    against the run's own learning-phase level. Unlike `local_spikes` it does not follow the norm down when a
    policy converges: there most batches carry no signal, the recent median falls towards zero and any batch that
    does carry one is a large multiple of it."""
    x = np.asarray(norms, dtype=float)
    out = np.zeros(x.size, dtype=bool)
    if x.size <= early:
        return out
    out[early:] = x[early:] > factor * np.median(x[:early])
    return out


def history_spikes(norms: Any, factor: float) -> np.ndarray:
    """The exploratory rule, for comparison: norm_t > factor x the median of every earlier step's norm."""
    x = np.asarray(norms, dtype=float)
    return np.array([t > 0 and x[t] > factor * np.median(x[:t]) for t in range(x.size)], dtype=bool)


@dataclass(frozen=True)
class SpikeReference:
    """What a gradient-norm spike is measured against (figures/preregistration.toml [spike]): ``kind`` "local",
    the median of the ``steps`` steps before it (`local_spikes`), or "early", the median of the run's first
    ``steps`` learner steps (`early_spikes`)."""

    kind: str = "local"
    steps: int = 20

    KINDS: ClassVar[tuple[str, ...]] = prereg.SPIKE_REFERENCES

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS or self.steps < 1:
            raise ValueError(f"a spike reference is one of {', '.join(self.KINDS)} over >= 1 steps, got "
                             f"{self.kind!r} over {self.steps}")

    @classmethod
    def of(cls, section: Mapping[str, Any]) -> SpikeReference:
        """The reference a [spike] section states: ``reference`` (default "local") over ``window`` steps (local) or
        ``early_steps`` (early)."""
        kind = str(section.get("reference", "local"))
        return cls(kind, int(section["early_steps"] if kind == "early" else section["window"]))

    def section(self) -> dict[str, Any]:
        """The [spike] keys that state this reference (`of` reads them back)."""
        return {"reference": self.kind, ("window" if self.kind == "local" else "early_steps"): self.steps}

    def spikes(self, norms: Any, factor: float) -> np.ndarray:
        """Per step: is its norm above ``factor`` times the reference?"""
        return (local_spikes if self.kind == "local" else early_spikes)(norms, self.steps, factor)

    def describe(self, factor: float) -> str:
        return (f"above {factor:g} x the median of the {self.steps} steps before" if self.kind == "local" else
                f"above {factor:g} x the median of the run's first {self.steps} learner steps")

    def label(self) -> str:
        """The sensitivity table's name of the rule (`CollapseRule.label`)."""
        return f"spike_window {self.steps}" if self.kind == "local" else f"spike_early {self.steps}"


def false_alarm_rate(quiet_runs: Sequence[Any], reference: SpikeReference, factor: float, span: int) -> float:
    """Share of quiet (non-collapsing) runs whose last ``span`` steps hold a spike against ``reference``: what
    the rule says at a run end where nothing happens."""
    if not quiet_runs:
        return float("nan")
    return float(np.mean([reference.spikes(r, factor)[-span:].any() for r in quiet_runs]))


def calibrate_factor(quiet_runs: Sequence[Any], reference: SpikeReference, grid: Sequence[float], rate: float,
                     span: int) -> tuple[float, float]:
    """(the smallest factor of ``grid`` whose `false_alarm_rate` on ``quiet_runs`` is at most ``rate``, that
    rate); (nan, nan) when none is."""
    for f in sorted(grid):
        fa = false_alarm_rate(quiet_runs, reference, f, span)
        if fa <= rate:
            return float(f), fa
    return float("nan"), float("nan")


# --- (f) DDG-2 and DDG-3 ---------------------------------------------------------------------------------


def baselines_off_floor(errors: Mapping[str, Any], paper: Mapping[str, float], factor: float) -> tuple[str, str]:
    """DDG-2's precondition: every baseline's median error within ``factor`` x its paper level (capped at 1).
    (status, measured): failed when one sits above (its comparison would be "DG learns" vs "nothing learns")."""
    parts, status = [], "met"
    for m, level in paper.items():
        v = np.asarray(errors.get(m, []), dtype=float)
        if not np.isfinite(v).any():
            parts.append(f"{m}: no runs")
            status = "unknown" if status == "met" else status
            continue
        med, limit = float(np.nanmedian(v)), min(1.0, factor * level)
        parts.append(f"{m} median {med:.3f} vs limit {limit:.3f} ({factor:g} x paper {level:.2f})")
        if med > limit:
            status = "failed"
    return status, "; ".join(parts)


def solved_counts(name: str, dg: Any, baseline: Any, threshold: float) -> Outcome:
    """Seeds solved (error <= threshold) by DG vs a baseline: DG's rate with its exact interval, "holds" when
    Fisher's exact one-sided test says DG solves more (stats.proportion with the baseline as base rate)."""
    d, b = np.asarray(dg, dtype=float), np.asarray(baseline, dtype=float)
    d, b = d[np.isfinite(d)], b[np.isfinite(b)]
    k, kb = int((d <= threshold).sum()), int((b <= threshold).sum())
    o = proportion(name, k, d.size, 0.0, kb, b.size, f"DG solves {k} of {d.size}, the baseline {kb} of {b.size}")
    if o.status == "holds" and not o.extra["fisher_p"] < ALPHA:
        o.status = "undecided"  # above zero is not "more than the baseline"
    return o


def unit_grid(h_min: int, h_max: int) -> tuple[int, ...]:
    """Every length from h_min to h_max (unit step)."""
    if not 1 <= h_min <= h_max:
        raise ValueError(f"need 1 <= h_min <= h_max, got {h_min}, {h_max}")
    return tuple(range(h_min, h_max + 1))


def longest_solved(errors: Any, hs: Sequence[int], threshold: float) -> list[float]:
    """Per seed (rows of ``errors`` [seeds, H]): the largest H with error <= threshold (0 if none; NaN if the
    row has no value)."""
    out = []
    for row in np.atleast_2d(np.asarray(errors, dtype=float)):
        if not np.isfinite(row).any():
            out.append(float("nan"))
            continue
        out.append(float(max([0] + [h for h, e in zip(hs, row, strict=True) if np.isfinite(e) and e <= threshold])))
    return out


def grid_covers(longest: Any, hs: Sequence[int]) -> tuple[bool, str]:
    """DDG-3's rule has room when the grid is unit-step and every seed's longest + 2 lies on it."""
    hs = sorted(hs)
    unit = hs == list(range(hs[0], hs[-1] + 1))
    top = float(np.nanmax(np.asarray(longest, dtype=float))) if len(longest) else float("nan")
    ok = unit and math.isfinite(top) and top + 2 <= hs[-1]
    return ok, (f"grid {hs[0]}..{hs[-1]} {'unit' if unit else 'not unit'} step; longest solved {top:g}, "
                f"needs {top + 2:g} on the grid")


def exceeds_by(name: str, dg: Any, baseline: Any, delta: float) -> Outcome:
    """Per seed, DG's longest minus the baseline's >= ``delta``: k of n with the exact interval; holds when its
    lower end is above 1/2 (most seeds), direction when only "at least 1" does, else as `proportion` says."""
    d = np.asarray(dg, dtype=float) - np.asarray(baseline, dtype=float)
    d = d[np.isfinite(d)]
    size = proportion(name, int((d >= delta).sum()), d.size, 0.5, detail=f"seeds with DG ahead by >= {delta:g}")
    if size.status != "holds":
        ahead = proportion(name, int((d >= 1).sum()), d.size, 0.5)
        if ahead.status == "holds":
            size.status, size.detail = "direction", size.detail + "; DG ahead (>= 1) on most seeds"
    return size


# --- (g) margins from the testbed's own resolution, and edges ----------------------------------------------


def resolution_margin(name: str, base_error: Any, n_test: int, cap: int, z: float, floor: float) -> Margin:
    """The smallest ratio of error rates the testbed resolves at the base's level, on the log scale: the larger of

    * the test set's: two evaluations on ``n_test`` examples at error p differ by z sqrt(2 p (1 - p) / n_test)
      (binomial; p = the base's median error), i.e. log(1 + that / p);
    * the seeds': the effect the design's ``cap`` seeds detect with power 1 - BETA at the base's spread,
      (t_{1-ALPHA} + t_{1-BETA}) sd sqrt(2 / cap), sd = the base's spread of log errors across seeds.

    Computed from the base cell when judging, written beside the claim with its inputs."""
    e = np.asarray(base_error, dtype=float)
    e = e[np.isfinite(e)]
    if e.size < 2:
        raise ValueError(f"{name}: the base needs >= 2 seeds with a value, has {e.size}")
    p = float(np.median(e))
    test = math.log1p(z * binomial_diff_sd(p, p, n_test) / max(p, floor))
    sd = float(np.std(np.log(np.maximum(e, floor)), ddof=1))
    df = cap - 1
    seeds = (t_quantile(1 - ALPHA, df) + t_quantile(1 - BETA, df)) * sd * math.sqrt(2.0 / cap)
    value = max(test, seeds)
    return Margin(name, value, "log", (
        f"the testbed's resolution at the base's median error {p:.4f}: test set ({n_test} examples) "
        f"{math.expm1(test):.3f} of the error rate, seeds ({cap} at the base's log-error sd {sd:.3f}) "
        f"{math.expm1(seeds):.3f}; the larger decides (figures/confirm.py resolution_margin)"))


def near_edge(o: Outcome) -> bool | None:
    """Whether a part's verdict sits within one standard error of its rule's edge: the interval end that decides
    (either end, for an equivalence) within one se of the margin (or of 0, the direction's edge). A proportion
    judged against a rate (VCPO-1's "most collapses") uses the binomial se of its rate, sqrt(p (1 - p) / n), and
    the rate as its only edge. None when the part has no interval with a standard error (a count judged by
    Fisher's exact test alone, margin 0)."""
    iv = o.interval
    if iv is None or not math.isfinite(o.margin):
        return None
    if o.kind == "proportion":
        if o.margin <= 0 or not iv.n or not math.isfinite(iv.estimate):
            return None
        se = math.sqrt(iv.estimate * (1 - iv.estimate) / iv.n)
        return any(abs(end - o.margin) <= se for end in (iv.lo, iv.hi))
    if not math.isfinite(iv.se):
        return None
    edges = [o.margin, -o.margin] if o.kind == "equivalence" else [o.margin, 0.0]
    return any(abs(end - e) <= iv.se for end in (iv.lo, iv.hi) for e in edges)
