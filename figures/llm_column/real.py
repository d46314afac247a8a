"""The real models' studies and trainer runs (SmolLM2 and a GPU model): the promotion studies on disk (`Study`,
`studies`), the GAC-1 and VCPO-1 trainer runs (`gac1_runs`, `vcpo1_runs`), and the verdict each gives its claim by
the testbed's rule (`gac1_verdict`, `vcpo1_verdict`, `rescue_verdict`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from figures.evidence import Cell
from figures.experiments.async_grpo.judges import gac1_parts, rescue_parts
from figures.experiments.mnist_delay.evidence import collapses, precursor_counts
from figures.experiments.mnist_delay.judges import precursor_leads, precursor_parts
from figures.llm_column.settings import BAND, GAC1_RUNS, TESTBED_FINGERPRINT, VCPO1_RUNS, load_json
from testbed.util.stats import bonferroni_level, combine, fmt, fmt_interval, using_level

RUNS_DTYPES = {"key": "string", "stage": "string", "finished": "bool"}
SEARCH_DTYPES = {"eta": "int64", "lr": "float64", "drop": "float64", "drop_se": "float64", "pairs": "int64",
                 "degrades": "bool", "complete": "bool"}


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


def search_cells(path: Path) -> tuple[dict[str, Any], ...]:
    """The promotion study's search table (``search.csv``, written by ``llm_scale.study``) as records, read with
    explicit types; empty where the file is absent or not in that schema."""
    import pandas as pd

    try:
        table = pd.read_csv(path, usecols=list(SEARCH_DTYPES), dtype=SEARCH_DTYPES)
    except (OSError, ValueError):
        return ()
    return tuple(table.to_dict("records"))


def finished_search_runs(path: Path) -> frozenset[str]:
    """The keys (configuration hashes) of the promotion study's finished search runs (``runs.csv``, written by
    ``llm_scale.study``), read with explicit types; empty where the file is absent or not in that schema."""
    import pandas as pd

    try:
        table = pd.read_csv(path, usecols=list(RUNS_DTYPES), dtype=RUNS_DTYPES)
    except (OSError, ValueError):
        return frozenset()
    return frozenset(table.loc[(table["stage"] == "search") & table["finished"], "key"])


@dataclass(frozen=True)
class Study:
    """One promotion study as its study.json records it."""

    path: str
    base: str
    recipes: tuple[str, ...]
    eval_problems: int
    chosen: dict[str, Any] | None
    forced: bool
    verdict: str
    cell_runs: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    runs_finished: int = 0
    runs_planned: int = 0
    rule: dict[str, float] = field(default_factory=dict)
    search: tuple[dict[str, Any], ...] = field(default_factory=tuple)
    search_runs: frozenset[str] = frozenset()

    @classmethod
    def read(cls, path: Path) -> Study | None:
        """The study in ``path``, or None when the file is unreadable or not in study.json's schema; its
        search cells and finished search runs from the ``search.csv`` and ``runs.csv`` beside it (none where a
        table is absent or unreadable)."""
        d = load_json(path)
        try:
            rule = {k: float(d["rule"][k]) for k in ("min_drop", "min_se")} if "rule" in d else {}
            return cls(str(path), str(d["base"]), tuple(map(str, d["recipes"])), int(d["eval_problems"]),
                       d["chosen"], bool(d["forced"]), str(d["verdict"]), tuple(d["cell_runs"]),
                       int(d["runs_finished"]), int(d["runs_planned"]), rule, search_cells(path.parent / "search.csv"),
                       finished_search_runs(path.parent / "runs.csv"))
        except (KeyError, TypeError, ValueError):
            return None

    def search_text(self) -> str:
        """Each searched cell's drop (sync minus stale accuracy, paired by seed) with its standard error, and the
        rule it was held to; empty where the search table is missing."""
        cells = "; ".join(f"eta {c['eta']}, lr {c['lr']:g}: drop {c['drop']:+.3f} +- {c['drop_se']:.3f} "
                          f"({c['pairs']} pairs, {_ratio(c['drop'], c['drop_se']):.1f} standard errors)" for c in self.search)
        if not cells or not self.rule:
            return cells
        return cells + (f"; the rule asks a drop >= {self.rule['min_drop']:g} and >= {self.rule['min_se']:g} "
                        "standard errors")

    def errors(self, method: str) -> tuple[dict[Cell, list[float]], list[str]]:
        """Per-seed errors of the chosen cell (cells (base, "sync"), (base, stale) and (method, stale), seeds in the
        same order, NaN where a run has not finished) and the levels."""
        stale = f"eta={self.chosen['eta']}, lr={self.chosen['lr']:g}"
        cells = {"sync": (self.base, "sync"), "stale": (self.base, stale), method: (method, stale)}
        seeds = sorted({int(r["seed"]) for r in self.cell_runs})
        error = {c: [math.nan] * len(seeds) for c in cells.values()}
        for r in self.cell_runs:
            if r.get("arm") in cells and r.get("finished"):
                acc = r.get("accuracy")
                e = 1.0 if r.get("diverged") else (1.0 - float(acc) if acc is not None else math.nan)
                error[cells[r["arm"]]][seeds.index(int(r["seed"]))] = e
        return error, ["sync", stale]


def latest_looks(found: list[Study]) -> tuple[list[Study], list[str]]:
    """The studies that no other study supersedes, and a note per superseded one: a study whose finished search
    runs are a proper, non-empty subset of another's is an earlier look of that search (module docstring)."""
    kept, notes = [], []
    for s in found:
        later = [t for t in found if s.search_runs and s.search_runs < t.search_runs]
        if later:
            notes.append(f"{s.path} superseded by {later[-1].path} (an earlier look: its {len(s.search_runs)} "
                         f"search runs are among that study's {len(later[-1].search_runs)})")
        else:
            kept.append(s)
    return kept, notes


