"""The promotion study: does a testbed verdict hold on a real LLM? ``python -m llm_scale study SWEEP.toml``.

Two stages, both fixed by the sweep file before any run:

1. **Regime search.** For every (eta, lr) cell of the grid, in the file's order: synchronous GRPO
   (``--mode sync``) and naive GRPO under bounded staleness (the base recipe, fixed lag eta, K x N
   optimizer steps per batch), each over the search seeds. The score of a run is its greedy
   accuracy on held-out problems at the end (the mean of its last ``last_evals`` evaluations). A
   cell *degrades* when the mean paired difference sync - stale (paired by seed: a seed fixes the
   prompts and the held-out problems) is >= ``min_drop`` and >= ``min_se`` standard errors of that
   mean (`degrades`; the SE never below the evaluation's own binomial noise) and its one-sided
   paired t test of "drop > 0" rejects under Holm's step-down over all the grid's cells at
   family-wise level ``[search] alpha`` (`holm_cells`): searching up to nine cells does not buy
   nine chances to find a degradation by luck. The chosen cell is the first degrading one in the
   file's order (once every cell before it is complete); if none degrades, the comparison is
   "not testable" in this grid and is not run (``--force-cell`` runs it anyway, labelled so).
2. **Comparison.** In the chosen cell: sync, stale naive GRPO, and stale + each recipe, over the
   comparison seeds. Each recipe gets a promotion decision by the rule of ``[compare]``
   (`promotion`), fixed before the runs: the fraction of the sync - stale gap it closes,
   mean(recipe - stale) / mean(sync - stale) paired by seed, with Fieller's paired interval at
   level 1 - 2 alpha (`testbed.util.stats.ratio_interval`); "promote" when the interval's lower
   end exceeds ``threshold`` over at least ``min_seeds`` (>= 10) seeds; "do not promote" when its
   upper end is below; else "undecided". The decision reads only the comparison seeds the search
   did not use (fresh seeds: the cell was chosen because its search seeds showed a large gap, and
   re-reading them would bias the gap). A gap below ``gap_tol`` leaves nothing to close: the
   fraction is NaN and the verdict "no gap to close". A diverged run counts as accuracy 0. Each
   recipe's decision is its own claim: a recipe that closes at most ``threshold`` of the gap is
   promoted with probability at most alpha (tests/llm/test_llm_study.py simulates it).

Every run is an ordinary ``python -m llm_scale train`` in its own directory named by a hash of its
configuration, so the study is a set of cached, resumable runs: a run whose summary says finished
and whose evaluations reach its last version is done and never rerun; an interrupted one resumes
from its last checkpoint. One invocation runs at most ``--parallel`` runs at once (sharing one GPU,
or splitting the CPU threads), each a job of the executor (``--executor local``: worker processes on this
machine; ``ray``: tasks on a Ray cluster; testbed/util/executor.py), for at most ``--budget-s`` seconds,
then interrupts what is still running (each keeps its last checkpoint) and writes the tables from what has
finished; the next invocation picks up from there. Each run records the device it ran on (its summary.json).

Outputs under ``--out`` (default results/llm/study): search.csv (one row per cell), compare.csv
(one row per arm), runs.csv (one row per run with its accuracy, device and wall time), updates.csv (one
row per finished run and policy version: the version's greedy evaluation and the metrics of the update
that made it, `run_updates`), study.json
(the rule, the base and recipes, the problems behind each accuracy, the chosen cell and, per arm and
seed, its comparison runs' accuracies, the verdict, how many runs are done), study.png / study.pdf.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomllib

import testbed.util.stats as stats
from testbed.stabilizers import fingerprint as fp
from testbed.util.arguments import ArgumentParser
from testbed.util.endpoints import last_mean, second_half, second_half_mean
from testbed.util.executor import make, using
from testbed.util.files import atomic_write_text
from testbed.util.stats import ALPHA

from .config import TrainConfig, UsageError, checkpoint_pointer, cpu_budget
from .processes import train_job

SYNC, STALE = "sync", "stale"
MIN_SEEDS = 10  # the floor of [compare] min_seeds: fewer paired seeds never promote
GAP_TOL = 0.02  # the testbed's tolerance on a gap (testbed.validate.TOL)
PROMOTION_VERDICTS = ("promote", "do not promote", "undecided", "no gap to close", "too few seeds")
# Settings left out of a run's key at these values: the behaviour of every run made before the setting existed
# (so those runs keep their keys); any other value, the default included, is part of the key.
KEY_NEUTRAL = {"max_grad_norm": 0.0}
# TrainConfig fields the study sets itself, per run: the sweep's [train] table may not set them.
STUDY_SET = ("recipe", "max_staleness", "lr", "seed", "out", "resume", "progress")


@dataclass(frozen=True)
class Sweep:
    """A study's sweep file: the common training settings, the search grid and rule, the comparison."""

    train: dict[str, Any]
    eval_every: int
    base: str = "grpo"
    etas: tuple[int, ...] = (2, 4)
    lrs: tuple[float, ...] = (1e-6,)
    search_seeds: tuple[int, ...] = (0, 1, 2)
    min_drop: float = 0.03
    min_se: float = 2.0
    last_evals: int = 1
    alpha: float | None = None  # family-wise one-sided level of the search over its cells (Holm); None: size rule only
    recipes: tuple[str, ...] = ("tis(c=2)+ess_lr", "dg", "gac", "decoupled_ppo")
    compare_seeds: tuple[int, ...] = (0, 1, 2)
    threshold: float = 0.5  # promote when the fraction of the gap closed is above this (interval's lower end)
    promote_alpha: float = 0.05  # one-sided level of each recipe's promotion: interval at 1 - 2 alpha
    min_seeds: int = MIN_SEEDS  # fresh paired seeds needed for a promotion verdict
    gap_tol: float = GAP_TOL  # a sync - stale gap below this leaves nothing to close (fraction NaN)
    source: str = ""

    @property
    def fresh_seeds(self) -> tuple[int, ...]:
        """The comparison seeds the promotion decision reads: those the search did not use."""
        return tuple(s for s in self.compare_seeds if s not in self.search_seeds)

    @property
    def eval_problems(self) -> int:
        """Held-out problems scored per run's accuracy: the evaluation size times the evaluations averaged."""
        return int(self.train.get("eval_size", TrainConfig.eval_size)) * self.last_evals


