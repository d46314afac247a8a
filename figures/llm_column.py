"""The real-LLM column: what SmolLM2-135M-Instruct shows for the claims it can speak to, beside the testbed.

Sources, each read in the schema its writer gives it (a file that is absent, unreadable or lacks a field
gives "not measured" with the reason, never an error):

* ``results/llm/fingerprint/**/<model>__<task>.json`` (``python -m llm_scale fingerprint``):
  ``cosine_by_minibatch`` [{m, mean, ci_low, ci_high, pairs}] (m in sequences), ``noise_scale`` (B_noise,
  sequences), ``staleness`` [{lag, ess_seq, ...}], ``date``. Of several measurements of one model and task
  only the newest is read (a re-measurement, e.g. with fresh prompts after a rule was fixed, supersedes the
  earlier ones, which the evidence names);
* ``results/fingerprint/async_grpo.json`` (``python -m testbed fingerprint --regime async_grpo``): the same
  fields for the testbed's async-GRPO regime;
* ``results/llm/study/**/study.json`` (``python -m llm_scale study``, the promotion study): ``rule``
  {min_drop, min_se}, ``base``, ``recipes``, ``eval_problems``, ``chosen`` {eta, lr} or null, ``forced``,
  ``verdict``, ``cell_runs`` [{arm, seed, finished, diverged, accuracy}] (arm: "sync", "stale" or a recipe
  trained stale);
* ``results/llm/vcpo1_cpu/runs.csv`` and ``updates.csv`` (``python -m llm_scale study
  sweeps/llm/vcpo1_cpu.toml``, VCPO-1's trainer runs; its second look, ``sweeps/llm/vcpo1_cpu_look2.toml``,
  writes the same files to ``results/llm/vcpo1_cpu_look2``): per run ``key``, ``stage``, ``finished``; per run and
  policy version ``eval_reward``, ``staleness_ess``, ``grad_norm_raw``, ``diverged``;
* ``results/llm/gac1_cpu/runs.csv`` (``python -m llm_scale study sweeps/llm/gac1_cpu.toml``, GAC-1's
  trainer runs): per run ``stage``, ``arm`` ("sync" / "stale"), ``eta``, ``seed``, ``finished`` and
  ``late_grad_cos_within`` (the mean cosine between consecutive optimizer steps' raw gradients within a
  batch over the second half of the updates).

Per claim (`LLM_CLAIMS`) the real model is judged by the testbed's own rule where the data allow:

* GAC-1, synchronous part: the cosine between two minibatch gradients of one policy is set by the
  minibatch size over the gradient noise scale, E cos = m / (m + B_noise) (McCandlish et al., 2018, "An
  Empirical Model of Large-Batch Training"), so the real model's cosine is read at the m whose m / B_noise
  is closest (in log) to the testbed regime's; "near orthogonal" = the interval inside +-`BAND`. The
  staleness part is not in the fingerprint. Where GAC-1's trainer runs have finished (every planned
  seed of both arms), the whole claim is judged on them instead, by the testbed's own rule
  (`figures.experiments.async_grpo.judges.gac1_parts`: sync inside +-`BAND`, stale above it) on the same
  quantity and window as the testbed's (the within-batch consecutive-step cosine over the second half of
  training, per seed), and set beside the testbed's verdict; the fingerprint's cosine is shown with it.
* VCPO-1: on the trainer runs of its looks (`VCPO1_RUNS`, `vcpo1_runs`: a later look is read together with
  the earlier ones once all its runs have finished; one optimizer step per update, a greedy evaluation after
  every update), once every planned run has finished, by the testbed's own rule
  and code (`figures.experiments.mnist_delay.evidence.collapses`, `precursor_counts`, `judges.precursor_parts`): a collapse
  is an evaluation whose error (1 - greedy accuracy) is more than 0.2 above its running minimum, or
  divergence; the precursors (an update's ESS below half, its raw gradient norm above twice, the median of
  every earlier update's) are read among the updates of the 3 evaluation intervals up to it, and at the last
  evaluation of the runs that do not collapse, each proportion's exact interval at `look_level` of the
  looks read (90% for one, 95% for two). No collapse after enough history: "not testable". Until the first
  look's runs have finished: "not measured", with the fingerprint's ESS by lag.
* AREAL-1 (decoupled_ppo) / GAC-2 (gac): the promotion study's chosen cell (the first that degrades by the
  study's rule, fixed in its sweep file) through `figures.experiments.async_grpo.judges.rescue_parts`, the
  testbed's rule, on error = 1 - greedy accuracy per seed (a diverged run: error 1), floored at half a
  problem. A study whose search found no degrading cell makes the claim "not testable", and every such
  study is named with its cells' drops (``search.csv``: ``eta``, ``lr``, ``drop``, ``drop_se``, ``pairs``,
  ``degrades``, ``complete``) and the rule they were held to; a forced or unfinished one is never judged (a
  search that has not finished is named before a forced pilot); of several valid studies the last in path
  order is read. A study whose finished search runs (``runs.csv``: ``key``, ``stage``, ``finished``) are all
  among another study's, which has more, is an earlier look of that search (the same runs, fewer seeds): it
  is superseded by the later look, named as such and never judged, so that a sequential design's verdict is
  the one of the look where it stopped.

Agreement: both positive (reproduced / direction only) or both negative (not reproduced) = "agree"; one
of each = "disagree"; both "not testable" = "neither testable"; an inconclusive side = "not decided";
otherwise "not measured".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from figures.evidence import Cell
from figures.experiments.async_grpo.judges import gac1_parts, rescue_parts
from figures.experiments.mnist_delay.evidence import collapses, precursor_counts
from figures.experiments.mnist_delay.judges import precursor_leads, precursor_parts
from llm_scale.pocket_design import MARGIN
from testbed.stabilizers.fingerprint import newest_files
from testbed.util.stats import LEVEL, bonferroni_level, combine, fmt, fmt_interval, using_level

LLM_CLAIMS = ("GAC-1", "VCPO-1", "AREAL-1", "GAC-2")
POSITIVE = ("reproduced", "direction only")
BAND = 0.2  # GAC-1's "near orthogonal" band (figures/experiments/async_grpo/judges.py)
METHOD = {"AREAL-1": "decoupled_ppo", "GAC-2": "gac"}
AGREEMENTS = ("agree", "disagree", "neither testable", "not decided", "not measured")  # what `agreement` returns
TESTBED_FINGERPRINT = "results/fingerprint/async_grpo.json"
GAC1_RUNS = "results/llm/gac1_cpu/runs.csv"
VCPO1_RUNS = ("results/llm/vcpo1_cpu", "results/llm/vcpo1_cpu_look2")  # its looks, in order
POCKET_FINGERPRINTS = "results/llm/fingerprint/pocket"  # version0/ and learning/ (python -m llm_scale fingerprint)
POCKET_PREREG = "sweeps/llm/pocket_prereg.toml"  # the pocket LM's designs and the GPU commands
POCKET_REDESIGNS = ("sweeps/llm/pocket_prereg2.toml",)  # later registrations, in order: new designs, new seed blocks
POCKET_GAC1 = "results/llm/pocket/gac1_confirm"  # GAC-1's confirmatory runs on the pocket LM (sync/, stale/: runs.csv)
POCKET_RESCUE = "results/llm/pocket/rescue_confirm"  # AREAL-1's and GAC-2's confirmatory runs (runs.csv, four arms)
PHASES = (("version0", "version 0"), ("learning", "learning phase"))
RUNG_LAGS = (1, 2, 4)


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def fingerprints(root: Path, folder: str = "results/llm/fingerprint") -> list[dict[str, Any]]:
    """The newest readable real-model fingerprint of each model and task anywhere under ``folder``
    (`testbed.stabilizers.fingerprint.newest_files`, by its ``date``), with its file name and ``_earlier``, the
    files of that model and task it supersedes. The web-pretrained rung's (the default folder) leaves out the
    pocket LM's, under `POCKET_FINGERPRINTS`."""
    out = []
    pocket = (Path(root) / POCKET_FINGERPRINTS).resolve()
    for path, earlier in newest_files(Path(root) / folder):
        if not folder.startswith(POCKET_FINGERPRINTS) and pocket in path.resolve().parents:
            continue
        data = _load_json(path)
        if isinstance(data, dict):
            out.append({**data, "_file": str(path), "_earlier": [str(p) for p in earlier]})
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