def studies(root: Path) -> tuple[list[Study], list[str]]:
    """Every readable study.json under results/llm/study, in path order, and the files skipped."""
    found, skipped = [], []
    for path in sorted((Path(root) / "results/llm/study").rglob("study.json")):
        s = Study.read(path)
        (found.append(s) if s is not None else skipped.append(str(path)))
    return found, skipped


def gac1_verdict(fps: list[dict[str, Any]], m_testbed: float | None, b_testbed: float | None) -> tuple[str, str]:
    if not m_testbed:
        return "not measured", "the testbed regime's minibatch size is not recorded in its evidence"
    target = m_testbed / b_testbed if b_testbed else None
    best = None
    for fp in fps:
        b = fp.get("noise_scale")
        for c in fp.get("cosine_by_minibatch") or []:
            try:
                m, lo, hi, mean = float(c["m"]), float(c["ci_low"]), float(c["ci_high"]), float(c["mean"])
            except (KeyError, TypeError, ValueError):
                continue
            if not (m > 0 and math.isfinite(lo) and math.isfinite(hi)):
                continue
            if target is not None:
                if not (isinstance(b, int | float) and b > 0):
                    continue
                dist = abs(math.log(m / b / target))
            else:
                dist = abs(math.log(m / m_testbed))
            if best is None or dist < best[0]:
                best = (dist, m, lo, hi, mean, fp)
    if best is None:
        return "not measured", ("no real-model fingerprint with cosine_by_minibatch"
                                + (" and noise_scale" if target is not None else "") + " under results/llm/fingerprint")
    _, m, lo, hi, mean, fp = best
    model, task, b = fp.get("model", "?"), fp.get("task", "?"), fp.get("noise_scale")
    status = "holds" if lo > -BAND and hi < BAND else "fails" if (lo > BAND or hi < -BAND) else "undecided"
    matched = (f"m / B_noise = {m:g} / {b:.0f} = {m / b:.3f} against the testbed's {m_testbed:g} / {b_testbed:.0f} = "
               f"{target:.3f}" if target is not None else
               f"m = {m:g} against the testbed's {m_testbed:g} (no testbed noise scale in {TESTBED_FINGERPRINT}: "
               "matched by m)")
    earlier = fp.get("_earlier") or []
    source = f"{fp['_file']}, {fp.get('date', 'undated')}" + (f"; supersedes {', '.join(earlier)}" if earlier else "")
    return f"sync part {status}", f"{model} on {task} ({source}): sync cosine {mean:+.3f} [{lo:+.3f}, {hi:+.3f}] at {matched}"


