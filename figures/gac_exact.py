"""GAC's signal where the noise does not cap it: the exact-gradient probe on the async design's runs.

GAC-1 reads ``cos_consecutive_exact`` (testbed/gac_signal.py): the cosine between the exact expected raw gradients
of consecutive optimizer steps, over the whole training split and every action (r = m / B_noise = infinity). The
probe re-trains a run of the async design (the same config, so the same batches and parameters, bit for bit)
through batch ``until`` - 1 with the probe attached; its rows are cached as JSON under
``<cache>/gac_exact/<run id>_<until>.json`` (settings, machine and code fingerprint beside them), like the
exact-gradient runs of DG-1, so a re-plot does not retrain. Per run and learning window (`summary`):

* ``cos``: mean of ``cos_consecutive_exact`` over the optimizer steps in the window;
* ``r``: the learner's minibatch signal-to-noise ratio m / B_noise there (`testbed.gac_signal.noise_ratio`);
* ``cos_minibatch``: the learner's own consecutive minibatch cosine there (what the capped instrument reads).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from figures.budgets import Budget
from testbed.config import RunConfig
from testbed.util.files import atomic_write_text


def rows_path(cache: Path, config: RunConfig, until: int) -> Path:
    """Where the probe's record of ``config`` measured through batch ``until`` - 1 is cached."""
    return Path(cache) / "gac_exact" / f"{config.run_id}_{until}.json"


def _write(cache: Path, configs: Sequence[RunConfig], until: int, stamp: dict[str, Any] | None) -> None:
    from testbed.codeprint import config_code
    from testbed.gac_signal import measure
    from testbed.machine import machine

    for cfg, out in zip(configs, measure(configs, until), strict=True):
        record = {"settings": {"run_id": cfg.run_id, "until": until, "config": cfg.to_dict()},
                  "code": config_code(cfg), "machine": machine(), "probe": out["probe"],
                  **({"preregistration": stamp} if stamp else {})}
        atomic_write_text(rows_path(cache, cfg, until), json.dumps(record, sort_keys=True, allow_nan=True))


def ensure(cache: Path, configs: Sequence[RunConfig], until: int, cached_only: bool = False,
           stamp: dict[str, Any] | None = None) -> None:
    """Measure the configs not yet cached, in loops of at most `testbed.plan.MAX_LOOP` runs (this process: the
    probe costs one exact gradient per optimizer step of the measured batches); ``stamp``: a confirmatory run's
    protocol stamp, written into each new record (`figures.common.Context.stamp_records`)."""
    from testbed.plan import MAX_LOOP, balanced_chunks

    todo = [c for c in configs if not rows_path(cache, c, until).is_file()]
    if not todo or cached_only:
        return
    shapes: dict[str, list[RunConfig]] = {}
    for c in todo:
        shapes.setdefault(repr(c.parse().shape), []).append(c)  # runs of one loop share its shape
    for same in shapes.values():
        for chunk in balanced_chunks(same, MAX_LOOP, 1):
            _write(cache, chunk, until, stamp)


def load(cache: Path, config: RunConfig, until: int) -> dict[str, Any] | None:
    """The cached record (None when absent)."""
    path = rows_path(cache, config, until)
    return json.loads(path.read_text()) if path.is_file() else None


def summary(record: dict[str, Any] | None, window: tuple[float, float]) -> dict[str, float]:
    """``cos``, ``r`` and ``cos_minibatch`` of one run over ``window`` (module docstring); NaN when the record is
    absent, the window undefined, or the window not measured (it ends after the probe stopped)."""
    from testbed.gac_signal import noise_ratio, steps_mean

    nan = float("nan")
    if record is None:
        return {"cos": nan, "r": nan, "cos_minibatch": nan}
    rows = record["probe"]
    until = int(record["settings"]["until"])
    if not window[1] <= until:  # NaN window or one the probe did not reach: undefined, not a partial mean
        return {"cos": nan, "r": nan, "cos_minibatch": nan}
    steps = [r["step"] for r in rows]
    inside = [r for r in rows if window[0] <= r["step"] <= window[1]]
    return {"cos": steps_mean(steps, [r["cos_consecutive_exact"] for r in rows], window),
            "r": noise_ratio([r["norm_exact"] for r in inside], [r["norm_minibatch"] for r in inside]),
            "cos_minibatch": steps_mean(steps, [r["cos_minibatch_prev"] for r in rows], window)}


# -- its price (figures/walltime.py, figures/estimate.py) ---------------------------------------------------

def probe_loops(b: Budget, cap: bool) -> list[list[RunConfig]]:
    """The GAC probe's loops (as `figures.gac_exact.ensure` packs them): the first look's seeds, or every seed of
    the async design's cap."""
    from figures.experiments.async_grpo import exact_configs
    from testbed.plan import MAX_LOOP, balanced_chunks

    seeds = b.all_seeds("async") if cap else b.async_seeds
    return balanced_chunks(exact_configs(b, tuple(seeds)), MAX_LOOP, 1)


