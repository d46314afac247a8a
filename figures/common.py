"""What every figure and experiment shares: the run context, the cached-run adapter, per-seed values.

Runs go through the testbed's own results store (`testbed.results.ResultStore`, via
`testbed.sweep.run_sweep`): one directory (``--cache``) holds every run of every figure, keyed by the
hash of its resolved config. An experiment asks for its configs; the ones already finished are read
back, the others are trained (in parallel workers). Regenerating a figure after a style change
therefore retrains nothing; changing a setting retrains only what changed; an interrupted run resumes.

Per-seed values are read by run id (`values`, `curves`): a *cell* is the list of configs of one
setting, one per seed, so values of two cells are aligned seed by seed (paired comparisons,
testbed/util/stats.py) without matching on table columns.

Evidence. Each experiment (figures/experiments/) turns its runs into a dict of plain numbers (per-seed
values); figure modules draw it and return it, and ``<out>/data/NAME.json`` keeps it so the report
can be rebuilt without re-plotting (figures/claims.py).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pandas as pd

from figures.budgets import Budget, budget
from figures.evidence import Evidence
from testbed.config import RunConfig
from testbed.machine import NOT_RECORDED, describe, trained_by
from testbed.util.endpoints import from_mean, tail_mean
from testbed.util.files import atomic_write_text
from testbed.util.planning import plan_runs, unique
from testbed.util.provenance import machine


@dataclass
class Context:
    """Settings of one ``python -m figures`` invocation."""

    out: Path
    cache: Path
    quick: bool = False
    workers: int = 1
    progress: bool = True
    command: str = "python -m figures all"
    cached_only: bool = False  # plot what the cache holds; train nothing (a partial report)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    @property
    def budget(self) -> Budget:
        return budget(self.quick)

    def cmd(self, name: str) -> str:
        """The command line that regenerates figure ``name`` with these settings."""
        flags = " --quick" if self.quick else ""
        return f"python -m figures {name}{flags}"

    # -- runs ------------------------------------------------------------------------------------
    def ensure(self, configs: list[RunConfig]) -> None:
        """Train every config not yet in the cache, or recorded there with other code (parallel over ``workers``); the finished runs count as read
        (`touch`)."""
        from testbed.codeprint import config_code
        from testbed.results import ResultStore

        store = ResultStore(self.cache)
        # a run recorded with other code (testbed/codeprint.py) is trained again (the sweep says which)
        planned = plan_runs(configs, key=lambda c: c.run_id, done=lambda c: store.done(c.run_id, config_code(c)))
        configs, todo = planned.runs, planned.todo
        if configs:
            print(cache_line(store, configs, todo, self.cached_only), flush=True)
        try:
            if todo and not self.cached_only:
                self._train(todo, store)
        finally:  # what finished is read, even when a stop cut the rest short
            self.touch(store.runs / f"{c.run_id}.csv" for c in configs if store.done(c.run_id))

    def uncached(self, configs: list[RunConfig]) -> int:
        """How many of ``configs`` the cache does not hold yet (`missing`)."""
        return missing(self.cache, configs)

    # -- the protocol stamp of a confirmatory run (figures/preregistration.toml) ----------------------------
    @property
    def protocol_stamp(self) -> dict[str, Any] | None:
        """`figures.prereg.stamp_of` the budget's registration when the budget is a pre-registered confirmatory one,
        else None."""
        if self.budget.name != "confirmatory":
            return None
        from figures import prereg

        return self.extra.setdefault("protocol_stamp",
                                     prereg.stamp_of(prereg.registration(self.budget.registration or None)))

    def _train(self, todo: list[RunConfig], store: Any) -> None:
        from testbed.limits import DiskTooSmall
        from testbed.sweep import run_sweep
        from testbed.util.errors import UsageError

        workers = max(1, min(self.workers, len(todo)))
        # largest first, so that parallel workers finish together
        todo.sort(key=cost_estimate, reverse=True)
        # runs sharing a model shape train in one loop (identical results); the sweep sizes the loops
        try:
            stamp = self.protocol_stamp  # the runs this invocation trains carry its protocol stamp in their records
            run_sweep(todo, store.out, workers=workers, meta={"command": "figures"}, progress=self.progress,
                      shared=True, record_extra={"preregistration": stamp} if stamp else None)
        except DiskTooSmall as exc:  # the testbed's remedy names its flags; figures has --cache and --quick instead
            raise UsageError(exc.message("free some space, choose another --cache, or use --quick")) from None

    # -- which runs a figure read, for the machines that trained them ---------------------------------
    def touch(self, rows_files: Iterable[Path]) -> None:
        """Note cached runs (by their rows file) that the figures being made read (`reading`)."""
        paths = list(rows_files)
        for used in self.extra.setdefault("reading", []):
            used.update(paths)
        self.extra.setdefault("read", set()).update(paths)  # every run this invocation read (`write_evidence`)

    @contextlib.contextmanager
    def reading(self) -> Iterator[set[Path]]:
        """Collect the rows files of the runs read inside the block (by `ensure`, `touch` and the experiments'
        evidence, memoized or not), e.g. those behind one figure."""
        used: set[Path] = set()
        stack = self.extra.setdefault("reading", [])
        stack.append(used)
        try:
            yield used
        finally:
            stack.pop()  # blocks nest, so the last set is this one

    def table(self, configs: list[RunConfig]) -> pd.DataFrame:
        """The tidy rows (one per run x logged step) of ``configs``, training what is missing (`ensure`)."""
        self.ensure(configs)
        return self.rows(configs)

    def rows(self, configs: list[RunConfig]) -> pd.DataFrame:
        """The tidy rows of those of ``configs`` already trained: trains nothing and prints no cache line (a
        sequential design reads every seed up to its cap, the later looks' not trained yet); the runs read
        count as read (`touch`).

        Read run by run with the id column set from the config: a CSV reader takes an id such as
        ``789907539e16`` for a number, so the stored column cannot be trusted to match."""
        from testbed.results import ResultStore

        store = ResultStore(self.cache)
        done = [c for c in dedupe(configs) if store.done(c.run_id)]
        self.touch(store.runs / f"{c.run_id}.csv" for c in done)
        frames = [self._run_rows(store.runs / f"{c.run_id}.csv", c.run_id) for c in done]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run_id", "status"])

    def _run_rows(self, path: Path, run_id: str) -> pd.DataFrame:
        """A run's rows file (`testbed.results.read_frame`) with its ``run_id`` column, read once per invocation:
        every look of a sequential design reads all its runs again, and a finished run's file does not change
        (it is read again if its size or time did: a damaged run trained anew). The memo's frames never leave it
        as they are: `rows` returns their concatenation, a new frame."""
        from testbed.results import read_frame

        memo = self.extra.setdefault("run_rows", {})
        stat = path.stat()
        key = (stat.st_mtime_ns, stat.st_size)
        if path not in memo or memo[path][0] != key:
            frame = read_frame(path)
            frame["run_id"] = run_id
            memo[path] = (key, frame)
        return memo[path][1]

    def step_records(self, configs: list[RunConfig]) -> dict[str, pd.DataFrame]:
        """Each trained run's per-optimizer-step records (``runs/<id>.steps.csv``: ESS, gradient norm, cosine, ...;
        testbed/health.py), by run id; runs without the file (trained before it existed) are left out. Trains
        nothing."""
        from testbed.results import ResultStore

        store = ResultStore(self.cache)
        records = {c.run_id: store.step_records(c.run_id) for c in configs if store.done(c.run_id)}
        return {run_id: steps for run_id, steps in records.items() if steps is not None}

    def evidence(self, experiment: ModuleType) -> Evidence:
        """The experiment's evidence (figures/experiments/), computed once per invocation."""
        memo = self.extra.setdefault("evidence", {})
        if experiment.NAME not in memo:
            with self.reading() as used:
                memo[experiment.NAME] = (experiment.measure(self), used)
        ev, used = memo[experiment.NAME]
        self.touch(used)
        return ev