def gac1_runs(root: Path) -> dict[str, Any] | None:
    """GAC-1's trainer runs as `GAC1_RUNS` records them: {"eta": the stale arm's lag, "seeds": [...],
    "cos": {"sync": [...], "stale": [...]} (per seed, NaN where the run has not finished or defines no
    cosine), "finished": n, "planned": n}; None when the file is absent, unreadable or lacks a column."""
    import pandas as pd

    path = Path(root) / GAC1_RUNS
    types = {"stage": str, "arm": str, "eta": "Int64", "seed": "Int64", "finished": bool, "late_grad_cos_within": float}
    try:
        t = pd.read_csv(path, dtype=types)[list(types)]  # a missing column: KeyError
        t = t[(t["stage"] == "search") & t["arm"].isin(["sync", "stale"])]
        etas = sorted(set(t["eta"].dropna().astype(int)))
        seeds = sorted(set(t["seed"].dropna().astype(int)))
    except (OSError, ValueError, KeyError):
        return None
    if len(etas) != 1 or not seeds:
        return None
    cos: dict[str, list[float]] = {arm: [math.nan] * len(seeds) for arm in ("sync", "stale")}
    for r in t.itertuples():
        if r.finished and math.isfinite(r.late_grad_cos_within):
            cos[r.arm][seeds.index(int(r.seed))] = float(r.late_grad_cos_within)
    return {"eta": etas[0], "seeds": seeds, "cos": cos, "finished": int(t["finished"].sum()), "planned": len(t),
            "file": str(path)}


def gac1_trainer_verdict(runs: dict[str, Any], sync_shown: str) -> tuple[str, str]:
    """The whole of GAC-1 on the real model's trainer runs, by the testbed's rule."""
    stale = f"eta={runs['eta']}"
    parts = gac1_parts({("grpo", "sync"): runs["cos"]["sync"], ("grpo", stale): runs["cos"]["stale"]}, ["sync", stale])
    shown = (f"{runs['file']}: within-batch consecutive-step cosine over the second half of the updates, per seed "
             f"{', '.join(map(str, runs['seeds']))}: sync {fmt(runs['cos']['sync'], 2)}, {stale} "
             f"{fmt(runs['cos']['stale'], 2)}; " + "; ".join(f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in parts)
             + f". Fingerprint: {sync_shown}")
    return combine(parts), shown


def _fingerprint_ess(fps: list[dict[str, Any]]) -> str:
    ess = []
    for fp in fps:
        for s in fp.get("staleness") or []:
            if isinstance(s, dict) and s.get("lag") is not None and s.get("ess_seq") is not None:
                ess.append(f"lag {s['lag']}: ESS/N {float(s['ess_seq']):.2f}")
    return ("fingerprint ESS by lag: " + ", ".join(ess[:6])) if ess else ""


def _vcpo1_look(folder: Path) -> dict[str, Any] | None:
    """One look's trainer runs (``runs.csv``, ``updates.csv`` of its search stage), typed; None when a file is
    absent, unreadable or lacks a column."""
    import pandas as pd

    run_types = {"key": str, "stage": str, "finished": bool}
    types = {"key": str, "arm": str, "eta": "Int64", "lr": float, "seed": "Int64", "diverged": bool, "version": "Int64",
             "eval_reward": float, "staleness_ess": float, "grad_norm_raw": float}  # fmt: skip
    try:
        runs = pd.read_csv(folder / "runs.csv", dtype=run_types)[list(run_types)]
        up = pd.read_csv(folder / "updates.csv", dtype=types)[list(types)]
    except (OSError, ValueError, KeyError):
        return None
    runs = runs[runs["stage"] == "search"]
    return {"runs": runs, "updates": up[up["key"].isin(set(runs["key"]))], "file": str(folder)}