RUNS_DTYPES = {"key": "string", "stage": "string", "finished": "bool"}
SEARCH_DTYPES = {"eta": "int64", "lr": "float64", "drop": "float64", "drop_se": "float64", "pairs": "int64",
                 "degrades": "bool", "complete": "bool"}


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
        d = _load_json(path)
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


def _gac1(fps: list[dict[str, Any]], m_testbed: float | None, b_testbed: float | None) -> tuple[str, str]:
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


def _gac1_trainer(runs: dict[str, Any], sync_shown: str) -> tuple[str, str]:
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


def _vcpo1(fps: list[dict[str, Any]], runs: dict[str, Any] | None) -> tuple[str, str]:
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


def _rescue(found: list[Study], skipped: list[str], method: str) -> tuple[str, str]:
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


def agreement(testbed: str, real: str) -> str:
    if testbed.startswith("sync part") or real.startswith("sync part"):  # GAC-1: part against part
        if not testbed.startswith("sync part") or not real.startswith("sync part"):
            return "not measured"
        a, b = testbed.removeprefix("sync part ").split(" ")[0], real.removeprefix("sync part ")
        if "undecided" in (a, b):
            return "not decided"
        return "agree" if a == b else "disagree"
    if testbed == real == "not testable":
        return "neither testable"
    if real in ("not measured", "not testable") or testbed in ("not testable", "not applicable", "not measured"):
        return "not measured"
    if testbed == "inconclusive" or real == "inconclusive":
        return "not decided"
    return "agree" if (testbed in POSITIVE) == (real in POSITIVE) else "disagree"