def cache_line(store: Any, configs: list[RunConfig], todo: list[RunConfig], cached_only: bool = False) -> str:
    """One line saying what the cache gave: runs reused (and how many of them another machine trained, whole or in
    part, or one not recorded), runs whose record exists but whose files did not verify (cut short, unreadable) or that failed,
    to be trained again, and new runs to train."""
    failed = damaged = 0
    for c in todo:
        if store.has_record(c.run_id):
            try:
                status = store.record(c.run_id).get("status")
            except (OSError, ValueError):
                status = None
            failed += status == "failed"
            damaged += status != "failed"
    new = len(todo) - failed - damaged
    action = "left missing (--cached-only)" if cached_only else "to train"
    parts = [f"cache {store.out}: {len(configs) - len(todo)} of {len(configs)} runs reused"]
    pending = {c.run_id for c in todo}
    here = describe(machine())
    elsewhere = Counter(trained_by(store.record(c.run_id)) for c in configs if c.run_id not in pending)
    elsewhere.pop(here, None)
    if elsewhere:
        unknown = elsewhere.pop(NOT_RECORDED, 0)
        foreign = sum(elsewhere.values())
        parts.append(" and ".join(([f"{foreign} of them trained on another machine"] if foreign else [])
                                  + ([f"{unknown} with no machine recorded"] if unknown else []))
                     + " (their numbers can differ from this machine's in the last bits: testbed/machine.py)")
    if damaged:
        parts.append(f"{damaged} damaged (files incomplete) {action}")
    if failed:
        parts.append(f"{failed} failed {action}")
    if new:
        parts.append(f"{new} new {action}")
    return ", ".join(parts)