def vcpo1_runs(root: Path) -> dict[str, Any] | None:
    """VCPO-1's trainer runs, the looks of `VCPO1_RUNS` in order, in the shape the testbed's collapse code reads:
    ``table`` (one row per evaluation: ``recipe``, ``delay``, ``seed``, ``run_id``, ``step`` = policy version,
    ``test_error`` = 1 - greedy accuracy, ``status``), ``steps`` (run_id -> one row per update: ``step`` = the
    version it made, ``ess`` = its ``staleness_ess``, ``grad_norm`` = its ``grad_norm_raw``), ``log_every``
    (updates between evaluations), ``finished`` / ``planned`` and ``file`` of the looks read, ``looks`` (how
    many) and ``unread`` (each later look not read, with why: its runs have not all finished, it cannot be read,
    or an earlier look is not read). The looks are read together from the first up to the first that has not
    finished or cannot be read (the first look is always read, finished or not); None when the first look is
    absent or unreadable."""
    import pandas as pd

    read: list[dict[str, Any]] = []
    unread: list[str] = []
    for name in VCPO1_RUNS:
        folder = Path(root) / name
        if read and not folder.exists():
            continue  # a look not started
        look = _vcpo1_look(folder)
        if not read:
            if look is None:
                return None
            read.append(look)
        elif look is None:
            unread.append(f"{folder} (unreadable)")
        elif not look["runs"]["finished"].all():
            unread.append(f"{folder} ({int(look['runs']['finished'].sum())} of {len(look['runs'])} runs finished)")
        elif unread:  # a look is read only after every earlier one
            unread.append(f"{folder} (an earlier look is not read)")
        else:
            read.append(look)
    runs = pd.concat([x["runs"] for x in read])
    up = pd.concat([x["updates"] for x in read])
    evaluated = up[up["eval_reward"].notna()]
    gaps = {int(g) for _, r in evaluated.groupby("key") for g in np.diff(np.sort(r["version"].to_numpy(dtype=int)))}
    level = np.where(evaluated["arm"] == "sync", "sync", "fixed:" + evaluated["eta"].astype(str))
    table = pd.DataFrame({
        "recipe": "grpo", "delay": level + " lr=" + evaluated["lr"].map(lambda v: f"{v:g}"),
        "seed": evaluated["seed"].astype(int), "run_id": evaluated["key"],
        "step": evaluated["version"].astype(float), "test_error": 1.0 - evaluated["eval_reward"],
        "status": np.where(evaluated["diverged"], "diverged", "finished")})  # fmt: skip
    made = up[up["version"] > 0]
    steps = {key: pd.DataFrame({"step": r["version"].astype(float), "ess": r["staleness_ess"],
                                "grad_norm": r["grad_norm_raw"]}) for key, r in made.groupby("key")}  # fmt: skip
    return {"table": table, "steps": steps, "log_every": min(gaps) if gaps else 1, "finished": int(runs["finished"].sum()),
            "planned": len(runs), "file": " + ".join(x["file"] for x in read), "looks": len(read),
            "unread": unread}  # fmt: skip


