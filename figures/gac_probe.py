"""GAC's signal where the noise does not cap it: the exact-gradient probe's records for the async design's runs.

GAC-1 reads ``cos_consecutive_exact`` (testbed/gac_signal.py): the cosine between the exact expected raw gradients
of consecutive optimizer steps, over the whole training split and every action (r = m / B_noise = infinity). The
probe re-trains a run of the async design (the same config, so the same batches and parameters, bit for bit)
through batch ``until`` - 1 with the probe attached; its rows are cached as JSON under
``<cache>/gac_exact/<run id>_<until>.json`` (settings, machine and code fingerprint beside them), like the
exact-gradient runs of DG-1, so a re-plot does not retrain; a record measured by code that has changed since
(its fingerprint against the run's, `testbed.codeprint.config_code`) is not read, and is measured again. Per
run and learning window (`summary`):

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
from testbed.util.planning import plan_runs


def rows_path(cache: Path, config: RunConfig, until: int) -> Path:
    """Where the probe's record of ``config`` measured through batch ``until`` - 1 is cached."""
    return Path(cache) / "gac_exact" / f"{config.run_id}_{until}.json"


def _write(cache: Path, configs: Sequence[RunConfig], until: int, stamp: dict[str, Any] | None) -> None:
    from testbed.codeprint import config_code
    from testbed.gac_signal import measure
    from testbed.util.provenance import machine

    for cfg, out in zip(configs, measure(configs, until), strict=True):
        record = {"settings": {"run_id": cfg.run_id, "until": until, "config": cfg.to_dict()},
                  "code": config_code(cfg), "machine": machine(), "probe": out["probe"],
                  **({"preregistration": stamp} if stamp else {})}
        atomic_write_text(rows_path(cache, cfg, until), json.dumps(record, sort_keys=True, allow_nan=True))


def ensure(cache: Path, configs: Sequence[RunConfig], until: int, cached_only: bool = False,
           stamp: dict[str, Any] | None = None, workers: int = 1) -> None:
    """Measure the configs without a current record (`load`), in loops of at most `testbed.plan.MAX_LOOP` runs of
    one shape (the probe costs one exact gradient per optimizer step of the measured batches), ``workers`` at a time
    in the command's executor (testbed/util/executor.py: the local pool, or Ray with ``--executor ray``; one
    worker: this process); ``stamp``: a confirmatory run's protocol stamp, written into each new record
    (`figures.common.Context.protocol_stamp`)."""
    from testbed.plan import MAX_LOOP, balanced_chunks

    todo = plan_runs(configs, key=lambda c: c.run_id, done=lambda c: load(cache, c, until) is not None).todo
    if not todo or cached_only:
        return
    shapes: dict[str, list[RunConfig]] = {}
    for c in todo:
        shapes.setdefault(repr(c.parse().shape), []).append(c)  # runs of one loop share its shape
    chunks = [chunk for same in shapes.values() for chunk in balanced_chunks(same, MAX_LOOP, workers)]
    if workers <= 1 or len(chunks) == 1:
        for chunk in chunks:
            _write(cache, chunk, until, stamp)
        return
    from testbed.util.executor import default

    default().run(_write, [(cache, chunk, until, stamp) for chunk in chunks], min(workers, len(chunks)))


def load(cache: Path, config: RunConfig, until: int) -> dict[str, Any] | None:
    """The cached record of ``config``; None when absent, unreadable, or measured by code that has changed since
    (`testbed.util.codeprint.stale_parts` of its fingerprint against the run's now; a record without one is not
    judged)."""
    from testbed.codeprint import config_code
    from testbed.util.codeprint import stale_parts

    path = rows_path(cache, config, until)
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return None if stale_parts(record.get("code"), config_code(config)) else record


def summary(record: dict[str, Any] | None, window: tuple[float, float]) -> dict[str, float]:
    """``cos``, ``r`` and ``cos_minibatch`` of one run over ``window`` (module docstring); NaN when the record is
    absent, the window undefined, or the window not measured (it ends after the probe stopped)."""
    from testbed.gac_signal import noise_ratio
    from testbed.util.endpoints import steps_mean

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
