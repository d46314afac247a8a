"""GAC-1 on exact gradients, on exploratory seeds: ``python -m figures.gac_exact --seeds 0 1 2 --out DIR``.

Trains the async regime's GAC-1 base (the registration's ``gac.exact_recipe``) at sync and each stale level on
exploratory seeds, reads the learning window from the sync runs' curves (the registered phase rule), measures
``cos_consecutive_exact`` with the probe (testbed/gac_signal.py) and writes ``gac1_exact.json`` and
``gac1_exact.md``: per level the window means with their intervals, the decomposition check, GAC-1 before
(the capped reading) and after (the registered judge on the exact cosine), GAC-2's premise, and per seed the base's
fingerprint with the registered fingerprint precondition's reading (a setting is a candidate for a GAC-2 design only
where its base is healthy, shows the premise and looks like the real model). It refuses the confirmatory block.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from figures.evidence import label
from figures.gac_probe import summary
from testbed.config import RunConfig
from testbed.util.files import atomic_write_text


def explore(seeds: Sequence[int], until: int, log_every: int, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """GAC-1 before and after on exploratory ``seeds``: the async regime's base (the registered exact recipe) at
    sync and each stale level, full runs logged every ``log_every`` batches (the learning window from the sync
    runs' curves, the registered phase rule), the probe through ``until``; per level the per-seed window means
    with their intervals (testbed/util/stats.py) and GAC-1's parts on the exact cosine and on the learner's
    minibatch cosine. ``overrides``: `RunConfig` settings that replace the regime's in every run (a search for a
    regime where the base's exact cosine rises with staleness, GAC-2's premise: the base alone is trained)."""
    import dataclasses

    import numpy as np

    from figures.budgets import FULL
    from figures.confirm import registered_window
    from figures.experiments.async_grpo import settings as ag_settings
    from figures.experiments.async_grpo.judges import (
        gac1_parts,
        predicted_at,
        real_r,
    )
    from figures.experiments.async_grpo.settings import exact_recipe
    from testbed.runner import run_many
    from testbed.util.stats import combine, difference, fmt_interval, one_sample

    b = dataclasses.replace(FULL, async_log=log_every, async_exact_until=until)
    recipe, levels = exact_recipe(), ag_settings.levels()
    overrides = dict(overrides or {})
    cfgs = {d: [dataclasses.replace(c, **overrides) for c in ag_settings.cell(b, recipe, d, tuple(seeds))] for d in levels}
    trained = run_many([c for d in levels for c in cfgs[d]])  # one loop (bit for bit each run alone)
    results = {d: trained[i * len(seeds):(i + 1) * len(seeds)] for i, d in enumerate(levels)}
    curves = {d: [[r.get("test_error", np.nan) for r in res.rows] for res in rs] for d, rs in results.items()}
    versions = [float(r["step"]) for r in results["sync"][0].rows]  # every run logs the same steps
    window = registered_window(versions, np.array(curves["sync"], dtype=float))
    measured = measure_records([c for d in levels for c in cfgs[d]], until)
    records = {d: dict(zip(seeds, measured[i * len(seeds):(i + 1) * len(seeds)], strict=True))
               for i, d in enumerate(levels)}
    per = {d: [summary(records[d][s], window) for s in seeds] for d in levels}
    cell = {k: {(recipe, d): [x[k] for x in per[d]] for d in levels} for k in ("cos", "r", "cos_minibatch")}

    def iv(values: Any) -> dict[str, float]:
        i = one_sample(values)
        return {"estimate": i.estimate, "lo": i.lo, "hi": i.hi, "n": i.n}

    out: dict[str, Any] = {"seeds": list(seeds), "recipe": recipe, "levels": list(levels), "until": until,
                           "overrides": overrides, "regime": {k: getattr(cfgs["sync"][0].resolved(), k)
                                                              for k in ("batch_size", "minibatches", "epochs", "lr")},
                           "log_every": log_every, "window": list(window),
                           "per_seed": {k: {label(key): v for key, v in cell[k].items()} for k in cell},
                           "intervals": {k: {label(key): iv(v) for key, v in cell[k].items()} for k in cell}}
    out["health"] = {d: {"status": [r.status for r in results[d]],
                         "error_first": [float(c[0]) for c in curves[d]],
                         "error_last": [float(c[-1]) for c in curves[d]]} for d in levels}  # fmt: skip
    sync = cell["cos"][(recipe, "sync")]
    out["stale_minus_sync"] = {}
    for d in levels[1:]:
        i = difference(sync, cell["cos"][(recipe, d)])
        out["stale_minus_sync"][d] = {"estimate": i.estimate, "lo": i.lo, "hi": i.hi, "n": i.n}
    exact = gac1_parts(cell["cos"], list(levels), recipe)
    mini = gac1_parts(cell["cos_minibatch"], list(levels), recipe)
    out["gac1"] = {"exact": {"verdict": combine(exact), "parts": [f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in exact]},
                   "minibatch": {"verdict": combine(mini),
                                 "parts": [f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in mini]}}
    out["fingerprint"] = fingerprints(seeds, overrides)
    r, src = real_r()
    out["real_r"] = {"r": r, "source": src}
    out["predicted_at_real_r"] = {d: iv(predicted_at(cell["cos"][(recipe, d)], cell["r"][(recipe, d)],
                                                        cell["r"][(recipe, "sync")], r)) for d in levels}
    return out


def fingerprints(seeds: Sequence[int], overrides: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """Per seed (keyed by its text), the base's staleness fingerprint at the registered version with ``overrides``
    (testbed/fingerprint.py, what ``python -m testbed fingerprint --regime async_grpo`` measures: seconds per seed)
    and the registered fingerprint precondition's reading of it (`fingerprint_match`): ``status``, ``reading`` and
    ``staleness`` (token and sequence ESS, clip fraction by lag)."""
    from figures import prereg
    from figures.experiments.async_grpo.judges import fingerprint_match
    from figures.experiments.async_grpo.settings import REGIME, exact_recipe
    from testbed.fingerprint import fingerprint

    ph = prereg.load().section("phase")
    steps, version = int(ph["fingerprint_steps"]), int(ph["fingerprint_version"])
    out = {}
    for seed in seeds:
        fp = fingerprint(REGIME, recipe=exact_recipe(), steps=steps, at=version / steps, seed=int(seed),
                         settings=dict(overrides or {})).to_dict()
        status, reading = fingerprint_match(fp)
        out[str(seed)] = {"status": status, "reading": reading, "staleness": fp["staleness"]}
    return out


def findings_markdown(res: dict[str, Any]) -> str:
    """The exploratory measurement as a page: per level the window means with their 90% intervals, the
    decomposition check (the minibatch cosine predicted from the exact one at the measured r, cos x r / (1 + r),
    beside the measured one), and GAC-1 before (the capped reading's precondition) and after (the registered
    judge on the exact cosine), with GAC-2's premise."""
    import numpy as np

    from figures.experiments.async_grpo.evidence import Evidence
    from figures.experiments.async_grpo.judges import (
        judge_gac1,
        stale_aligned,
        uncapped,
    )
    from testbed.util.stats import combine

    rec, levels, ps, iv = res["recipe"], res["levels"], res["per_seed"], res["intervals"]
    regime = res.get("regime", {"batch_size": 400, "minibatches": 2})  # results made before overrides: the regime's
    changed = ", ".join(f"{k} = {v}" for k, v in res.get("overrides", {}).items())

    def show(x: dict[str, float]) -> str:
        return f"{x['estimate']:+.3f} [{x['lo']:+.3f}, {x['hi']:+.3f}]"

    lines = [f"# GAC-1 on exact gradients: exploratory measurement ({res['label']})", "",
             f"Command: `{res['command']}`. Seeds {', '.join(map(str, res['seeds']))} (exploratory), {rec} in the "
             f"async_grpo regime{f' with {changed}' if changed else ''}, learning window versions {res['window'][0]:g}-{res['window'][1]:g} (the registered "
             f"phase rule on the sync runs' curves, logged every {res['log_every']} batches), probe through batch "
             f"{res['until']}. Per seed the mean over the window; 90% intervals of the trimmed mean "
             "(testbed/util/stats.py).", "",
             "| level | cos_consecutive_exact | learner's minibatch cosine | r = m / B_noise | cos_exact x r / (1 + r) "
             "| predicted at the real model's r |", "| --- | --- | --- | --- | --- | --- |"]
    for d in levels:
        k = label((rec, d))
        pred = np.array(ps["cos"][k]) * np.array(ps["r"][k]) / (1 + np.array(ps["r"][k]))
        lines.append(f"| {d} | {show(iv['cos'][k])} | {show(iv['cos_minibatch'][k])} | {show(iv['r'][k])} | "
                     f"{float(np.mean(pred)):+.3f} | {show(res['predicted_at_real_r'][d])} |")
    if "health" in res:  # results made before it was recorded have none
        lines += ["", "Health: test error at the first logged version -> the last, per seed: " + "; ".join(
            f"{d} " + ", ".join(f"{a:.3f} -> {b:.3f}{'' if st == 'ok' else f' ({st})'}" for a, b, st in
                                zip(h["error_first"], h["error_last"], h["status"], strict=True))
            for d, h in ((d, res["health"][d]) for d in levels)) + "."]
    lines += ["", "Paired difference stale - sync of cos_consecutive_exact: " + "; ".join(
        f"{d} {show(res['stale_minus_sync'][d])}" for d in levels[1:]) + ".",
        f"Real model's r: {res['real_r']['r']:.3f} ({res['real_r']['source']}).", ""]
    ev = Evidence.from_json({"grid": "exploratory", "seeds": res["seeds"], "levels": levels,
                             "regime": regime, "exact_window": res["window"],
                             "exact_until": res["until"], "cos_exact": ps["cos"], "r_minibatch": ps["r"],
                             "cos_minibatch": ps["cos_minibatch"]})
    before = uncapped(Evidence(grid="exploratory", seeds=res["seeds"], levels=levels,
                                      regime=regime))
    j = judge_gac1(ev)
    lines += ["## GAC-1 before and after", "",
              f"- Before (the capped instrument): precondition {before[0]}: {before[1]}; verdict not testable.",
              f"- After (registered rule on cos_consecutive_exact): precondition {uncapped(ev)[0]}; verdict "
              f"{combine(j.parts)}: " + "; ".join(f"{p.name} -> {p.status}" for p in j.parts) + ".",
              f"- The same rule on the learner's minibatch cosine over the window (capped; beside, not judged): "
              f"{res['gac1']['minibatch']['verdict']}.",
              f"- GAC-2's premise (exact cosine above sync at some stale level): {': '.join(stale_aligned(ev))}.",
              ""]
    lines += fingerprint_lines(res.get("fingerprint") or {})
    return "\n".join(lines)