def testbed_noise_scale(root: Path) -> float | None:
    """B_noise of the testbed's async-GRPO regime from its fingerprint, or None."""
    d = _load_json(Path(root) / TESTBED_FINGERPRINT)
    b = d.get("noise_scale") if isinstance(d, dict) else None
    return float(b) if isinstance(b, int | float) and math.isfinite(b) and b > 0 else None


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
    when no run is tabulated. A run with a non-confirmatory seed is never read."""
    import pandas as pd

    method, spec = METHOD[cid], (prereg.get("claims") or {}).get(cid) or {}
    folder = str(spec.get("runs", POCKET_RESCUE))
    try:
        runs = pd.read_csv(Path(root) / folder / "runs.csv")
        meta = json.loads((Path(root) / folder / "study.json").read_text())
    except (OSError, ValueError):
        return None
    first = int((prereg.get("common") or {}).get("seeds_from", 100))
    runs = runs[(runs["seed"] >= first) & runs["arm"].isin(["sync", "stale", method])].sort_values("seed")
    if runs.empty:
        return None
    done = runs["finished"].astype(bool)
    seeds = sorted(set(runs["seed"]))
    if not done.all() or set(runs["arm"]) != {"sync", "stale", method} or len(runs) != 3 * len(seeds):
        return {"pocket": "not measured",
                "pocket_evidence": f"confirmatory runs {folder}/runs.csv: {int(done.sum())} of {3 * len(seeds)} "
                                   f"runs of sync, stale and stale + {method} finished (seeds {seeds[0]}..{seeds[-1]}); "
                                   f"judged when all have"}  # fmt: skip
    eta = int(runs[runs["arm"] != "sync"]["eta"].iloc[0])
    level = f"eta{eta}"
    score = runs["accuracy"].where(~runs["diverged"].astype(bool), 0.0)
    error = {('grpo' if arm in ('sync', 'stale') else arm, 'sync' if arm == 'sync' else level): list(1.0 - score[g.index])
             for arm, g in runs.groupby("arm")}  # each arm's errors in seed order (pairs by seed position)
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
    design = _load_json(root / str(prereg.get("pilot", ""))) if prereg.get("pilot") else None
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
        lag = _load_json(Path(root) / str(spec["lag_choice"])) if spec.get("lag_choice") else None
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
    design = _load_json(root / str(prereg.get("pilot", ""))) if prereg.get("pilot") else None
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


def llm_rows(root: Path, testbed: dict[str, str], m_testbed: float | None = None) -> list[dict[str, str]]:
    """One row per claim the real model can speak to: testbed verdict, real-model verdict, what it read,
    agreement (module docstring). ``testbed``: claim id -> verdict; for GAC-1, "sync part <status> (...)"
    (the status of its synchronous part) so that part is compared with the real model's fingerprint, and
    "GAC-1 claim" -> the whole claim's verdict, compared where the trainer runs judge the whole claim.
    ``m_testbed``: the testbed regime's minibatch size in samples."""
    root = Path(root)
    fps = fingerprints(root)
    found, skipped = studies(root)
    out = []
    trainer = gac1_runs(root)
    pockets = pocket_cells(root)
    for cid in LLM_CLAIMS:
        tb = testbed.get(cid, "not measured")
        if cid == "GAC-1":
            real, why = _gac1(fps, m_testbed, testbed_noise_scale(root))
            if trainer is not None and trainer["finished"] == trainer["planned"]:
                real, why = _gac1_trainer(trainer, why)
                tb = testbed.get("GAC-1 claim", tb)
            elif real != "not measured":
                why += "; the staleness part is not in the fingerprint, so the two are compared on the synchronous part only"
        elif cid == "VCPO-1":
            real, why = _vcpo1(fps, vcpo1_runs(root))
        else:
            real, why = _rescue(found, skipped, METHOD[cid])
        ag = agreement(tb, real)
        if ag == "not measured" and real not in ("not measured", "not testable"):
            why += f"; the testbed's verdict is '{tb}'"
        pocket = pockets[cid]
        out.append({"id": cid, "testbed": tb, "real": real, "agreement": ag, "evidence": why, **pocket,
                    "pocket_agreement": agreement(tb, pocket["pocket"])})  # fmt: skip
    return out


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def fingerprint_row(rung: str, phase: str, fp: dict[str, Any] | None, missing: str = "") -> dict[str, Any]:
    """One rung's fingerprint in the like-for-like columns: the completion budget and mean length (tokens), the
    updates' lr and sequences, sequence and token ESS / N and the PPO clip fraction at each lag of `RUNG_LAGS`,
    the mean token entropy, the zero-advantage group share, B_noise (sequences), the truncated share and the
    mean reward of the measured batch; NaN where the fingerprint does not record a field. ``fp`` None: the row
    says ``missing``."""
    if fp is None:
        return {"rung": rung, "phase": phase, "file": None, "missing": missing}
    extra = fp.get("extra") if isinstance(fp.get("extra"), dict) else {}
    by_lag = {int(r["lag"]): r for r in fp.get("staleness") or [] if isinstance(r, dict) and "lag" in r}
    return {
        "rung": rung, "phase": phase, "model": fp.get("model"), "file": fp.get("_file"),
        "budget": _num(extra.get("max_new_tokens")), "length_mean": _num(extra.get("length_mean")),
        "lr": _num(extra.get("lr")), "update_sequences": _num(extra.get("update_sequences")),
        "ess_seq": {k: _num(by_lag.get(k, {}).get("ess_seq")) for k in RUNG_LAGS},
        "ess_token": {k: _num(by_lag.get(k, {}).get("ess_token")) for k in RUNG_LAGS},
        "clip_frac": {k: _num(by_lag.get(k, {}).get("clip_frac")) for k in RUNG_LAGS},
        "entropy": _num(fp.get("entropy")), "zero_advantage_frac": _num(fp.get("zero_advantage_frac")),
        "noise_scale": _num(fp.get("noise_scale")), "truncated_frac": _num(fp.get("truncated_frac")),
        "reward_mean": _num(extra.get("reward_mean", extra.get("mean_reward"))),
    }  # fmt: skip