def vcpo1_verdict(fps: list[dict[str, Any]], runs: dict[str, Any] | None) -> tuple[str, str]:
    """VCPO-1 on the real model's trainer runs, by the testbed's rule and code (module docstring)."""
    fingerprint = _fingerprint_ess(fps)
    if runs is None or runs["finished"] < runs["planned"] or not runs["planned"]:
        done = f" ({runs['finished']} of {runs['planned']} trainer runs in {runs['file']} finished)" if runs else ""
        return "not measured", "no collapse in the real-model runs to test precursors against" + done + (
            f"; {fingerprint}" if fingerprint else "")
    events, quiet = collapses(runs["table"], runs["steps"], runs["log_every"])
    counts = precursor_counts(events, quiet)
    where = ", ".join(f"{x['delay']} seed {x['seed']} at version {x['step']:.0f}" for x in events)
    sync = sum(x["delay"].startswith("sync") for x in events if x.get("enough_history"))
    head = (f"{runs['file']}: {runs['planned']} runs, {len(events)} collapse(s)" + (f" ({where})" if where else "")
            + f", {counts['n']} after enough history ({sync} synchronous, whose ESS is 1 by construction); "
            + f"{counts['nq']} non-collapsing run ends")
    if runs["looks"] > 1:
        head += (f"; {runs['looks']} looks read together, each interval at {100 * bonferroni_level(runs['looks']):g}% "
                 f"(one look: {100 * bonferroni_level(1):g}%)")
    if runs["unread"]:
        head += f"; looks not read: {', '.join(runs['unread'])}"
    if counts["n"] == 0:
        return "not testable", head + ": no collapse after enough logged updates to test precursors against"
    with using_level(bonferroni_level(runs["looks"])):
        parts = precursor_parts(counts)
    leads = precursor_leads(events, "updates")
    return combine(parts), (head + "; " + "; ".join(f"{p.name} ({p.detail}): {fmt_interval(p)} -> {p.status}" for p in parts)
                            + (f" ({'; '.join(leads)})" if leads else ""))


def rescue_verdict(found: list[Study], skipped: list[str], method: str) -> tuple[str, str]:
    mine = [s for s in found if method in s.recipes]
    if not mine:
        why = f"no promotion study with {method} among its recipes under results/llm/study"
        return "not measured", why + (f" (unreadable or not in study.json's schema: {', '.join(skipped)})" if skipped else "")
    mine, superseded = latest_looks(mine)  # a sequential design's verdict is its last look's
    status, evidence = _rescue_latest(mine, method)
    return status, evidence + "".join(f"; {note}" for note in superseded)


def _rescue_latest(mine: list[Study], method: str) -> tuple[str, str]:
    """AREAL-1 / GAC-2 on the latest looks of the promotion studies with ``method`` among their recipes."""
    valid = [s for s in mine if s.chosen is not None and not s.forced]
    if not valid:
        untestable = [s for s in mine if s.chosen is None and s.verdict.startswith("not testable")]
        searching = [s for s in mine if s.chosen is None and not s.forced and s not in untestable]
        unfinished = "; ".join(f"{s.path}: {s.verdict} ({s.runs_finished} of {s.runs_planned} planned runs finished)"
                               for s in searching)  # fmt: skip
        if untestable:
            named = "; ".join(f"{s.path}: {s.verdict}" + (f" ({s.search_text()})" if s.search else "")
                              for s in untestable)  # fmt: skip
            return "not testable", (named + f"; {mine[0].base} degrades in no searched cell"
                                    + (f"; not finished: {unfinished}" if unfinished else ""))
        if searching:
            return "not measured", unfinished + "; a search that has not finished chooses no cell"
        forced = [s for s in mine if s.forced]
        if forced:
            return "not measured", f"{forced[0].path}: {forced[0].verdict}; a forced cell is never judged"
        return "not measured", f"{mine[0].path}: {mine[0].verdict}"
    s = valid[-1]
    error, levels = s.errors(method)
    if any(not np.isfinite(np.asarray(v, dtype=float)).all() for v in error.values()):
        return "not measured", f"{s.path}: the chosen cell's comparison runs have not all finished"
    parts = rescue_parts(error, levels, method, 0.5 / max(s.eval_problems, 1), base=s.base)
    shown = (f"{s.path}: error (1 - greedy accuracy on {s.eval_problems} problems) {s.base} sync "
             f"{fmt(error[(s.base, 'sync')], 3, pct=True)}, {s.base} {levels[1]} "
             f"{fmt(error[(s.base, levels[1])], 3, pct=True)}, {method} {fmt(error[(method, levels[1])], 3, pct=True)}; "
             + "; ".join(f"{p.name}: {fmt_interval(p)} -> {p.status}" for p in parts))
    if parts[0].status != "holds":
        return "not testable", shown + f" ({s.base} does not degrade by the testbed's rule in the study's chosen cell)"
    return combine(parts[1:]), shown