def probe_seconds(b: Budget, steps: int) -> tuple[float, float, int]:
    """(a, s per batch, runs) of the probe's largest loop, timed at ``steps`` and 2 x ``steps`` batches."""
    from figures.estimate import fit_line
    from testbed.gac_signal import measure

    loop = max(probe_loops(b, True), key=len)
    measure(loop, 2)  # warm-up

    def time_at(n: int) -> float:
        t0 = time.perf_counter()
        measure(loop, n)
        return time.perf_counter() - t0

    a, slope = fit_line(time_at, steps, 2 * steps, min_span_s=0.0)
    return a, slope, len(loop)


# -- the exploratory measurement: `python -m figures.gac_exact --seeds 0 1 2 --out DIR` ---------------------------

def explore(seeds: Sequence[int], until: int, log_every: int) -> dict[str, Any]:
    """GAC-1 before and after on exploratory ``seeds``: the async regime's base (the registered exact recipe) at
    sync and each stale level, full runs logged every ``log_every`` batches (the learning window from the sync
    runs' curves, the registered phase rule), the probe through ``until``; per level the per-seed window means
    with their intervals (testbed/util/stats.py) and GAC-1's parts on the exact cosine and on the learner's
    minibatch cosine."""
    import dataclasses

    import numpy as np

    from figures import prereg
    from figures.budgets import FULL
    from figures.confirm import learning_window
    from figures.experiments import async_grpo as ag
    from testbed.runner import run_many
    from testbed.util.stats import combine, difference, fmt_interval, one_sample

    b = dataclasses.replace(FULL, async_log=log_every, async_exact_until=until)
    recipe, levels = ag.exact_recipe(), ag.levels()
    cfgs = {d: ag.cell(b, recipe, d, tuple(seeds)) for d in levels}
    trained = run_many([c for d in levels for c in cfgs[d]])  # one loop (bit for bit each run alone)
    results = {d: trained[i * len(seeds):(i + 1) * len(seeds)] for i, d in enumerate(levels)}
    curves = {d: [[r.get("test_error", np.nan) for r in res.rows] for res in rs] for d, rs in results.items()}
    versions = [float(r["step"]) for r in results["sync"][0].rows]  # every run logs the same steps
    ph = prereg.load().section("phase")
    window = learning_window(versions, np.array(curves["sync"], dtype=float), ph["progress_lo"], ph["progress_hi"])
    measured = measure_records([c for d in levels for c in cfgs[d]], until)
    records = {d: dict(zip(seeds, measured[i * len(seeds):(i + 1) * len(seeds)], strict=True))
               for i, d in enumerate(levels)}
    per = {d: [summary(records[d][s], window) for s in seeds] for d in levels}
    cell = {k: {f"{recipe}|{d}": [x[k] for x in per[d]] for d in levels} for k in ("cos", "r", "cos_minibatch")}

    def iv(values: Any) -> dict[str, float]:
        i = one_sample(values)
        return {"estimate": i.estimate, "lo": i.lo, "hi": i.hi, "n": i.n}

    out: dict[str, Any] = {"seeds": list(seeds), "recipe": recipe, "levels": list(levels), "until": until,
                           "log_every": log_every, "window": list(window), "per_seed": cell,
                           "intervals": {k: {key: iv(v) for key, v in cell[k].items()} for k in cell}}
    sync = cell["cos"][f"{recipe}|sync"]
    out["stale_minus_sync"] = {}
    for d in levels[1:]:
        i = difference(sync, cell["cos"][f"{recipe}|{d}"])
        out["stale_minus_sync"][d] = {"estimate": i.estimate, "lo": i.lo, "hi": i.hi, "n": i.n}
    exact = ag.gac1_parts(cell["cos"], list(levels), recipe)
    mini = ag.gac1_parts(cell["cos_minibatch"], list(levels), recipe)
    out["gac1"] = {"exact": {"verdict": combine(exact), "parts": [f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in exact]},
                   "minibatch": {"verdict": combine(mini),
                                 "parts": [f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in mini]}}
    r, src = ag.real_r()
    out["real_r"] = {"r": r, "source": src}
    out["predicted_at_real_r"] = {d: iv(ag.predicted_at(cell["cos"][f"{recipe}|{d}"], cell["r"][f"{recipe}|{d}"],
                                                        cell["r"][f"{recipe}|sync"], r)) for d in levels}
    return out


