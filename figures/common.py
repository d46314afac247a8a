"""What every figure module shares: the run context, the cached-run adapter, per-seed statistics.

Runs go through the testbed's own results store (`testbed.results.ResultStore`, via
`testbed.sweep.run_sweep`): one directory (``--cache``, default ``<out>/runs``) holds every run of
every figure, keyed by the hash of its resolved config. A figure asks for its configs; the ones
already finished are read back, the others are trained (in parallel workers). Regenerating a figure
after a style change therefore retrains nothing; changing a setting retrains only what changed.

Evidence. Each figure module returns, per claim id it tests, a dict of plain numbers (per-seed
values, lists) that `figures.claims` turns into a verdict by a stated rule. The evidence is also
written to ``<out>/data/NAME.json`` so the report can be rebuilt without re-plotting.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from testbed.runner import RunConfig


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

    def cmd(self, name: str) -> str:
        """The command line that regenerates figure ``name`` with these settings."""
        flags = " --quick" if self.quick else ""
        return f"python -m figures {name}{flags}"

    # -- runs ------------------------------------------------------------------------------------
    def ensure(self, configs: list[RunConfig]) -> None:
        """Train every config not yet in the cache (parallel over ``workers``)."""
        from testbed.results import ResultStore
        from testbed.sweep import run_sweep

        configs = dedupe(configs)
        store = ResultStore(self.cache)
        todo = [c for c in configs if not store.done(c.run_id)]
        if not todo or self.cached_only:
            return
        workers = max(1, min(self.workers, len(todo)))
        # largest first, so that parallel workers finish together
        todo.sort(key=cost_estimate, reverse=True)
        # runs sharing a model shape train in one loop (identical results); the sweep sizes the loops
        run_sweep(todo, self.cache, workers=workers, meta={"command": "figures"}, progress=self.progress)

    def table(self, configs: list[RunConfig]) -> pd.DataFrame:
        """The tidy rows (one per run x logged step) of ``configs``, training what is missing."""
        from testbed.results import ResultStore

        configs = dedupe(configs)
        self.ensure(configs)
        table = ResultStore(self.cache).table(configs)
        return table


def missing(cache: Path, configs: list[RunConfig]) -> int:
    """How many of ``configs`` the cache does not hold yet."""
    from testbed.results import ResultStore

    store = ResultStore(cache)
    return sum(not store.done(c.run_id) for c in dedupe(configs))


def dedupe(configs: list[RunConfig]) -> list[RunConfig]:
    seen, out = set(), []
    for c in configs:
        if c.run_id not in seen:
            seen.add(c.run_id)
            out.append(c)
    return out


def cost_estimate(cfg: RunConfig) -> float:
    """Rough relative cost of a run (for scheduling only)."""
    c = cfg.resolved()
    per_step = c.batch_size * (c.task_args.get("H", 1) if c.task == "token_reversal" else 1)
    if c.task == "token_reversal":
        per_step *= 20
    if "vcpo" in c.recipe or "opob" in c.recipe:
        per_step *= 2
    return c.steps * per_step


def cfg(task: str = "mnist", **kw: Any) -> RunConfig:
    """A RunConfig with task options given as ``task_args``."""
    return RunConfig(task=task, **kw)


# -- reading runs back ---------------------------------------------------------------------------


def runs_of(table: pd.DataFrame, **match: Any) -> pd.DataFrame:
    """Rows whose config columns equal ``match`` (e.g. recipe="dg", delay="fixed:100"); a task option
    is matched by its name (``H=6`` looks at column ``task.H``); ``None`` matches runs without it."""
    sub = table
    for key, value in match.items():
        col = key if key in sub.columns else f"task.{key}"
        if col not in sub.columns:
            if value is None:  # an option no run set
                continue
            return sub.iloc[0:0]
        sub = sub[sub[col].isna()] if value is None else sub[sub[col] == value]
    return sub


def final_values(table: pd.DataFrame, metric: str, diverged_value: float = float("nan"), tail: int = 1,
                 **match: Any) -> np.ndarray:
    """Per-seed final value of ``metric`` (mean of the last ``tail`` logged values); a diverged run
    gives ``diverged_value``. Ordered by seed."""
    sub = runs_of(table, **match)
    out = []
    for _, run in sub.groupby("seed", sort=True):
        status = run["status"].iloc[0]
        vals = run[metric].dropna() if metric in run else pd.Series(dtype=float)
        if status == "diverged" or not len(vals):
            out.append(diverged_value)
        else:
            out.append(float(vals.iloc[-tail:].mean()))
    return np.asarray(out, dtype=float)


def seed_matrix(columns: list[np.ndarray]) -> np.ndarray:
    """Per-seed values of several settings as [n_seeds, n_settings], NaN where a run is missing."""
    rows = max((len(v) for v in columns), default=0)
    out = np.full((rows, len(columns)), np.nan)
    for j, v in enumerate(columns):
        out[: len(v), j] = v
    return out


def curves(table: pd.DataFrame, metric: str, **match: Any) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values [n_seeds, n_steps]) of a metric over training; NaN after a divergence."""
    sub = runs_of(table, **match)
    if metric not in sub.columns:
        return np.zeros(0), np.zeros((0, 0))
    sub = sub[["seed", "step", metric]].dropna(subset=["step"])
    wide = sub.pivot_table(index="seed", columns="step", values=metric, aggfunc="mean", dropna=False)
    return wide.columns.to_numpy(dtype=float), wide.to_numpy(dtype=float)


