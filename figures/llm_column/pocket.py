"""The pocket LM's cells: its registered designs' confirmatory runs judged by the testbed's rules (`pocket_gac1`,
`pocket_rescue`), the latest registration that decides each claim (`pocket_cells`, `redesigned`) and its setting
in words (`pocket_setting`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from figures.experiments.async_grpo.judges import gac1_parts, rescue_parts
from figures.llm_column.settings import (
    LLM_CLAIMS,
    METHOD,
    POCKET_GAC1,
    POCKET_PREREG,
    POCKET_REDESIGNS,
    POCKET_RESCUE,
    load_json,
)
from llm_scale.pocket_design import MARGIN
from testbed.util.stats import ALPHA, LEVEL, combine, equivalence, fmt, fmt_interval, precondition, using_level


def pocket_gac1(root: Path, prereg: dict[str, Any]) -> dict[str, str] | None:
    """GAC-1 on the pocket LM from its confirmatory runs (the registration's ``runs`` folder, default `POCKET_GAC1`;
    {sync,stale}/runs.csv, one per arm's command; naive GRPO sync and stale at the
    registered lag, seeds from the registration's ``seeds_from``): the testbed's rule (`gac1_parts`) on each seed's
    ``late_grad_cos_split_half`` (the cosine between consecutive updates' mean gradients over the second half of
    the updates, not capped by r / (1 + r)), at the level of a fixed design (one-sided `ALPHA`). None until every
    run of both arms has finished; a run with a non-confirmatory seed is never read."""
    import pandas as pd

    folder = str(((prereg.get("claims") or {}).get("GAC-1") or {}).get("runs", POCKET_GAC1))
    try:
        runs = pd.concat([pd.read_csv(Path(root) / folder / arm / "runs.csv") for arm in ("sync", "stale")])
    except (OSError, ValueError):
        return None
    first = int((prereg.get("common") or {}).get("seeds_from", 100))
    runs = runs[runs["seed"] >= first]
    if runs.empty or not runs["finished"].astype(bool).all() or set(runs["arm"]) != {"sync", "stale"} \
            or "late_grad_cos_split_half" not in runs:
        return None
    eta = int(runs[runs["arm"] == "stale"]["eta"].iloc[0])
    level = f"eta{eta}"
    cos = {("grpo", 'sync' if arm == 'sync' else level): list(g.sort_values("seed")["late_grad_cos_split_half"])
           for arm, g in runs.groupby("arm")}
    with using_level(LEVEL):
        parts = gac1_parts(cos, ["sync", level])
    verdict = combine(parts)
    shown = "; ".join(f"{o.name}: {fmt_interval(o)} -> {o.status}" for o in parts)
    return {"pocket": verdict,
            "pocket_evidence": f"confirmatory runs {folder}/{{sync,stale}}/runs.csv (seeds {int(runs['seed'].min())}.."
                               f"{int(runs['seed'].max())}, {len(runs)} runs): split-half consecutive-update cosine "
                               f"per seed, sync {fmt(cos[('grpo', 'sync')])}, stale eta = {eta} {fmt(cos[('grpo', level)])}; "
                               f"{shown}"}


def rescue_runs(root: Path, spec: dict[str, Any], prereg: dict[str, Any], arms: tuple[str, ...]
                ) -> tuple[Any, dict[str, Any], str] | None:
    """(runs, study.json, folder) of a rescue design: the rows of ``arms`` in its ``runs`` folder (default
    `POCKET_RESCUE`) whose seed is confirmatory (at least the registration's ``seeds_from``), by seed; None when
    nothing is tabulated."""
    import pandas as pd

    folder = str(spec.get("runs", POCKET_RESCUE))
    try:
        runs = pd.read_csv(Path(root) / folder / "runs.csv")
        meta = json.loads((Path(root) / folder / "study.json").read_text())
    except (OSError, ValueError):
        return None
    first = int((prereg.get("common") or {}).get("seeds_from", 100))
    runs = runs[(runs["seed"] >= first) & runs["arm"].isin(arms)].sort_values("seed")
    return (runs, meta, folder) if not runs.empty else None


def rescue_errors(runs: Any, method: str) -> tuple[dict[tuple[str, str], list[float]], int, str]:
    """Per cell (grpo sync, grpo at the lag, ``method`` at the lag) the errors 1 - score in seed order (a diverged
    run scores 0), the lag and its level name."""
    eta = int(runs[runs["arm"] != "sync"]["eta"].iloc[0])
    level = f"eta{eta}"
    score = runs["accuracy"].where(~runs["diverged"].astype(bool), 0.0)
    error = {('grpo' if arm in ('sync', 'stale') else arm, 'sync' if arm == 'sync' else level): list(1.0 - score[g.index])
             for arm, g in runs.groupby("arm")}  # each arm's errors in seed order (pairs by seed position)
    return error, eta, level


def pocket_rescue(root: Path, prereg: dict[str, Any], cid: str) -> dict[str, str] | None:
    """AREAL-1 or GAC-2 (``cid``: its method `METHOD`) on the pocket LM from their confirmatory runs (the
    registration's ``runs`` folder, default `POCKET_RESCUE`; runs.csv: naive GRPO sync and stale at the registered
    lag, and stale + each method, seeds from
    the registration's ``seeds_from``): the testbed's rule (`rescue_parts`, both tolerances the registration's
    ``margin`` on the difference scale, default `llm_scale.pocket_design.MARGIN`; the plain paired mean, no seed trimmed: a
    rescue is a claim about the tail) on error = 1 - score per seed (the
    score: greedy accuracy, the mean of the last two evaluations; a diverged run scores 0, as in the study's
    promotion rule), errors floored at half a problem of the evaluations, at the level of a fixed design
    (one-sided `ALPHA`). Until every run of the three arms has finished: "not measured", with how many have; None
    when no run is tabulated. A run with a non-confirmatory seed is never read. A registration with ``looks`` is
    a sequential design (`sequential_rescue`)."""
    method, spec = METHOD[cid], (prereg.get("claims") or {}).get(cid) or {}
    if spec.get("looks"):
        return sequential_rescue(root, prereg, cid)
    read = rescue_runs(root, spec, prereg, ("sync", "stale", method))
    if read is None:
        return None
    runs, meta, folder = read
    done = runs["finished"].astype(bool)
    seeds = sorted(set(runs["seed"]))
    if not done.all() or set(runs["arm"]) != {"sync", "stale", method} or len(runs) != 3 * len(seeds):
        return {"pocket": "not measured",
                "pocket_evidence": f"confirmatory runs {folder}/runs.csv: {int(done.sum())} of {3 * len(seeds)} "
                                   f"runs of sync, stale and stale + {method} finished (seeds {seeds[0]}..{seeds[-1]}); "
                                   f"judged when all have"}  # fmt: skip
    error, eta, level = rescue_errors(runs, method)
    problems = int(meta.get("eval_problems", 512))  # behind a score: the evaluation size times the evaluations averaged
    margin = float(spec.get("margin", MARGIN))
    with using_level(LEVEL):
        parts = rescue_parts(error, ["sync", level], method, 0.5 / problems, degrade=margin, match=margin, scale="diff",
                             estimator="mean")
    shown = (f"confirmatory runs {folder}/runs.csv (seeds {seeds[0]}..{seeds[-1]}, {len(runs)} runs): error "
             f"(1 - greedy accuracy on {problems} problems) grpo sync {fmt(error[('grpo', 'sync')], 3, pct=True)}, grpo "
             f"eta = {eta} {fmt(error[('grpo', level)], 3, pct=True)}, {method} {fmt(error[(method, level)], 3, pct=True)}; "
             + "; ".join(f"{o.name}: {fmt_interval(o)} -> {o.status}" for o in parts))  # fmt: skip
    if parts[0].status == "n/a":  # the testbed's reading of a precondition that does not hold (`combine`)
        return {"pocket": "not testable", "pocket_evidence": shown + " (grpo does not degrade by the margin at the registered lag)"}
    return {"pocket": combine(parts), "pocket_evidence": shown}  # an undecided precondition: inconclusive


def sequential_rescue(root: Path, prereg: dict[str, Any], cid: str) -> dict[str, str] | None:
    """``cid`` under a sequential registration of its match part alone: arms grpo at sync and stale + the method;
    ``looks`` (seeds per arm at each look, evenly spaced: `testbed.util.sequential.Design` with the registration's
    ``spending``, alpha `ALPHA`) over the registration's ``seeds`` in order; the precondition "grpo degrades at the
    lag" judged on the runs of the earlier registration its ``precondition`` names (that design's own rule: the
    plain paired mean at a fixed design's level, the margin as the minimum rise). Each look reads "the method
    matches grpo at sync" (TOST on the plain paired mean of the errors, within the ``margin``) at its level; the
    first decided look gives the verdict, an undecided last look "inconclusive". Until a look's runs have all
    finished: "not measured", with what the looks so far read; None when no run is tabulated."""
    import tomllib

    from testbed.util.sequential import Design

    method, spec = METHOD[cid], (prereg.get("claims") or {}).get(cid) or {}
    looks = [int(n) for n in spec["looks"]]
    design = Design(looks[0], looks[1] - looks[0] if len(looks) > 1 else 1, looks[-1], alpha=ALPHA,
                    spending=str(spec.get("spending", "pocock")))
    if list(design.looks) != looks:
        raise ValueError(f"{cid}: looks must be evenly spaced seeds per arm, got {looks}")
    seeds = [int(s) for s in spec["seeds"]][: looks[-1]]
    read = rescue_runs(root, spec, prereg, ("sync", method))
    if read is None:
        return None
    runs, meta, folder = read
    margin = float(spec.get("margin", MARGIN))
    earlier = tomllib.loads((Path(root) / str(spec["precondition"])).read_text())
    base = rescue_runs(root, (earlier.get("claims") or {}).get(cid) or {}, earlier, ("sync", "stale"))
    if base is None or not base[0]["finished"].astype(bool).all():
        return {"pocket": "not measured", "pocket_evidence": f"the precondition's runs ({spec['precondition']}) have not finished"}
    base_error, eta, level = rescue_errors(base[0], method)
    lags = set(runs.loc[runs["arm"] == method, "eta"].astype(int))
    if lags != {eta}:
        raise ValueError(f"{cid}: the precondition's runs are at eta = {eta}, this design's at {sorted(lags)}")
    with using_level(LEVEL):
        pre = precondition(f"grpo degrades at {level} ({spec['precondition']}, seeds {int(base[0]['seed'].min())}.."
                           f"{int(base[0]['seed'].max())})", base_error[("grpo", "sync")], base_error[("grpo", level)],
                           margin, estimator="mean")  # fmt: skip
    head = f"precondition {pre.name}: {fmt_interval(pre)} -> {pre.status}"
    if pre.status != "holds":
        return {"pocket": "not testable" if pre.status == "n/a" else "inconclusive", "pocket_evidence": head}
    problems = int(meta.get("eval_problems", 512))
    shown: list[str] = []
    for k, n in enumerate(looks):
        at = runs[runs["seed"].isin(seeds[:n])]
        finished = int(at["finished"].astype(bool).sum())
        if finished < 2 * n:
            return {"pocket": "not measured",
                    "pocket_evidence": "; ".join([head, *shown, f"look {k + 1} ({n} seeds per arm, {seeds[0]}..{seeds[n - 1]}): "
                                                 f"{finished} of {2 * n} runs of sync and stale + {method} finished "
                                                 f"in {folder}/runs.csv; judged when all have"])}  # fmt: skip
        error, _, _ = rescue_errors(at, method)
        with using_level(design.level(k)):
            same = equivalence(f"{method} at {level} matches grpo sync (difference)", error[("grpo", "sync")],
                               error[(method, level)], margin, "diff", 0.5 / problems, estimator="mean")
        shown.append(f"look {k + 1} of {len(looks)} ({n} seeds per arm, {seeds[0]}..{seeds[n - 1]}; error (1 - greedy "
                     f"accuracy on {problems} problems) grpo sync {fmt(error[('grpo', 'sync')], 3, pct=True)}, {method} "
                     f"{fmt(error[(method, level)], 3, pct=True)}; interval at {100 * design.level(k):.1f}%): "
                     f"{same.name}: {fmt_interval(same)} -> {same.status}")  # fmt: skip
        if same.status != "undecided":
            break
    return {"pocket": combine([pre, same]), "pocket_evidence": f"confirmatory runs {folder}/runs.csv; " + "; ".join([head, *shown])}


def pocket_cells(root: Path) -> dict[str, dict[str, str]]:
    """Claim -> the pocket LM's cell (``pocket``, ``pocket_evidence``) and the GPU model's (``gpu``), from the
    pre-registration `POCKET_PREREG` and the pilot's ``design.json`` it names (seeds and CPU-hours per design,
    ``python -m llm_scale.pocket_design``). A design not yet run is "not measured", with what it needs."""
    import tomllib

    root = Path(root)
    try:
        prereg = tomllib.loads((root / POCKET_PREREG).read_text())
    except (OSError, ValueError):
        prereg = {}
    design = load_json(root / str(prereg.get("pilot", ""))) if prereg.get("pilot") else None
    design = design if isinstance(design, dict) else {}
    status = str(prereg.get("status", "absent"))
    out = {}
    for cid in LLM_CLAIMS:
        spec = (prereg.get("claims") or {}).get(cid) or {}
        if not spec:
            out[cid] = {"pocket": "not measured", "pocket_evidence": f"no design in {POCKET_PREREG}",
                        "gpu": "not measured: no GPU command in " + POCKET_PREREG}  # fmt: skip
            continue
        plan = design.get("AREAL-1/GAC-2" if cid in METHOD else cid) or {}
        seeds, hours = plan.get("seeds", plan.get("stale_runs_needed")), plan.get("cpu_hours")
        if isinstance(seeds, dict):
            seeds = max((v for v in seeds.values() if isinstance(v, int)), default=None)
        if isinstance(seeds, int) and isinstance(hours, int | float):
            need = f"{seeds} {'stale runs' if cid == 'VCPO-1' else 'seeds per arm'}, {hours:.1f} CPU-hours at the pilot's cost"
        elif isinstance(plan.get("cpu_hours_either_way"), int | float):  # GAC-1: the stale part decided either way
            either = max(v for v in plan["seeds_either_way"].values() if isinstance(v, int))
            need = (f"the registered formula is undefined at the pilot's means; to decide the stale part either way: "
                    f"{either} seeds per arm, {plan['cpu_hours_either_way']:.1f} CPU-hours at the pilot's cost")  # fmt: skip
        elif plan:
            need = f"not computable from the pilot ({plan.get('why', 'its spread is undefined')})"
        else:
            need = "seeds from a pilot not yet run"
        judged = pocket_gac1(root, prereg) if cid == "GAC-1" else (
            pocket_rescue(root, prereg, cid) if cid in METHOD else None)
        if judged is not None:
            out[cid] = {**judged, "gpu": f"not measured: needs {spec.get('gpu_command', '?')} ({spec.get('gpu_cost', '?')})"}
            continue
        out[cid] = {"pocket": "not measured",
                    "pocket_evidence": f"needs: {spec.get('design', '?')}; rule: {spec.get('rule', '?')}; power: "
                                       f"{spec.get('power', '?')} -> {need} (pre-registration {POCKET_PREREG}, "
                                       f"status {status})",
                    "gpu": f"not measured: needs {spec.get('gpu_command', '?')} ({spec.get('gpu_cost', '?')})"}  # fmt: skip
    later = []  # the later registrations that parse, in order
    for path in POCKET_REDESIGNS:
        try:
            later.append((path, tomllib.loads((root / path).read_text())))
        except (OSError, ValueError):
            continue
    return {cid: redesigned(root, cid, cell, later) for cid, cell in out.items()}


def redesigned(root: Path, cid: str, cell: dict[str, str], later: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """``cell`` (the first registration's, `pocket_cells`) under each later registration (``later``: (path, parsed
    file) of `POCKET_REDESIGNS`, in order) that holds a design for ``cid``: a design whose runs have all finished
    gives the cell its verdict, the earlier design's shown beside it; one whose lag rule chose no lag
    (``lag_choice``, the output of ``python -m llm_scale.pocket_design lag``, with ``eta`` null) makes the claim "not
    testable" there, with the rule's reading; one not yet run (or not finished) leaves the verdict as it was and
    says what it needs. The GPU cell is the first registration's."""
    for path, reg in later:
        spec = (reg.get("claims") or {}).get(cid)
        if not spec:
            continue
        earlier = f"earlier design: {cell['pocket']} ({cell['pocket_evidence']})"
        lag = load_json(Path(root) / str(spec["lag_choice"])) if spec.get("lag_choice") else None
        if isinstance(lag, dict) and "eta" in lag and lag["eta"] is None:
            drops = ", ".join(f"eta {e} {v['mean_drop']:+.3f}" for e, v in (lag.get("per_eta") or {}).items()
                              if isinstance(v, dict) and "mean_drop" in v)
            cell = {**cell, "pocket": "not testable",
                    "pocket_evidence": f"{path}: {lag.get('reading', 'its lag rule chose no lag')}"
                                       + (f" (naive GRPO's mean paired drop sync - stale, pilot seeds: {drops})" if drops else "")
                                       + f"; {earlier}"}  # fmt: skip
            continue
        judged = pocket_gac1(root, reg) if cid == "GAC-1" else pocket_rescue(root, reg, cid) if cid in METHOD else None
        if judged is not None and judged["pocket"] != "not measured":
            cell = {**cell, **judged, "pocket_evidence": f"{judged['pocket_evidence']} (registration {path}); {earlier}"}
            continue
        so_far = judged["pocket_evidence"] if judged is not None else "not yet run"
        first = (reg.get("common") or {}).get("seeds_from", "?")
        cell = {**cell, "pocket_evidence": f"{cell['pocket_evidence']}; a later design is registered ({path}, seeds from "
                                           f"{first}): {so_far}; it needs {spec.get('sweeps', '?')} "
                                           f"({spec.get('cpu_cost', '?')})"}  # fmt: skip
    return cell


def pocket_setting(root: Path) -> list[str]:
    """Lines on the setting the pocket LM's designs use, from the pilot's ``design.json`` named by `POCKET_PREREG`:
    the chosen (cell, learning rate), whether synchronous GRPO learns there (its gain per seed and the binomial
    standard error of the mean gain) and, where the pilot ran it, the stale arm's paired drop per seed."""
    import tomllib

    root = Path(root)
    try:
        prereg = tomllib.loads((root / POCKET_PREREG).read_text())
    except (OSError, ValueError):
        return []
    design = load_json(root / str(prereg.get("pilot", ""))) if prereg.get("pilot") else None
    if not isinstance(design, dict) or design.get("chosen_lr") is None:
        return []
    cell, lr = design.get("chosen_cell") or "", design["chosen_lr"]
    chosen = next((h for h in design.get("health", []) if h.get("lr") == lr and (h.get("cell") or "") == cell), {})
    gains = ", ".join(f"{g:+.3f}" for g in chosen.get("gains", []))
    learns = "learns" if design.get("chosen_learns") else "does not learn (the healthy setting with the largest gain)"
    line = (f"Setting of the pocket LM's designs ({prereg['pilot']}): {cell + ', ' if cell else ''}lr {lr:g}; synchronous "
            f"GRPO {learns}: greedy-accuracy gain per seed {gains}, mean {chosen.get('mean_gain', math.nan):+.3f} "
            f"(binomial SE {chosen.get('gain_se', math.nan):.3f}).")  # fmt: skip
    drops = design.get("stale_drops") or []
    if drops:
        line += " Stale arm (naive GRPO, eta = 4) there: paired drop sync - stale per seed " + ", ".join(f"{d:+.3f}" for d in drops) + "."
    return ["", line]