def findings_markdown(res: dict[str, Any]) -> str:
    """The exploratory measurement as a page: per level the window means with their 90% intervals, the
    decomposition check (the minibatch cosine predicted from the exact one at the measured r, cos x r / (1 + r),
    beside the measured one), and GAC-1 before (the capped reading's precondition) and after (the registered
    judge on the exact cosine), with GAC-2's premise."""
    import numpy as np

    from figures.experiments import async_grpo as ag
    from testbed.util.stats import combine

    rec, levels, ps, iv = res["recipe"], res["levels"], res["per_seed"], res["intervals"]

    def show(x: dict[str, float]) -> str:
        return f"{x['estimate']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"

    lines = [f"# GAC-1 on exact gradients: exploratory measurement ({res['label']})", "",
             f"Command: `{res['command']}`. Seeds {', '.join(map(str, res['seeds']))} (exploratory), {rec} in the "
             f"async_grpo regime, learning window versions {res['window'][0]:g}-{res['window'][1]:g} (the registered "
             f"phase rule on the sync runs' curves, logged every {res['log_every']} batches), probe through batch "
             f"{res['until']}. Per seed the mean over the window; 90% intervals of the trimmed mean "
             "(testbed/util/stats.py).", "",
             "| level | cos_consecutive_exact | learner's minibatch cosine | r = m / B_noise | cos_exact x r / (1 + r) "
             "| predicted at the real model's r |", "| --- | --- | --- | --- | --- | --- |"]
    for d in levels:
        k = f"{rec}|{d}"
        pred = np.array(ps["cos"][k]) * np.array(ps["r"][k]) / (1 + np.array(ps["r"][k]))
        lines.append(f"| {d} | {show(iv['cos'][k])} | {show(iv['cos_minibatch'][k])} | {show(iv['r'][k])} | "
                     f"{float(np.mean(pred)):+.3f} | {show(res['predicted_at_real_r'][d])} |")
    lines += ["", "Paired difference stale - sync of cos_consecutive_exact: " + "; ".join(
        f"{d} {show(x)}" for d, x in res["stale_minus_sync"].items()) + ".",
        f"Real model's r: {res['real_r']['r']:.3f} ({res['real_r']['source']}).", ""]
    ev = ag.Evidence(grid="exploratory", seeds=res["seeds"], levels=levels,
                     regime={"batch_size": 400, "minibatches": 2}, exact_window=res["window"],
                     exact_until=res["until"], cos_exact=ps["cos"], r_minibatch=ps["r"], cos_minibatch=ps["cos_minibatch"])
    before = ag._uncapped(ag.Evidence(grid="exploratory", seeds=res["seeds"], levels=levels,
                                      regime={"batch_size": 400, "minibatches": 2}))
    j = ag.judge_gac1(ev)
    lines += ["## GAC-1 before and after", "",
              f"- Before (the capped instrument): precondition {before[0]}: {before[1]}; verdict not testable.",
              f"- After (registered rule on cos_consecutive_exact): precondition {ag._uncapped(ev)[0]}; verdict "
              f"{combine(j.parts)}: " + "; ".join(f"{p.name} -> {p.status}" for p in j.parts) + ".",
              f"- The same rule on the learner's minibatch cosine over the window (capped; beside, not judged): "
              f"{res['gac1']['minibatch']['verdict']}.",
              f"- GAC-2's premise (exact cosine above sync at some stale level): {': '.join(ag._stale_aligned(ev))}.",
              ""]
    return "\n".join(lines)


def measure_records(configs: Sequence[RunConfig], until: int) -> list[dict[str, Any]]:
    """The probe's records of ``configs`` (one loop), as `ensure` caches them, without a cache."""
    from testbed.gac_signal import measure

    return [{"settings": {"run_id": c.run_id, "until": until}, **out}
            for c, out in zip(configs, measure(configs, until), strict=True)]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys

    from figures import prereg

    ap = argparse.ArgumentParser(prog="python -m figures.gac_exact", description=explore.__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--until", type=int, default=None, help="batches the probe measures (default: the registration's)")
    ap.add_argument("--log-every", type=int, default=None, help="default: the registration's phase.async_log")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--from", dest="source", type=Path, default=None,
                    help="rewrite the page from this result file (gac1_exact.json) without measuring")
    a = ap.parse_args(argv)
    if a.source is not None:
        try:
            res = json.loads(a.source.read_text())
        except (OSError, ValueError) as exc:
            print(f"error: --from {str(a.source)!r}: {exc}", file=sys.stderr)
            return 2
        atomic_write_text(a.out / "gac1_exact.md", findings_markdown(res))
        return 0
    reg = prereg.load()
    below = int(reg.section("seeds")["exploratory_below"])
    if not a.seeds:
        print(f"error: --seeds is required (exploratory seeds 0 .. {below - 1}) unless --from is given", file=sys.stderr)
        return 2
    bad = [s for s in a.seeds if not 0 <= s < below]
    if bad:
        print(f"error: --seeds {bad}: exploratory seeds are 0 .. {below - 1} (the confirmatory block is never "
              "run for exploration)", file=sys.stderr)
        return 2
    until = a.until or int(reg.section("gac")["exact_until"])
    log_every = a.log_every or int(reg.section("phase")["async_log"])
    if until < 1 or log_every < 1:
        print(f"error: --until {until} and --log-every {log_every} must be >= 1", file=sys.stderr)
        return 2
    t0 = time.time()
    res = explore(a.seeds, until, log_every)
    res["label"] = "exploratory"
    res["command"] = "python -m figures.gac_exact " + " ".join(argv if argv is not None else sys.argv[1:])
    res["wall_s"] = time.time() - t0
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out / "gac1_exact.json", json.dumps(res, indent=1, sort_keys=True, allow_nan=True))
    atomic_write_text(a.out / "gac1_exact.md", findings_markdown(res))
    print(json.dumps({k: res[k] for k in ("window", "gac1", "stale_minus_sync", "intervals")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