def with_extra_lrs(row: dict[str, Any], fp: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``row`` and, for each learning rate of the fingerprint's ``extra.staleness_by_lr`` (the same start and
    batches, other updates), a row whose staleness columns are that rate's and whose other columns (measured on
    the same version-0 batch) are ``row``'s."""
    out = [row]
    extra = (fp or {}).get("extra")
    for lr, stale in (extra.get("staleness_by_lr") or {}).items() if isinstance(extra, dict) else []:
        other = fingerprint_row(row["rung"], f"{row['phase']}, lr {lr}", {**fp, "staleness": stale})
        out.append({**other, "lr": _num(float(lr))})
    return out


def rung_fingerprints(root: Path) -> list[dict[str, Any]]:
    """The rungs' fingerprints, like for like (`fingerprint_row`): the testbed's async-GRPO regime
    (`TESTBED_FINGERPRINT`), the pocket LM at version 0 and in the learning phase (the newest file under
    `POCKET_FINGERPRINTS`/version0 and /learning), SmolLM2 at version 0 (the newest SmolLM2 fingerprint under
    results/llm/fingerprint) and in the learning phase (results/llm/fingerprint/learning)."""
    root = Path(root)
    testbed = _load_json(root / TESTBED_FINGERPRINT)
    rows = [fingerprint_row("testbed", "regime", {**testbed, "_file": TESTBED_FINGERPRINT} if isinstance(testbed, dict)
                            else None, f"no {TESTBED_FINGERPRINT}")]  # fmt: skip
    for folder, phase in PHASES:
        found = fingerprints(root, f"{POCKET_FINGERPRINTS}/{folder}")
        newest = max(found, key=lambda f: str(f.get("date", "")), default=None)
        rows += with_extra_lrs(fingerprint_row("pocket LM", phase, newest, f"no fingerprint under {POCKET_FINGERPRINTS}/"
                                               f"{folder}"), newest)  # fmt: skip
    web = [f for f in fingerprints(root) if str(f.get("model", "")).startswith("smollm2")
           and "/learning/" not in str(f.get("_file", ""))]  # fmt: skip
    rows.append(fingerprint_row("SmolLM2", "version 0", max(web, key=lambda f: str(f.get("date", "")), default=None),
                                "no SmolLM2 fingerprint under results/llm/fingerprint"))  # fmt: skip
    learning = fingerprints(root, "results/llm/fingerprint/learning")
    rows.append(fingerprint_row("SmolLM2", "learning phase", max(learning, key=lambda f: str(f.get("date", "")),
                                                                   default=None),
                                "not measured: needs a fingerprint of a SmolLM2 policy after sync GRPO updates "
                                "(results/llm/fingerprint/learning)"))  # fmt: skip
    return rows