def experiment_configs(experiment: ModuleType) -> Callable[[bool], list[RunConfig]]:
    """A figure's ``configs(quick)``: those of the experiment it draws."""

    def configs(quick: bool) -> list[RunConfig]:
        return experiment.configs(budget(quick))

    return configs


def missing(cache: Path, configs: list[RunConfig]) -> int:
    """How many of ``configs`` the cache does not hold yet."""
    from testbed.results import ResultStore

    store = ResultStore(cache)
    return sum(not store.done(c.run_id) for c in dedupe(configs))


def runs_s(cache: Path, configs: list[RunConfig]) -> float | None:
    """The training time the cached runs of ``configs`` record, summed over runs (worker seconds: a loop's
    time shared equally by its runs; kept across a stop and resume). None when none is cached."""
    from testbed.results import ResultStore

    store = ResultStore(cache)
    walls = [store.record(c.run_id).get("wall_s") for c in dedupe(configs) if store.has_record(c.run_id)]
    walls = [w for w in walls if w is not None]
    return float(sum(walls)) if walls else None


def dedupe(configs: list[RunConfig]) -> list[RunConfig]:
    """``configs`` with each run once (the first of a run id kept, in order: `testbed.util.planning.unique`)."""
    return unique(configs, key=lambda c: c.run_id)


def cost_estimate(cfg: RunConfig) -> float:
    """Rough relative cost of a run (for scheduling only)."""
    c = cfg.resolved()
    per_step = c.batch_size * c.epochs * (c.task_args.get("H", 1) if c.task == "token_reversal" else 1)
    if c.task == "token_reversal":
        per_step *= 20
    if "vcpo" in c.recipe or "opob" in c.recipe:
        per_step *= 2
    return c.steps * per_step


# -- reading runs back by cell ------------------------------------------------------------------------


def _runs(table: pd.DataFrame, cell: list[RunConfig]) -> list[pd.DataFrame | None]:
    """The rows of each config of ``cell`` (None where the table lacks it), in the cell's order."""
    if not len(table):
        return [None for _ in cell]
    ids = [cfg.run_id for cfg in cell]
    groups = {rid: g for rid, g in table[table["run_id"].isin(ids)].groupby("run_id", sort=False)}
    out = []
    for rid in ids:
        g = groups.get(rid)
        out.append(None if g is None else g.sort_values("step") if "step" in g else g)
    return out


def values(table: pd.DataFrame, cell: list[RunConfig], metric: str, diverged_value: float = float("nan"),
           tail: float = 0.05, start: float | None = None) -> np.ndarray:
    """One number per config of ``cell`` (= per seed): the mean of ``metric`` over the last ``tail``
    fraction of its logged values (at least one; `testbed.util.endpoints.tail_mean`), or over the logged values
    from fraction ``start`` of the run on (`testbed.util.endpoints.from_mean`); ``diverged_value`` for a
    diverged run, NaN for a missing one or one that logged none."""
    out = []
    for run in _runs(table, cell):
        if run is None:
            out.append(float("nan"))
            continue
        if run["status"].iloc[0] == "diverged":
            out.append(diverged_value)
            continue
        vals = run.get(metric, [])
        out.append(from_mean(vals, start) if start is not None else tail_mean(vals, tail))
    return np.asarray(out, dtype=float)