def smooth_rows(ys: np.ndarray, k: int = 3) -> np.ndarray:
    """Centred moving average over ``k`` logged points per row, NaN-aware, without edge shrinkage."""
    if ys.ndim != 2 or ys.shape[1] < k:
        return ys
    kernel = np.ones(k)
    ok = np.isfinite(ys)
    num = np.stack([np.convolve(np.where(o, r, 0.0), kernel, mode="same") for r, o in zip(ys, ok, strict=True)])
    den = np.stack([np.convolve(o.astype(float), kernel, mode="same") for o in ok])
    with np.errstate(all="ignore"):
        return np.where(den > 0, num / den, np.nan)


def diverged_count(table: pd.DataFrame, **match: Any) -> int:
    sub = runs_of(table, **match)
    if not len(sub):
        return 0
    return int((sub.groupby("seed")["status"].first() == "diverged").sum())


# -- statistics over seeds -----------------------------------------------------------------------


def summary(values: Any) -> dict[str, float]:
    """mean, std (ddof 1), standard error and n of the finite values."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    n = int(v.size)
    if n == 0:
        return {"mean": float("nan"), "std": float("nan"), "se": float("nan"), "n": 0}
    std = float(v.std(ddof=1)) if n > 1 else 0.0
    return {"mean": float(v.mean()), "std": std, "se": std / math.sqrt(n), "n": n}


def fmt(values: Any, digits: int = 3, pct: bool = False) -> str:
    """'mean +- std (n=k)' of per-seed values (percent if ``pct``)."""
    s = summary(values)
    if s["n"] == 0:
        return "n/a"
    k = 100.0 if pct else 1.0
    unit = "%" if pct else ""
    if s["n"] == 1:
        return f"{s['mean'] * k:.{digits}g}{unit} (1 seed)"
    return f"{s['mean'] * k:.{digits}g}{unit} +- {s['std'] * k:.2g} (n={s['n']})"


def _diff_se(a: Any, b: Any) -> tuple[float, float, int] | None:
    """(mean(b) - mean(a), its standard error, n) -- paired by seed when both sides hold the same seeds
    (same seed = same initialisation and context stream, so the pairing removes the seed effect),
    else Welch's unpaired standard error. None when a side has no finite value."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape == b.shape and a.size > 1:
        ok = np.isfinite(a) & np.isfinite(b)
        if ok.sum() == a.size:
            d = b - a
            return float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size)), int(d.size)
    sa, sb = summary(a), summary(b)
    if sa["n"] == 0 or sb["n"] == 0:
        return None
    return sb["mean"] - sa["mean"], math.sqrt(sa["se"] ** 2 + sb["se"] ** 2), min(sa["n"], sb["n"])


def less(a: Any, b: Any, min_effect: float = 0.0) -> bool:
    """True when mean(a) < mean(b) by more than ``min_effect`` and by more than two standard errors of
    the difference (paired by seed where possible, see `_diff_se`): the significance rule of every verdict."""
    r = _diff_se(a, b)
    if r is None:
        return False
    diff, se, _ = r
    return diff > max(min_effect, 2.0 * se)


def close(a: Any, b: Any, tol: float) -> bool:
    """True when |mean(a) - mean(b)| <= tol + two standard errors of the difference."""
    r = _diff_se(a, b)
    if r is None:
        return False
    diff, se, _ = r
    return abs(diff) <= tol + 2.0 * se


def to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.floating | float):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def write_evidence(ctx: Context, name: str, evidence: dict[str, Any]) -> Path:
    ctx.data_dir.mkdir(parents=True, exist_ok=True)
    path = ctx.data_dir / f"{name}.json"
    payload = {"figure": name, "quick": ctx.quick, "evidence": to_jsonable(evidence)}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    tmp.replace(path)
    return path


def read_evidence(out: Path) -> dict[str, dict[str, Any]]:
    """{figure name: payload} for every evidence file under ``out/data``."""
    data = {}
    for path in sorted((Path(out) / "data").glob("*.json")):
        payload = json.loads(path.read_text())
        data[payload["figure"]] = payload
    return data


def nan_to(value: Any, default: float) -> float:
    f = float(value)
    return default if not math.isfinite(f) else f
