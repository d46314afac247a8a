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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
                  "code": config_code(cfg), "machine": machine(), **out,
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
    shapes: dict[tuple, list[RunConfig]] = {}
    for c in todo:
        shapes.setdefault(c.parse().shape, []).append(c)
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


def measure_records(configs: Sequence[RunConfig], until: int) -> list[dict[str, Any]]:
    """The probe's records of ``configs`` (one loop), as `ensure` caches them, without a cache."""
    from testbed.gac_signal import measure

    return [{"settings": {"run_id": c.run_id, "until": until}, **out}
            for c, out in zip(configs, measure(configs, until), strict=True)]


def main(argv: list[str] | None = None) -> int:
    import argparse
    import sys
    import time

    from figures import prereg

    ap = argparse.ArgumentParser(prog="python -m figures.gac_exact", description=explore.__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--until", type=int, default=None, help="batches the probe measures (default: the registration's)")
    ap.add_argument("--log-every", type=int, default=None, help="default: the registration's phase.async_log")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    reg = prereg.load()
    below = int(reg.section("seeds")["exploratory_below"])
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
    print(json.dumps({k: res[k] for k in ("window", "gac1", "stale_minus_sync", "intervals")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
