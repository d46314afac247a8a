"""DG-1's room on another training set, on exploratory seeds:
``python -m figures.dg1_room --data-dir DIR --seeds 0 1 2 --out OUT``.

DG-1's part (b), "at one sample per image DG beats PG's infinite-sample floor", can hold only where PG's
exact-expected-update error exceeds supervised cross-entropy's by the margin: a DG as good as CE beats PG(k=inf)
by exactly PG(k=inf) / CE. On the embedded 4,000-image MNIST that ratio lies inside the margin, so the registered
report reads DG-1 "not testable". This measures the ratio on a training set given by the MNIST task's options
(``data_dir``, ``train_size``), reading the base and the oracles only (DG never runs, so the choice of data
cannot favour it): PG at k = 1 (the registered base, figures/experiments/mnist_samples), PG's exact expected
update and CE (figures/oracle_runs.py), the registered learning window on PG at k = 1's curves, per seed the mean
test error over it, and the registered room rule (`figures.experiments.mnist_samples.judges`, ``_room``'s test:
the interval of the trimmed mean log ratio PG(k=inf) / CE above the margin) with the registered resolution
margin (`figures.confirm.resolution_margin`) at this data's test-set size and the MNIST design's cap, and the
registered health precondition on the base (`figures.records.healthy_base`: at most a fraction TRIM of its seeds
stalled, lost a class or diverged). The final error's reading stands beside them. It refuses the confirmatory
block.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from testbed.util.files import atomic_write_text

CELLS = ("pg k=1", "pg k=inf", "ce")


def explore(seeds: Sequence[int], task_args: dict[str, Any], steps: int, log_every: int) -> dict[str, Any]:
    """The base (PG at k = 1) and the two oracles on ``seeds`` with the MNIST task's options ``task_args``: their
    curves, the registered learning window, per seed the window means and final errors, and the room rule's
    reading on both (the registered margin at this data's resolution)."""
    import dataclasses

    from figures import oracle_runs, prereg
    from figures.budgets import FULL
    from figures.confirm import registered_window, resolution_margin
    from figures.experiments.mnist_samples.settings import cell
    from testbed.runner import run_many
    from testbed.tasks import make_task
    from testbed.util.endpoints import endpoint_per_seed
    from testbed.util.stats import TRIM, fmt_interval, superiority

    b = dataclasses.replace(FULL, mnist_steps=steps, mnist_log=log_every)
    base = [dataclasses.replace(c, task_args=dict(task_args)) for c in cell(b, "pg", 1, tuple(seeds))]
    results = run_many(base)  # one loop, each seed bit for bit its run alone
    health = [("diverged" if r.status == "diverged" else str(r.info.get("health"))) for r in results]
    versions = [float(r["step"]) for r in results[0].rows]
    curves = {"pg k=1": [[float(r.get("test_error", np.nan)) for r in res.rows] for res in results]}
    for kind, name in (("pg_exact", "pg k=inf"), ("ce", "ce")):
        frames = oracle_runs.train(kind, list(seeds), steps, log_every, task_args=dict(task_args))
        curves[name] = [[float(e) for e in f["test_error"]] for f in frames]
    window = registered_window(versions, np.array(curves["pg k=1"], dtype=float))
    phase = {k: endpoint_per_seed(versions, np.array(v, dtype=float), window) for k, v in curves.items()}
    final = {k: np.array([row[-1] for row in v], dtype=float) for k, v in curves.items()}
    task = make_task("mnist", **task_args)
    floor = 0.5 / task.n_test
    reg = prereg.load()
    cap, z = int(reg.section("designs")["mnist"]["cap"]), float(reg.section("margins")["z"])
    readings = {}
    for where, errors in (("learning phase (registered)", phase), ("final error (secondary)", final)):
        if not np.isfinite(errors["pg k=1"]).sum() >= 2:
            readings[where] = {"status": "unknown", "shown": "the base has fewer than two seeds with a value"}
            continue
        margin = resolution_margin("tol", errors["pg k=1"], task.n_test, cap, z, floor)
        o = superiority("PG(k=inf) / CE above the margin", errors["pg k=inf"], errors["ce"], margin.value, "log", floor)
        readings[where] = {"status": o.status, "margin_factor": float(np.exp(margin.value)),
                           "margin": margin.derivation,
                           "shown": f"PG(k=inf) / CE = {fmt_interval(o)} vs factor {np.exp(margin.value):.3g}"}
    bad = sum(h != "healthy" for h in health)
    readings["the base is healthy (registered)"] = {
        "status": "met" if bad <= TRIM * len(health) else "failed",
        "shown": f"PG at k = 1: {bad} of {len(health)} seeds unhealthy ({', '.join(health)}); the registered rule "
                 f"allows at most a fraction {TRIM:g} (figures/records.py healthy_base)"}
    return {"seeds": list(seeds), "task_args": dict(task_args), "n_train": task.n_train, "n_test": task.n_test,
            "base_health": health,
            "steps": steps, "log_every": log_every, "window": list(window), "versions": versions,
            "curves": curves, "phase": {k: v.tolist() for k, v in phase.items()},
            "final": {k: v.tolist() for k, v in final.items()}, "room": readings}


def markdown(res: dict[str, Any]) -> str:
    """The measurement as a page: per cell the per-seed window means and final errors, and the room rule's
    reading on each."""
    data = ", ".join(f"{k} = {v}" for k, v in res["task_args"].items()) or "the embedded MNIST subset"
    w = res["window"]
    lines = [f"# DG-1's room on {data} ({res['label']})", "",
             f"Command: `{res['command']}`. Seeds {', '.join(map(str, res['seeds']))} (exploratory); "
             f"{res['n_train']:,} training and {res['n_test']:,} test images; {res['steps']:,} steps logged every "
             f"{res['log_every']}; learning window versions {w[0]:g}-{w[1]:g} (the registered phase rule on PG at "
             "k = 1's curves). DG is not run.", "",
             "| cell | learning-phase mean error per seed | final error per seed |", "| --- | --- | --- |"]
    for k in CELLS:
        lines.append(f"| {k} | {', '.join(f'{x:.4f}' for x in res['phase'][k])} | "
                     f"{', '.join(f'{x:.4f}' for x in res['final'][k])} |")
    lines += ["", "DG-1's preconditions on the base and the oracles (the room rule: part (b) can hold only if it is met; "
              "the base's health: the registered claim is not testable without it):", ""]
    for where, r in res["room"].items():
        lines.append(f"- {where}: {r['status']}: {r['shown']}" + (f"; margin: {r['margin']}" if "margin" in r else ""))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import sys

    from figures import prereg
    from figures.budgets import FULL
    from testbed.tasks import make_task
    from testbed.util.arguments import CommandLine

    ap = CommandLine(prog="python -m figures.dg1_room", description=explore.__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", required=True)
    ap.add_argument("--data-dir", default=None, help="IDX files of an MNIST-format data set (default: the embedded subset)")
    ap.add_argument("--train-size", type=int, default=0, help="training images used (0: all)")
    ap.add_argument("--steps", type=int, default=FULL.mnist_steps)
    ap.add_argument("--log-every", type=int, default=FULL.mnist_log)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    below = int(prereg.load().section("seeds")["exploratory_below"])
    bad = [s for s in a.seeds if not 0 <= s < below]
    if bad:
        print(f"error: --seeds {bad}: exploratory seeds are 0 .. {below - 1} (the confirmatory block is never "
              "run for exploration)", file=sys.stderr)
        return 2
    if a.steps < 2 or not 1 <= a.log_every <= a.steps // 2:
        print(f"error: --steps {a.steps} and --log-every {a.log_every}: need steps >= 2 and 1 <= log_every <= steps / 2 "
              "(a window needs logged versions)", file=sys.stderr)
        return 2
    task_args = {k: v for k, v in (("data_dir", a.data_dir), ("train_size", a.train_size)) if v}
    try:
        make_task("mnist", **task_args)
    except (ValueError, OSError) as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    t0 = time.time()
    res = explore(a.seeds, task_args, a.steps, a.log_every)
    res["label"] = "exploratory"
    res["command"] = "python -m figures.dg1_room " + " ".join(argv if argv is not None else sys.argv[1:])
    res["wall_s"] = time.time() - t0
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out / "dg1_room.json", json.dumps(res, indent=1, sort_keys=True, allow_nan=True))
    atomic_write_text(a.out / "dg1_room.md", markdown(res))
    print(json.dumps(res["room"], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