def read_tables(path: str | Path) -> dict[str, Any]:
    """The tables of a sweep file (TOML), parsed once; one-line `UsageError` when it is missing or not TOML."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"study: sweep file {str(path)!r} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"study: {path} is not valid TOML ({exc})") from None


def load_sweep(path: str | Path, raw: dict[str, Any] | None = None) -> Sweep:
    """Read and check a sweep file (TOML with [train], [search], [compare]); one-line `UsageError` if bad.
    ``raw``: its tables already parsed (`read_tables`), less any table another reader owns (a pilot's [pilot])."""
    path = Path(path)
    raw = read_tables(path) if raw is None else raw
    unknown = set(raw) - {"train", "search", "compare"}
    if unknown:
        raise UsageError(f"study: {path}: unknown table(s) {sorted(unknown)}; allowed: train, search, compare")
    train, search, compare = dict(raw.get("train", {})), dict(raw.get("search", {})), dict(raw.get("compare", {}))
    fixed = sorted(set(train) & set(STUDY_SET))
    if fixed:
        raise UsageError(f"study: {path}: [train] may not set {fixed} (the study sets them per run)")
    names = {f for f in TrainConfig.__dataclass_fields__}
    bad = sorted(set(train) - names - {"eval_every"})
    if bad:
        raise UsageError(f"study: {path}: [train] has unknown setting(s) {bad}; see python -m llm_scale train --help")
    eval_every = int(train.pop("eval_every", 0))
    if eval_every < 1:
        raise UsageError(f"study: {path}: [train] eval_every must be >= 1 (the study scores greedy accuracy)")
    allowed_search = {"base", "eta", "lr", "seeds", "min_drop", "min_se", "last_evals", "alpha"}
    allowed_compare = {"recipes", "seeds", "threshold", "alpha", "min_seeds", "gap_tol"}
    for name, table, allowed in (("search", search, allowed_search), ("compare", compare, allowed_compare)):
        extra = sorted(set(table) - allowed)
        if extra:
            raise UsageError(f"study: {path}: [{name}] has unknown key(s) {extra}; allowed: {sorted(allowed)}")
    sweep = Sweep(
        train=train, eval_every=eval_every, base=str(search.get("base", "grpo")),
        etas=tuple(int(e) for e in search.get("eta", (2, 4))), lrs=tuple(float(v) for v in search.get("lr", (1e-6,))),
        search_seeds=tuple(int(s) for s in search.get("seeds", (0, 1, 2))),
        min_drop=float(search.get("min_drop", 0.03)), min_se=float(search.get("min_se", 2.0)),
        last_evals=int(search.get("last_evals", 1)), alpha=float(search["alpha"]) if "alpha" in search else None,
        recipes=tuple(str(r) for r in compare.get("recipes", Sweep.recipes)),
        compare_seeds=tuple(int(s) for s in compare.get("seeds", (0, 1, 2))),
        threshold=float(compare.get("threshold", 0.5)), promote_alpha=float(compare.get("alpha", 0.05)),
        min_seeds=int(compare.get("min_seeds", MIN_SEEDS)), gap_tol=float(compare.get("gap_tol", GAP_TOL)),
        source=str(path),
    )  # fmt: skip
    for name, value in (("[search] alpha", sweep.alpha), ("[compare] alpha", sweep.promote_alpha)):
        if value is not None and not 0.0 < value < 0.5:
            raise UsageError(f"study: {path}: {name} must lie in (0, 0.5) (a one-sided level), got {value}")
    if not 0.0 <= sweep.threshold <= 1.0:
        raise UsageError(f"study: {path}: [compare] threshold must lie in [0, 1] (a fraction of the gap), got {sweep.threshold}")
    if sweep.min_seeds < MIN_SEEDS:
        raise UsageError(f"study: {path}: [compare] min_seeds must be >= {MIN_SEEDS}, got {sweep.min_seeds}")
    if not sweep.gap_tol > 0:
        raise UsageError(f"study: {path}: [compare] gap_tol must be > 0, got {sweep.gap_tol}")
    if not sweep.etas or min(sweep.etas) < 1:
        raise UsageError(f"study: {path}: [search] eta must list staleness bounds >= 1, got {list(sweep.etas)}")
    if len(sweep.search_seeds) < 2 or len(sweep.compare_seeds) < 2:
        raise UsageError(f"study: {path}: the rule needs a standard error: at least 2 seeds in [search] and [compare]")
    from testbed.stabilizers import build

    for spec in (sweep.base, *sweep.recipes):
        try:
            build(spec)
            _cfg(sweep, spec, "thread", 1, sweep.lrs[0], 0, "x").validate()
        except (ValueError, TypeError) as exc:
            raise UsageError(f"study: {path}: recipe {spec!r}: {str(exc).splitlines()[0]}") from None
    return sweep


def _cfg(sweep: Sweep, recipe: str, mode: str, eta: int, lr: float, seed: int, out: str) -> TrainConfig:
    return TrainConfig(**{**sweep.train, "recipe": recipe, "mode": mode, "max_staleness": eta, "lr": lr, "seed": seed,
                          "eval_every": sweep.eval_every, "out": out, "progress": False})  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One training run of the study: its arm, cell and seed, and the configuration that names it."""

    stage: str  # search | compare
    arm: str  # sync, stale, or the recipe spec added to the stale base
    eta: int
    lr: float
    seed: int
    options: tuple[tuple[str, Any], ...]  # the TrainConfig fields (without out)

    @property
    def recipe(self) -> str:
        """The recipe spec the run trains."""
        return str(dict(self.options)["recipe"])

    @property
    def key(self) -> str:
        """Hash of the configuration: the run's directory name (same settings, same run, whatever the stage)."""
        keyed = {k: v for k, v in self.options if k not in KEY_NEUTRAL or v != KEY_NEUTRAL[k]}
        text = json.dumps(keyed, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def argv(self, out: Path) -> list[str]:
        """The ``train`` command line of this run."""
        args = ["train"]
        for name, value in self.options:
            flag = "--" + name.replace("_", "-")
            if value is None or name in ("tiny",):
                continue
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + name.replace("_", "-"))
            elif isinstance(value, tuple | list):
                args += [flag, *map(str, value)]
            else:
                args += [flag, str(value)]
        return [*args, "--out", str(out)]


def make_run(sweep: Sweep, stage: str, arm: str, eta: int, lr: float, seed: int) -> Run:
    """The run of ``arm`` (sync, stale, or a recipe spec trained stale) in cell (eta, lr) with ``seed``."""
    recipe = sweep.base if arm in (SYNC, STALE) else arm
    mode = "sync" if arm == SYNC else ("thread" if sweep.train.get("mode", "thread") == "sync" else sweep.train.get("mode", "thread"))
    cfg = _cfg(sweep, recipe, mode, 0 if arm == SYNC else eta, lr, seed, "-")
    defaults = asdict(TrainConfig())
    options = {k: v for k, v in asdict(cfg).items() if k not in ("out", "tiny") and v != defaults.get(k)}
    options.update({k: getattr(cfg, k) for k in KEY_NEUTRAL})  # always on the command line; in the key unless neutral
    options.update(recipe=recipe, mode=mode, max_staleness=cfg.max_staleness, lr=lr, seed=seed)
    return Run(stage, arm, eta, lr, seed, tuple(sorted(options.items())))


def search_runs(sweep: Sweep) -> list[Run]:
    runs = []
    for eta in sweep.etas:
        for lr in sweep.lrs:
            for seed in sweep.search_seeds:
                runs += [make_run(sweep, "search", SYNC, eta, lr, seed), make_run(sweep, "search", STALE, eta, lr, seed)]
    return runs


def compare_runs(sweep: Sweep, eta: int, lr: float) -> list[Run]:
    arms = (SYNC, STALE, *sweep.recipes)
    return [make_run(sweep, "compare", arm, eta, lr, seed) for arm in arms for seed in sweep.compare_seeds]


# -- runs on disk -----------------------------------------------------------------------------------
def run_result(directory: Path, last_evals: int = 1, recipe: str | None = None) -> dict[str, Any] | None:
    """The finished run's record (accuracy, device, wall time), or None when it is not finished, or, given its
    ``recipe``, when it was started by code that has changed since (`llm_scale.trainer.code_changed`)."""
    if recipe is not None:
        from .trainer import code_changed

        if code_changed(directory, recipe):
            return None
    try:
        summary = json.loads((directory / "summary.json").read_text())
        if summary.get("status") == "diverged":  # a result, not a failure: its accuracy is undefined (NaN)
            return {"accuracy": math.nan, "diverged": True, "device": summary.get("device", ""),
                    "device_name": summary.get("device_name", ""), "wall_seconds": math.nan}  # fmt: skip
        if summary.get("status") != "finished":
            return None
        import csv

        with (directory / "eval.csv").open(newline="") as handle:
            evals = [(int(r["version"]), float(r["eval_reward"])) for r in csv.DictReader(handle) if r.get("eval_reward")]
    except (OSError, ValueError, KeyError):
        return None
    if not evals or evals[-1][0] != int(summary.get("of_steps", -1)):
        return None  # the file does not reach the last version: not complete
    metrics = _metrics_means(directory / "metrics.csv")
    metrics["late_grad_cos_split_half"] = late_split_half_cosine(directory / "grad_steps.csv")
    return {
        "accuracy": last_mean([v for _, v in evals], last_evals), "diverged": False, "accuracy_v0": evals[0][1] if evals[0][0] == 0 else math.nan,
        "device": summary.get("device", ""), "device_name": summary.get("device_name", ""),
        "wall_seconds": float(summary.get("wall_seconds", math.nan)), "resumed_from_step": summary.get("resumed_from_step"),
        **metrics,
    }  # fmt: skip


UPDATE_COLUMNS = ("staleness_ess", "grad_norm_raw", "reward_mean", "zero_adv_frac", "loss")


def run_updates(directory: Path) -> list[dict[str, Any]]:
    """A run's trajectory by policy version: one row per version v = 0, 1, ... (the run's updates made so
    far), with ``eval_reward`` (its greedy evaluation of v; NaN where v was not evaluated) and the
    `UPDATE_COLUMNS` of the update that made v (metrics.csv's row ``step = v - 1``; NaN at v = 0). With
    one optimizer step per update, ``staleness_ess`` is that step's ESS of the policy taking it against the
    behaviour policy and ``grad_norm_raw`` its raw gradient norm. Empty when metrics.csv cannot be read."""
    import pandas as pd

    try:
        metrics = pd.read_csv(directory / "metrics.csv", dtype=float)  # the trainer writes numbers only
    except (OSError, ValueError):
        return []
    if "step" not in metrics or not len(metrics):
        return []
    try:
        evals = pd.read_csv(directory / "eval.csv", dtype={"version": int, "eval_reward": float})
        score = dict(zip(evals["version"], evals["eval_reward"], strict=True))
    except (OSError, ValueError, KeyError):
        score = {}
    made = {int(row["step"]) + 1: row for _, row in metrics.iterrows()}
    out = []
    for v in range(max(made) + 1):
        row = made.get(v)
        out.append({"version": v, "eval_reward": score.get(v, math.nan),
                    **{c: float(row[c]) if row is not None and c in row else math.nan for c in UPDATE_COLUMNS}})
    return out


def _metrics_means(path: Path) -> dict[str, float]:
    """Per-run means of the health and staleness columns (NaN-aware), the mean seconds per update, and
    ``late_grad_cos_within``: the NaN-aware mean of ``grad_cos_within`` over the second half of the updates
    (the last ``n // 2`` of ``n``; NaN when none is defined), the window the testbed's GAC-1 reads."""
    import pandas as pd

    try:
        table = pd.read_csv(path, dtype=float)  # the trainer writes numbers only
    except (OSError, ValueError):
        return {}
    cols = ("step_seconds", "staleness_ess", "drift_ess", "grad_cos_within", "grad_cos_across", "zero_adv_frac",
            "mismatch_abs_max", "lag_mean")  # fmt: skip
    out = {f"mean_{c}": float(table[c].mean()) for c in cols if c in table}
    if "grad_cos_within" in table:
        out["late_grad_cos_within"] = second_half_mean(table["grad_cos_within"])
    return out


def late_split_half_cosine(path: Path) -> float:
    """The cosine between consecutive optimizer steps' *mean* gradients over the steps of the second half of the
    updates (the last ``n // 2`` of ``n``, `_metrics_means`' window), from a run's grad_steps.csv written with
    ``--grad-split-half``: `fingerprint.consecutive_cosine_split_half` of its ``grad_dot_prev`` (the window's
    pairs) and ``grad_half_dot`` (its steps). NaN when the file lacks them or the window has fewer than 2 steps."""
    import pandas as pd

    try:
        table = pd.read_csv(path)
    except (OSError, ValueError):
        return math.nan
    if not {"update", "grad_dot_prev", "grad_half_dot"} <= set(table.columns) or table.empty:
        return math.nan
    window = table[table["update"] >= second_half(int(table["update"].max()) + 1)]
    return fp.consecutive_cosine_split_half(window["grad_dot_prev"].to_numpy()[1:], window["grad_half_dot"].to_numpy())


def execute(
    runs: list[Run], root: Path, *, budget_s: float, parallel: int, device: str | None, log: Any = sys.stderr
) -> int:  # fmt: skip
    """Run (or resume) the unfinished ``runs`` under ``root``, ``parallel`` at a time, for at most ``budget_s`` seconds.

    Each run is a job (`llm_scale.processes.train_job`) of the command's executor (testbed/util/executor.py: the
    local process pool, or Ray with ``--executor ray``), so the study's runs go where a sweep's loops go. Returns
    how many runs finished in this invocation. Runs still going at the deadline are interrupted (SIGINT: each
    keeps its last checkpoint) and resumed by the next invocation; so are they on Ctrl-C, after which
    KeyboardInterrupt is raised. A run finished or begun by code that has changed since (its code.json,
    `llm_scale.trainer.code_changed`) is trained afresh: its result and its checkpoint are another code's.
    """
    import shutil

    from testbed.util.executor import default

    from .trainer import code_changed

    todo, seen = [], set()
    for run in runs:
        if run.key in seen:
            continue
        seen.add(run.key)
        changed = code_changed(root / run.key, run.recipe)
        if changed:  # finished or begun by other code: neither its result nor its checkpoint is this code's
            print(f"study: {run.arm} eta={run.eta} lr={run.lr:g} seed={run.seed} ran other code ({', '.join(changed)}): "
                  "trained afresh", file=log, flush=True)  # fmt: skip
            shutil.rmtree(root / run.key)
        if run_result(root / run.key) is None:
            todo.append(run)
    if not todo:
        return 0
    deadline = time.time() + budget_s
    threads = max(1, cpu_budget() // max(1, parallel))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    root.mkdir(parents=True, exist_ok=True)
    jobs = []
    for run in todo:
        out = root / run.key
        argv = run.argv(out) + (["--device", device] if device else [])
        if checkpoint_pointer(out).is_file():
            argv += ["--resume", "auto"]
        elif (out / "metrics.csv").exists():  # begun, but nothing to resume from: start over
            shutil.rmtree(out)
        atomic_write_text(root / f"{run.key}.json", json.dumps({"stage": run.stage, "arm": run.arm, "eta": run.eta,
                                                          "lr": run.lr, "seed": run.seed,
                                                          "options": dict(run.options)}, default=str, indent=1))  # fmt: skip
        jobs.append((argv, str(root / f"{run.key}.log"), env, deadline))
    print(f"study: {len(todo)} run(s) to train under {root}, {parallel} at a time", file=log, flush=True)

    def ended(total: float) -> None:
        print(f"study: {total:g} of {len(todo)} run(s) ended ({time.strftime('%H:%M:%S')})", file=log, flush=True)

    ends = default().run(train_job, jobs, workers=parallel, on_done=ended)
    finished = 0
    for run, end in zip(todo, ends, strict=True):
        ok = run_result(root / run.key) is not None
        finished += ok
        if end == "not started":
            continue
        if end == "interrupted":
            then = "resumes from its last checkpoint" if checkpoint_pointer(root / run.key).is_file() else "no checkpoint: starts over"
            state = f"interrupted ({then} next time)"
        else:
            state = "done" if ok else f"FAILED (see {root / run.key}.log)"
        print(f"study: {state} {run.arm} eta={run.eta} lr={run.lr:g} seed={run.seed}", file=log, flush=True)
    return finished


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


@dataclass
class Report:
    search: list[dict[str, Any]] = field(default_factory=list)
    compare: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    cell: list[dict[str, Any]] = field(default_factory=list)  # the chosen cell's comparison runs, one per arm and seed
    updates: list[dict[str, Any]] = field(default_factory=list)  # per finished run and policy version (`run_updates`)
    chosen: dict[str, Any] | None = None
    forced: bool = False


def collect(sweep: Sweep, root: Path, force: tuple[int, float] | None = None) -> Report:
    """Read every finished run and apply the fixed rules."""
    rep = Report()
    results: dict[str, dict[str, Any] | None] = {}

    def result(run: Run) -> dict[str, Any] | None:
        if run.key not in results:
            results[run.key] = run_result(root / run.key, sweep.last_evals, run.recipe)
        return results[run.key]

    complete = True
    for eta in sweep.etas:
        for lr in sweep.lrs:
            accs: dict[str, dict[int, float]] = {SYNC: {}, STALE: {}}
            for seed in sweep.search_seeds:
                for arm in (SYNC, STALE):
                    r = result(make_run(sweep, "search", arm, eta, lr, seed))
                    if r is not None:
                        accs[arm][seed] = r["accuracy"]
            row = {"eta": eta, "lr": lr, **degrades(accs[SYNC], accs[STALE], sweep.min_drop, sweep.min_se,
                                                     sweep.eval_problems, sweep.alpha)}
            row["complete"] = row["n_sync"] == row["n_stale"] == len(sweep.search_seeds)
            complete &= row["complete"]
            rep.search.append(row)
    if sweep.alpha is not None:
        holm_cells(rep.search, sweep.alpha)
    first = next((r for r in rep.search if r["degrades"] and r["complete"]), None)
    if first is not None:
        rep.chosen = {"eta": first["eta"], "lr": first["lr"]}
    if first is not None and not complete:  # the first passing cell in order must not depend on unfinished ones
        earlier = rep.search[: rep.search.index(first)]
        if not all(r["complete"] for r in earlier):
            rep.chosen = None
    if rep.chosen is None and force is not None:
        rep.chosen, rep.forced = {"eta": force[0], "lr": force[1]}, True
    if rep.chosen is not None:
        eta, lr = rep.chosen["eta"], rep.chosen["lr"]
        per_arm: dict[str, list[float]] = {}
        fresh: dict[str, dict[int, float]] = {}  # the decision's accuracies: fresh seeds, a diverged run = 0
        for run in compare_runs(sweep, eta, lr):
            r = result(run)
            if r is not None:
                per_arm.setdefault(run.arm, []).append(r["accuracy"])
                if run.seed in sweep.fresh_seeds:
                    fresh.setdefault(run.arm, {})[run.seed] = 0.0 if r["diverged"] else r["accuracy"]
            rep.cell.append({"arm": run.arm, "seed": run.seed, "finished": r is not None,
                             "diverged": bool(r and r["diverged"]),
                             "accuracy": r["accuracy"] if r and math.isfinite(r["accuracy"]) else None})  # fmt: skip
        for arm in (SYNC, STALE, *sweep.recipes):
            m, se, n = stats.mean_se(per_arm.get(arm, []))
            row = {"arm": arm, "accuracy": m, "se": se, "n": n, "of": len(sweep.compare_seeds)}
            if arm not in (SYNC, STALE):
                row.update(promotion(fresh.get(SYNC, {}), fresh.get(STALE, {}), fresh.get(arm, {}),
                                     threshold=sweep.threshold, alpha=sweep.promote_alpha, min_seeds=sweep.min_seeds,
                                     gap_tol=sweep.gap_tol))  # fmt: skip
            rep.compare.append(row)
    runs = search_runs(sweep) + (compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"]) if rep.chosen else [])
    seen = set()
    for run in runs:
        if run.key in seen:
            continue
        seen.add(run.key)
        r = result(run)
        rep.runs.append({"key": run.key, "stage": run.stage, "arm": run.arm, "eta": run.eta, "lr": run.lr,
                         "seed": run.seed, "finished": r is not None, **(r or {})})  # fmt: skip
        if r is not None:
            rep.updates += [{"key": run.key, "arm": run.arm, "eta": run.eta, "lr": run.lr, "seed": run.seed,
                             "diverged": r["diverged"], **row} for row in run_updates(root / run.key)]  # fmt: skip
    return rep


def write_report(sweep: Sweep, rep: Report, out: Path, command: str) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rep.search).to_csv(out / "search.csv", index=False)
    pd.DataFrame(rep.compare).to_csv(out / "compare.csv", index=False)
    pd.DataFrame(rep.runs).to_csv(out / "runs.csv", index=False)
    pd.DataFrame(rep.updates, columns=["key", "arm", "eta", "lr", "seed", "diverged", "version", "eval_reward",
                                       *UPDATE_COLUMNS]).to_csv(out / "updates.csv", index=False)  # fmt: skip
    done = sum(r["finished"] for r in rep.runs)
    if rep.chosen is None:
        verdict = ("not testable in this grid: no cell degrades by the rule" if all(r["complete"] for r in rep.search)
                   else "search incomplete")  # fmt: skip
    else:
        verdict = ("comparison at a FORCED cell (the rule chose none): not a valid regime" if rep.forced
                   else "comparison at the first degrading cell")  # fmt: skip
    record = {
        "sweep": sweep.source, "rule": {"min_drop": sweep.min_drop, "min_se": sweep.min_se, "last_evals": sweep.last_evals,
                                        "alpha": sweep.alpha, "multiplicity": (f"Holm over the {len(rep.search)} cells" if sweep.alpha is not None
                                                                 else "none (the file fixes no [search] alpha)"),
                                        "order": "eta then lr, as listed; the first degrading cell"},
        "promotion_rule": {"statistic": "mean(recipe - stale) / mean(sync - stale), paired by seed",
                           "interval": "Fieller", "level": 1.0 - 2.0 * sweep.promote_alpha,
                           "threshold": sweep.threshold, "alpha": sweep.promote_alpha, "min_seeds": sweep.min_seeds,
                           "gap_tol": sweep.gap_tol, "seeds": list(sweep.fresh_seeds),
                           "promote": "lower end > threshold", "do not promote": "upper end < threshold",
                           "diverged run": "accuracy 0"},
        "promotions": {r["arm"]: {k: r[k] for k in ("verdict", "fraction_closed", "fraction_lo", "fraction_hi", "gap", "pairs")}
                       for r in rep.compare if "verdict" in r},
        "base": sweep.base, "recipes": list(sweep.recipes), "eval_problems": sweep.eval_problems,
        "chosen": rep.chosen, "forced": rep.forced, "verdict": verdict, "runs_finished": done, "runs_planned": len(rep.runs),
        "cell_runs": rep.cell, "command": command, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    atomic_write_text(out / "study.json", json.dumps(record, indent=2, default=float))
    _figure(rep, out)


def _figure(rep: Report, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    ax = axes[0]
    labels = [f"eta {r['eta']}\nlr {r['lr']:g}" for r in rep.search]
    x = range(len(rep.search))
    for shift, arm, fmt, label in ((-0.1, "sync", "o", "sync"), (0.1, "stale", "s", "stale naive GRPO")):
        bars = ax.errorbar([i + shift for i in x], [r[f"{arm}_acc"] for r in rep.search], fmt=fmt, label=label,
                           capsize=3, yerr=[_finite(r[f"{arm}_se"]) for r in rep.search])  # fmt: skip
        for i, cell in enumerate(rep.search):  # each seed's run, so that a stalled seed shows as itself
            seeds = [r["accuracy"] for r in rep.runs if r["stage"] == "search" and r["arm"] == arm
                     and r["eta"] == cell["eta"] and r["lr"] == cell["lr"] and r["finished"]]  # fmt: skip
            ax.plot([i + 2 * shift] * len(seeds), seeds, fmt, color=bars[0].get_color(), alpha=0.4, markersize=4)
    ax.set_xticks(list(x), labels, fontsize=8)
    ax.set_xlim(-0.5, len(rep.search) - 0.5)
    ax.set_ylabel("greedy accuracy\n(mean +- SE; faint: each seed)")
    ax.set_title("regime search")
    ax.legend(fontsize=8)
    ax = axes[1]
    if rep.compare:
        arms = [r["arm"] for r in rep.compare]
        ax.bar(range(len(arms)), [r["accuracy"] for r in rep.compare],
               yerr=[_finite(r["se"]) for r in rep.compare], capsize=3, color="tab:gray")  # fmt: skip
        ticks = [f"{r['arm']}\n(n={r['n']}/{r['of']})" for r in rep.compare]
        ax.set_xticks(range(len(arms)), ticks, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("greedy accuracy (mean +- SE over seeds)")
        ax.set_title("comparison" + (" (FORCED cell)" if rep.forced else ""))
    else:
        ax.text(0.5, 0.5, "no comparison: no cell chosen", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    fig.tight_layout()
    for ext in ("png", "pdf"):
        fig.savefig(out / f"study.{ext}", dpi=120)
    plt.close(fig)


def _finite(x: float) -> float:
    return x if math.isfinite(x) else 0.0


def format_report(rep: Report) -> str:
    lines = ["regime search (sync vs stale naive GRPO):"]
    for r in rep.search:
        level = "" if math.isnan(r["level"]) else f" (Holm level {r['level']:.3g})"
        lines.append(f"  eta {r['eta']:<3} lr {r['lr']:<8g} sync {r['sync_acc']:.3f} (n={r['n_sync']})  stale "
                     f"{r['stale_acc']:.3f} (n={r['n_stale']})  drop {r['drop']:+.3f} +- {r['drop_se']:.3f}  "
                     f"p {r['p_value']:.3g}{level}  "
                     f"{'DEGRADES' if r['degrades'] else 'no'}{'' if r['complete'] else ' (incomplete)'}")  # fmt: skip
    if rep.compare:
        lines.append("comparison" + (" at a FORCED cell (not a valid regime):" if rep.forced else ":"))
        for r in rep.compare:
            line = f"  {r['arm']:<18} acc {r['accuracy']:.3f} +- {r['se']:.3f} (n={r['n']}/{r['of']})"
            if "verdict" in r:
                line += "  " + format_promotion(r)
            lines.append(line)
    done = sum(r["finished"] for r in rep.runs)
    lines.append(f"runs finished: {done} of {len(rep.runs)} planned so far")
    return "\n".join(lines)


def plan_cost(sweep: Sweep, reference: str | Path, parallel: int) -> str:
    """The study's size and its device time estimated from another study's finished runs (``reference``: a runs.csv):
    every planned run (the whole search and one cell's comparison) takes the median wall time of the reference's
    finished runs, scaled by the ratio of updates (this sweep's ``steps`` over the reference sweep's, read from the
    reference's study.json), ``parallel`` at a time. One line; the reference's device is named."""
    import pandas as pd

    reference = Path(reference)
    try:
        table = pd.read_csv(reference)
        record = json.loads((reference.parent / "study.json").read_text())
        ref_steps = int(load_sweep(record["sweep"]).train.get("steps", TrainConfig.steps))
    except (OSError, ValueError, KeyError, UsageError) as exc:
        raise UsageError(f"study: --cost-from {str(reference)!r}: not a study's runs.csv beside its study.json ({exc})") from None
    done = table[table["finished"].astype(bool) & (table["wall_seconds"] > 0)]
    if done.empty:
        raise UsageError(f"study: --cost-from {str(reference)!r}: no finished run with a wall time")
    n_search = len({r.key for r in search_runs(sweep)})
    n_compare = len({r.key for r in compare_runs(sweep, sweep.etas[0], sweep.lrs[0])})
    steps = int(sweep.train.get("steps", TrainConfig.steps))
    per_run = float(done["wall_seconds"].median()) * steps / ref_steps
    hours = math.ceil((n_search + n_compare) / parallel) * per_run / 3600.0
    devices = ", ".join(sorted({str(d) for d in done.get("device_name", pd.Series(["?"])).dropna()}))
    return (f"planned runs: {n_search} search + {n_compare} comparison = {n_search + n_compare}; at {per_run:.0f} s per run "
            f"({len(done)} finished runs of {reference} on {devices}: median {done['wall_seconds'].median():.0f} s for "
            f"{ref_steps} updates, scaled to {steps}), {parallel} at a time: about {hours:.1f} device hours")  # fmt: skip


def format_promotion(r: dict[str, Any]) -> str:
    """One recipe's promotion as printed: the fraction of the gap closed, its interval and rule, and the verdict."""
    if r["verdict"] == "no gap to close":
        return (f"fraction closed nan: no gap to close (gap sync - stale {r['gap']:+.3f} over {r['pairs']} fresh seeds, "
                f"below {r['gap_tol']:g})")  # fmt: skip
    return (f"fraction closed {r['fraction_closed']:.2f} [{r['level']:.0%}: {r['fraction_lo']:.2f}, {r['fraction_hi']:.2f}] "
            f"of gap {r['gap']:+.3f} over {r['pairs']} fresh seeds -> {r['verdict'].upper()} (promote when the lower end "
            f"> {r['threshold']:g} with >= {r['min_seeds']} seeds)")  # fmt: skip


def _train(sweep: Sweep, root: Path, rep: Report, args: argparse.Namespace, force: tuple[int, float] | None,
           t0: float) -> Report:
    """The runs an invocation trains: the search (and the comparison where a cell is chosen), then, if the search
    has just chosen a cell, the comparison in the budget left. Returns the report of what has finished."""
    todo = search_runs(sweep)
    if rep.chosen is not None and not args.search_only:
        todo = todo + compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"])
    execute(todo, root, budget_s=args.budget_s, parallel=args.parallel, device=args.device)
    rep = collect(sweep, root, force)
    left = args.budget_s - (time.monotonic() - t0)
    if rep.chosen is not None and left > 30 and not args.search_only:  # the search just chose: compare in the time left
        execute(compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"]), root, budget_s=left, parallel=args.parallel,
                device=args.device)  # fmt: skip
        rep = collect(sweep, root, force)
    return rep


def main(argv: list[str] | None = None) -> int:
    """``study SWEEP [--budget-s S] [--parallel N] [--device D] [--runs DIR] [--out DIR] [--plan] [--search-only]
    [--force-cell ETA,LR] [--executor {local,ray} [--address ADDR]]``."""
    parser = ArgumentParser(prog="python -m llm_scale study", description=__doc__.splitlines()[0])
    parser.add_argument("sweep", help="sweep file (e.g. sweeps/llm/promotion.toml)")
    parser.add_argument("--budget-s", type=float, default=540.0, help="stop starting and interrupt runs after this long")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (they share the GPU, or split the CPU threads)")
    parser.add_argument("--device", default=None, help="--device for every run (default: the runs' own, auto)")
    parser.add_argument("--runs", default="runs/llm_study", help="where the cached runs live (one directory per config hash)")
    parser.add_argument("--out", default="results/llm/study", help="tables and figure")
    parser.add_argument("--plan", action="store_true", help="list the runs and their state; run nothing")
    parser.add_argument("--search-only", action="store_true",
                        help="run only the regime search, never a comparison run (one that could not finish in the "
                             "budget, without checkpoints, would be lost)")
    parser.add_argument("--force-cell", default=None, help="ETA,LR: run the comparison there even if the rule chose none")
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help="where the runs' jobs go: local worker processes (default), or Ray tasks (the optional "
                             "extra ray; each job starts its trainer where it runs, so --runs must be on storage "
                             "every node sees)")
    parser.add_argument("--address", default=None, metavar="ADDR",
                        help="with --executor ray: a running Ray cluster's address (default: Ray started here)")
    parser.add_argument("--cost-from", default=None,
                        help="with --plan: a finished study's runs.csv; print this study's size and estimated device time")
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0)
        sweep = load_sweep(args.sweep)
        if args.parallel < 1 or args.budget_s <= 0:
            raise UsageError(f"study: --parallel must be >= 1 and --budget-s > 0, got {args.parallel} and {args.budget_s}")
        executor = make(args.executor, args.address, num_cpus=args.parallel)
        force = None
        if args.force_cell is not None:
            try:
                eta, lr = args.force_cell.split(",")
                force = (int(eta), float(lr))
            except ValueError:
                raise UsageError(f"study: --force-cell takes ETA,LR (e.g. 2,1e-6), got {args.force_cell!r}") from None
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.cost_from is not None:
        try:
            print(plan_cost(sweep, args.cost_from, args.parallel))
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if args.plan:
            return 0
    root, out = Path(args.runs), Path(args.out)
    command = "python -m llm_scale study " + " ".join(argv)
    t0 = time.monotonic()
    rep = collect(sweep, root, force)
    if not args.plan:
        try:
            executor.start(args.parallel)
        except UsageError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        with using(executor):
            rep = _train(sweep, root, rep, args, force, t0)
    write_report(sweep, rep, out, command)
    print(format_report(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