def _cell(value: float, spec: str = ".2f") -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


def rung_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The like-for-like table of `rung_fingerprints`."""
    lags = "/".join(map(str, RUNG_LAGS))
    lines = ["", "## Rungs' fingerprints, like for like", "",
             f"ESS / N (sequence and token) and PPO clip fraction at lags {lags} (updates), measured at the budget "
             "shown; token units are each model's own tokens (characters for the pocket LM).", "",
             f"| rung | phase | budget | mean length | lr x sequences/update | ESS seq {lags} | ESS token {lags} | "
             f"clip {lags} | entropy | zero-adv share | B_noise | truncated | reward | file |",
             "| --- | --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for r in rows:
        if r.get("file") is None:
            lines.append(f"| {r['rung']} | {r['phase']} | {r['missing']} |" + " |" * 11)
            continue
        by = {k: "/".join(_cell(r[k][lag]) for lag in RUNG_LAGS) for k in ("ess_seq", "ess_token", "clip_frac")}
        lines.append(
            f"| {r['rung']} | {r['phase']} | {_cell(r['budget'], '.0f')} | {_cell(r['length_mean'], '.1f')} | "
            f"{_cell(r['lr'], 'g')} x {_cell(r['update_sequences'], '.0f')} | {by['ess_seq']} | {by['ess_token']} | "
            f"{by['clip_frac']} | {_cell(r['entropy'])} | {_cell(r['zero_advantage_frac'])} | {_cell(r['noise_scale'], '.0f')} | "
            f"{_cell(r['truncated_frac'])} | {_cell(r['reward_mean'])} | {r['file']} |"
        )  # fmt: skip
    return lines


def markdown(rows: list[dict[str, str]], root: Path | None = None) -> list[str]:
    """The section of claims.md: testbed verdict vs the real model, the transfer table (one column per rung) and,
    with ``root``, the rungs' fingerprints like for like (`rung_markdown`)."""
    lines = ["", "## Does the testbed predict the LLM? (SmolLM2-135M-Instruct)", "",
             "| claim | testbed | real model | agreement | what the real model shows |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['id']} | {r['testbed']} | {r['real']} | **{r['agreement']}** | {r['evidence']} |" for r in rows]
    if any("pocket" in r for r in rows):
        lines += ["", "## The transfer table: one column per rung", "",
                  "Rungs: the testbed; the pocket LM (pocket-arithmetic, task-pretrained on a CPU, not web-pretrained); "
                  "SmolLM2-135M-Instruct (web-pretrained); a GPU model. Each cell is a verdict of its own design or "
                  "what it needs.", "",
                  "| claim | testbed | pocket LM | SmolLM2 | GPU model | agreement (testbed-pocket / testbed-SmolLM2) |",
                  "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        lines += [f"| {r['id']} | {r['testbed']} | {r['pocket']} | {r['real']} | {r.get('gpu', '-')} | "
                  f"{r.get('pocket_agreement', '-')} / {r['agreement']} |" for r in rows]  # fmt: skip
        lines += ["", "What the pocket LM's cells need:", ""]
        lines += [f"- **{r['id']}**: {r['pocket_evidence']}" for r in rows]
        lines += pocket_setting(Path(root)) if root is not None else []
    if root is not None:
        lines += rung_markdown(rung_fingerprints(Path(root)))
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.llm_column [--claims CLAIMS_JSON] [--out MD]``: the transfer output (the real-model
    table, the transfer table one column per rung, the rungs' fingerprints like for like) from the files under
    the working directory, the testbed's verdicts read from a claims report's ``llm`` rows."""
    import sys

    from testbed.util.arguments import CommandLine
    from testbed.util.files import atomic_write_text

    ap = CommandLine(prog="python -m figures.llm_column", description=main.__doc__.splitlines()[0])
    ap.add_argument("--claims", default="results/paper/claims.json", help="claims report whose testbed verdicts are read")
    ap.add_argument("--out", default="results/llm/transfer.md", help="where the markdown goes")
    args = ap.parse_args(argv)
    report = _load_json(Path(args.claims))
    if not isinstance(report, dict) or not isinstance(report.get("llm"), list):
        print(f"error: --claims {args.claims!r} is not a claims report with an 'llm' list", file=sys.stderr)
        return 2
    testbed = {r["id"]: r["testbed"] for r in report["llm"] if isinstance(r, dict) and "id" in r and "testbed" in r}
    if "GAC-1" in testbed:
        testbed["GAC-1 claim"] = testbed["GAC-1"]
    lines = [f"# The model ladder: transfer output (testbed verdicts from {args.claims})", *markdown(llm_rows(Path("."), testbed), Path("."))]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out), "\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