def fingerprint_lines(fps: dict[str, dict[str, Any]]) -> list[str]:
    """The page's section on the base's fingerprint (`fingerprints`); none for results made before it was measured."""
    if not fps:
        return []
    met = [s for s, f in fps.items() if f["status"] == "met"]
    return ["## The base's fingerprint against the real model's", "",
            "The registered fingerprint precondition of GAC-2 and AREAL-1 (figures/preregistration.toml, phase: the "
            "base's token-level ESS and clip fraction by lag at the registered version, within the registered "
            f"tolerances of SmolLM2's), per seed: met on {len(met)} of {len(fps)} seeds.", "",
            *[f"- seed {s}: {f['status']}: {f['reading']}" for s, f in fps.items()], ""]


def measure_records(configs: Sequence[RunConfig], until: int) -> list[dict[str, Any]]:
    """The probe's records of ``configs`` (one loop), as `ensure` caches them, without a cache."""
    from testbed.gac_signal import measure

    return [{"settings": {"run_id": c.run_id, "until": until}, **out}
            for c, out in zip(configs, measure(configs, until), strict=True)]


FIXED = ("task", "recipe", "delay", "seed", "regime", "log_every")  # the design's own settings: never overridden


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as `RunConfig` settings (VALUE a Python literal, else a string), each checked by building
    the regime's sync run with it; `ValueError` naming the bad item and what is allowed."""
    import ast
    import dataclasses

    from figures.budgets import FULL
    from figures.experiments.async_grpo import settings as ag_settings
    from figures.experiments.async_grpo.settings import exact_recipe

    out: dict[str, Any] = {}
    allowed = [f for f in RunConfig.field_names() if f not in FIXED and f != "task_args"]
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in allowed:
            raise ValueError(f"--set {item!r}: give KEY=VALUE with KEY one of {', '.join(allowed)}")
        try:
            out[key] = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            out[key] = text
    try:
        dataclasses.replace(ag_settings.run(FULL, exact_recipe(), "sync", 0), **out).parse()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"--set {' '.join(items)}: {str(exc).splitlines()[0]}") from None
    return out