def curves(table: pd.DataFrame, cell: list[RunConfig], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values [n_configs, n_steps]) of a metric over training; NaN where not logged (after a divergence)."""
    runs = [r for r in _runs(table, cell) if r is not None and metric in r]
    if not runs:
        return np.zeros(0), np.zeros((0, 0))
    steps = np.unique(np.concatenate([r["step"].dropna().to_numpy(dtype=float) for r in runs]))
    ys = np.full((len(runs), len(steps)), np.nan)
    for i, r in enumerate(runs):
        sub = r[["step", metric]].dropna()
        idx = np.searchsorted(steps, sub["step"].to_numpy(dtype=float))
        ys[i, idx] = sub[metric].to_numpy(dtype=float)
    return steps, ys


def seed_curves(table: pd.DataFrame, cell_runs: list[RunConfig], versions: list[float],
                diverged_value: float) -> tuple[list[float], list[list[float]]]:
    """(versions, per config of ``cell_runs`` (= per seed) its test error at each version): ``versions`` the
    first run's logged steps when empty; NaN where a run is missing or did not log a version;
    ``diverged_value`` after a divergence."""
    rows = []
    for c in cell_runs:
        steps, ys = curves(table, [c], "test_error")
        if not versions and len(steps):
            versions = [float(x) for x in steps]
        row = np.full(len(versions), np.nan)
        if len(steps):
            at = {float(x): float(y) for x, y in zip(steps, ys[0], strict=True)}
            row = np.array([at.get(v, np.nan) for v in versions])
            if diverged(table, [c]):
                last = max((i for i, y in enumerate(row) if np.isfinite(y)), default=-1)
                row[last + 1:] = diverged_value
        rows.append(row.tolist())
    return list(versions), rows


def diverged(table: pd.DataFrame, cell: list[RunConfig]) -> int:
    """How many runs of ``cell`` diverged."""
    return sum(r is not None and r["status"].iloc[0] == "diverged" for r in _runs(table, cell))


def smooth_rows(ys: np.ndarray, k: int = 3) -> np.ndarray:
    """Centred moving average over ``k`` points per row, NaN-aware, without edge shrinkage."""
    ys = np.atleast_2d(np.asarray(ys, dtype=float))
    if ys.shape[1] < k or k <= 1:
        return ys
    kernel = np.ones(k)
    ok = np.isfinite(ys)
    num = np.stack([np.convolve(np.where(o, r, 0.0), kernel, mode="same") for r, o in zip(ys, ok, strict=True)])
    den = np.stack([np.convolve(o.astype(float), kernel, mode="same") for o in ok])
    with np.errstate(all="ignore"):
        return np.where(den > 0, num / den, np.nan)


def arr(v: Any) -> np.ndarray:
    """Evidence list (None for missing) -> float array (NaN for missing)."""
    if v is None:
        return np.zeros(0)
    return np.asarray([np.nan if x is None else x for x in list(v)], dtype=float)


# -- evidence on disk ----------------------------------------------------------------------------------


def machines(rows_files: Iterable[Path]) -> dict[str, int]:
    """How many of these cached runs each machine trained: {`testbed.machine.trained_by` label: runs}, most runs
    first. A run is its rows file (a testbed run's ``runs/<id>.csv``, an exact-gradient run's ``oracle/<hash>.csv``);
    its machine is in the record beside it (``.json``), "not recorded" for runs saved before records named it, and
    "A then B" for a loop stopped on A and resumed on B. Absent rows files (runs not trained) are not counted."""
    counts: Counter[str] = Counter()
    for rows in rows_files:
        if not rows.is_file():
            continue
        try:
            record = json.loads(rows.with_suffix(".json").read_text())
        except (OSError, ValueError):
            record = {}
        counts[trained_by(record)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def stamps(rows_files: Iterable[Path]) -> dict[str, int]:
    """How many of these cached runs' records carry each pre-registration digest (``preregistration.sha256``,
    written when the run was trained, `Context.protocol_stamp`), "none" for a record without a stamp; absent rows
    files are not counted."""
    counts: Counter[str] = Counter()
    for rows in rows_files:
        if not Path(rows).is_file():
            continue
        try:
            record = json.loads(Path(rows).with_suffix(".json").read_text())
        except (OSError, ValueError):
            record = {}
        st = record.get("preregistration") if isinstance(record, dict) else None
        counts[str(st.get("sha256")) if isinstance(st, dict) and st.get("sha256") else "none"] += 1
    return dict(sorted(counts.items()))


def write_evidence(ctx: Context, name: str, evidence: dict[str, Evidence],
                   machines: dict[str, int] | None = None) -> Path:
    """``<out>/data/NAME.json``: {figure, quick, evidence: {experiment: its evidence as JSON}, machines: runs per
    machine that trained them (`machines`), stamps: the protocol stamps of every run record this invocation has read
    so far (`stamps`; the report's label reads them)}."""
    path = ctx.data_dir / f"{name}.json"
    payload = {"figure": name, "quick": ctx.quick, "evidence": {exp: ev.to_json() for exp, ev in evidence.items()},
               "machines": machines or {}, "stamps": stamps(sorted(ctx.extra.get("read", ())))}
    atomic_write_text(path, json.dumps(payload, indent=1))
    return path


def read_evidence(out: Path) -> dict[str, dict[str, Any]]:
    """{figure name: payload} for every evidence file under ``out/data``."""
    from testbed.util.errors import UsageError

    data = {}
    for path in sorted((Path(out) / "data").glob("*.json")):
        try:
            payload = json.loads(path.read_text())
            data[payload["figure"]] = payload
        except (ValueError, KeyError, TypeError) as exc:  # cut short or edited: never report from fewer figures silently
            raise UsageError(f"evidence file {str(path)!r} is damaged ({type(exc).__name__}: {exc}); remake it with "
                             f"`python -m figures {path.stem}` (its runs are cached) or delete it") from None
    return data