def main(argv: list[str] | None = None) -> int:
    import sys

    from figures import prereg
    from testbed.util.arguments import CommandLine

    ap = CommandLine(prog="python -m figures.gac_exact", description=explore.__doc__)
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--until", type=int, default=None, help="batches the probe measures (default: the registration's)")
    ap.add_argument("--log-every", type=int, default=None, help="default: the registration's phase.async_log")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                    help="a RunConfig setting replacing the regime's in every run (repeatable), e.g. --set lr=0.01")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--fingerprint-only", action="store_true",
                    help="measure only the base's fingerprint and its precondition per seed (seconds; no training "
                         "runs, no probe): fingerprint.json and fingerprint.md")
    ap.add_argument("--from", dest="source", type=Path, default=None,
                    help="rewrite the page from this result file (gac1_exact.json) without training; a file made "
                         "before the fingerprint was measured gets it (seconds per seed), saved into the file")
    a = ap.parse_args(argv)
    if a.source is not None:
        try:
            res = json.loads(a.source.read_text())
        except (OSError, ValueError) as exc:
            print(f"error: --from {str(a.source)!r}: {exc}", file=sys.stderr)
            return 2
        if "fingerprint" not in res:  # results made before it was measured: the only part measured here
            res["fingerprint"] = fingerprints(res["seeds"], res.get("overrides"))
            atomic_write_text(a.source, json.dumps(res, indent=1, sort_keys=True, allow_nan=True))
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
    try:
        overrides = parse_overrides(a.overrides)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = "python -m figures.gac_exact " + " ".join(argv if argv is not None else sys.argv[1:])
    if a.fingerprint_only:
        changed = ", ".join(f"{k} = {v}" for k, v in overrides.items())
        fp = {"seeds": list(a.seeds), "overrides": overrides, "label": "exploratory", "command": command,
              "fingerprint": fingerprints(a.seeds, overrides)}
        a.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out / "fingerprint.json", json.dumps(fp, indent=1, sort_keys=True, allow_nan=True))
        atomic_write_text(a.out / "fingerprint.md", "\n".join([
            f"# The async_grpo base's fingerprint{f' with {changed}' if changed else ''} (exploratory)", "",
            f"Command: `{command}`. Seeds {', '.join(map(str, a.seeds))} (exploratory).", "",
            *fingerprint_lines(fp["fingerprint"])]))
        print("; ".join(f"seed {s}: {f['status']}" for s, f in fp["fingerprint"].items()))
        return 0
    t0 = time.time()
    res = explore(a.seeds, until, log_every, overrides)
    res["label"] = "exploratory"
    res["command"] = command
    res["wall_s"] = time.time() - t0
    a.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(a.out / "gac1_exact.json", json.dumps(res, indent=1, sort_keys=True, allow_nan=True))
    atomic_write_text(a.out / "gac1_exact.md", findings_markdown(res))
    print(json.dumps({k: res[k] for k in ("window", "gac1", "stale_minus_sync", "intervals")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
