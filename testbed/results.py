"""Results on disk: one tidy table (one row per run x logged step, config columns included).

Layout of an output directory::

    OUT/config.json        the sweep (or run command) and the resolved config of every run, by run id
    OUT/runs/<id>.csv      the logged rows of one finished run      (written first)
    OUT/runs/<id>.steps.csv  one row per optimizer step: cosine and its kind, cheap diagnostics (testbed/health.py)
    OUT/runs/<id>.json     its config, status, timing, the machine that finished it (testbed/machine.py;
                           ``trained_on`` too when a loop stopped on one machine was resumed on another) and
                           the fingerprint of the code it ran (``code``, testbed/codeprint.py: a run is reused
                           only by the same code); written last: the "done" marker
    OUT/runs/<id>.log      the traceback of a run that failed (status ``failed``)
    OUT/results.csv        all runs' rows, in the sweep's order     (+ results.parquet with --format parquet)
    OUT/summary.csv        one row per run: config, status, final metrics, wall time

A store several commands add to (``shared``: the figures' run cache, the validation battery) keeps every
recorded run in its tables and config.json, the earlier commands' first.

Every file is written to a temporary name and renamed into place, so an interrupted sweep leaves
finished runs complete and unfinished runs absent: rerunning skips exactly the finished ones (a
``failed`` run is retried). Files get the user's normal permissions (0666 less the umask).

Columns: ``run_id``, every field of `testbed.runner.RunConfig` (task options as ``task.<name>``), then
``status`` (testbed/outcomes.py: ``ok``, ``collapsed``, ``diverged`` or ``failed``) and the logged
metrics. A diverged run keeps the rows it logged before diverging and ends with one row marking the
step (``diverged_at``). Timing (``wall_s``) lives in summary.csv and the run's JSON, not in
results.csv, so the same configs give the same results table byte for byte.

Tables are read back with explicit column types (`read_frame`): text columns (run ids, specs,
statuses, text task options) as strings, never inferred, so a run id such as ``6373307046e6`` or
``nan`` stays that string; integer config fields as nullable integers, ``lr`` as float.
"""

from __future__ import annotations

import functools
import hashlib
import json
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.config import RunConfig
from testbed.state import RunResult
from testbed.util.codeprint import stale_parts
from testbed.util.files import atomic_write_frame, atomic_write_text
from testbed.util.provenance import machine

CONFIG_COLUMNS = ["run_id", *(f for f in RunConfig.field_names() if f != "task_args")]
SUMMARY_FINALS = ("step", "test_error", "test_reward", "reward_avg")
HEALTH_KEYS = ("health", "stalled", "lost_classes_final", "zero_grad_frac_late")  # testbed/health.py
NA_STRINGS = ["", "nan", "NaN", "NA", "<NA>", "null", "None"]


def _kind(tp: Any) -> str | None:
    options = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    for kind, py in (("text", str), ("int", int), ("float", float)):
        if py in options:
            return kind
    return None


@functools.lru_cache(maxsize=1)
def _config_kinds() -> dict[str, str]:
    hints = typing.get_type_hints(RunConfig)
    kinds = {name: _kind(hints[name]) for name in RunConfig.field_names() if name != "task_args"}
    return {"run_id": "text", "status": "text", "error": "text", "health": "text", **{k: v for k, v in kinds.items() if v}}


@functools.lru_cache(maxsize=1)
def _text_task_options() -> frozenset[str]:
    """Names of task options that some registered task declares as text (read back as strings)."""
    from testbed.tasks import task_names, task_options

    names = set()
    for task in task_names():
        try:
            options = task_options(task)
        except ValueError:  # a task whose module is unavailable
            continue
        names |= {name for name, opt in options.items() if _kind(opt.type) == "text"}
    return frozenset(names)


def column_types(columns: Iterable[str]) -> dict[str, Any]:
    """The explicit dtype of every known column among ``columns`` (others: numeric metrics, inferred)."""
    kinds = _config_kinds()
    out: dict[str, Any] = {}
    for col in columns:
        kind = kinds.get(col)
        if kind is None and col.startswith("task.") and col[5:] in _text_task_options():
            kind = "text"
        if kind is not None:
            out[col] = {"text": str, "int": "Int64", "float": "float64"}[kind]
    return out


def _scalar(value: Any) -> Any:
    """A logged value as a plain Python scalar (metrics may be 0-d tensors or numpy scalars)."""
    if isinstance(value, str | bool | int | float) or value is None:
        return value
    item = getattr(value, "item", None)
    return item() if callable(item) else value


def config_columns(cfg: RunConfig) -> dict[str, Any]:
    """The config of a (resolved) run as flat columns; task options become ``task.<name>``."""
    cfg = cfg.resolved()
    d = cfg.to_dict()
    out = {"run_id": cfg.run_id, **{k: d[k] for k in CONFIG_COLUMNS[1:]}}
    for key, value in d["task_args"].items():
        out[f"task.{key}"] = value if isinstance(value, int | float | str | bool) or value is None else json.dumps(value)
    return out


INT_METRICS = ("step", "lag_max", "diverged_at")  # logged integers: stay integers beside a row that lacks them


def _integers(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with the `INT_METRICS` columns as nullable integers (a diverged run's last row has no lag, which
    would otherwise turn the column, and every loop-mate's values in the table, into floats)."""
    for col in INT_METRICS:
        if col in frame and frame[col].dtype.kind in "fiu":
            values = frame[col]
            if values.dropna().eq(values.dropna().round()).all():
                frame[col] = values.astype("Int64")
    return frame


def result_frame(result: RunResult) -> pd.DataFrame:
    """The tidy rows of one run: config columns, ``status``, then the logged metrics (header only if none)."""
    base = {**config_columns(result.config), "status": result.status}
    rows = [{**base, **{k: _scalar(v) for k, v in row.items()}} for row in result.rows]
    return _integers(pd.DataFrame(rows)) if rows else pd.DataFrame(columns=list(base))


def read_frame(path: Path) -> pd.DataFrame:
    """A results table with explicit column types (module docstring); parquet keeps its own types."""
    path = Path(path)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    header = pd.read_csv(path, nrows=0).columns
    dtype = column_types(header)
    na = {c: ([""] if dtype.get(c) is str else NA_STRINGS) for c in header}
    # exact float round trip (pandas >= 3 does it by default and deprecates the option)
    extra = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    try:
        return pd.read_csv(path, dtype=dtype, keep_default_na=False, na_values=na, **extra)
    except (ValueError, OverflowError, TypeError):  # a number column holding something else (not our writing)
        text = {c: t for c, t in dtype.items() if t is str}
        return pd.read_csv(path, dtype=text, keep_default_na=False, na_values=na, **extra)


class ResultStore:
    """The files of one output directory (see the module docstring)."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.runs = self.out / "runs"

    def checkpoint(self, run_ids: Iterable[str]) -> Path:
        """Where the loop of these runs is saved when a sweep is stopped (testbed/util/stopping.py)."""
        key = hashlib.sha1(",".join(run_ids).encode()).hexdigest()[:12]
        return self.out / "checkpoints" / f"loop-{key}.pt"

    def has_record(self, run_id: str) -> bool:
        return (self.runs / f"{run_id}.json").is_file()

    def done(self, run_id: str, code: dict[str, str] | None = None) -> bool:
        """True when the run finished (any status but ``failed``, which is retried) and its rows file is whole:
        it holds the number of rows its record counts (a rows file cut short, e.g. by a copy that ran out of
        disk, makes the run count as not finished, so it is trained again). With ``code`` (the current code's
        fingerprint, testbed/codeprint.py), a run recorded with a different one is not finished either."""
        if not self.has_record(run_id):
            return False
        try:
            record = self.record(run_id)
            if record.get("status") == "failed":
                return False
            if code is not None and stale_parts(record.get("code"), code):
                return False
            return "rows" not in record or self._row_count(run_id) == record["rows"]
        except (OSError, ValueError):
            return False

    def _row_count(self, run_id: str) -> int:
        """Data lines of runs/<id>.csv (-1 when it is missing or lacks its header or its final newline)."""
        path = self.runs / f"{run_id}.csv"
        if not path.is_file():
            return -1
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            return -1
        return data.count(b"\n") - 1

    def save(self, result: RunResult, code: dict[str, str] | None = None, extra: dict[str, Any] | None = None) -> None:
        """Write a finished run (``code``: the fingerprint of the code that ran it, testbed/codeprint.py; ``extra``:
        fields the command adds to its record, such as a confirmatory run's protocol stamp)."""
        run_id = result.config.run_id
        atomic_write_frame(result_frame(result), self.runs / f"{run_id}.csv")
        if result.steps:
            atomic_write_frame(pd.DataFrame(result.steps), self._steps_path(run_id))
        record = {"run_id": run_id, "config": result.config.to_dict(), "status": result.status, **result.info,
                  "rows": len(result.rows), "machine": machine(), **({"code": code} if code else {}), **(extra or {})}
        atomic_write_text(self.runs / f"{run_id}.json", json.dumps(record, indent=1, sort_keys=True, default=_scalar))
        (self.runs / f"{run_id}.log").unlink(missing_ok=True)  # from an earlier failed attempt

    def save_failure(self, config: RunConfig, error: str, traceback_text: str) -> Path:
        """Record ``config`` as ``failed``: its traceback in runs/<id>.log, a header-only rows file, the record."""
        cfg = config.resolved()
        log = self.runs / f"{cfg.run_id}.log"
        atomic_write_text(log, traceback_text)
        result = RunResult(cfg, [], "failed", {"error": error, "log": str(log.relative_to(self.out))})
        atomic_write_frame(result_frame(result), self.runs / f"{cfg.run_id}.csv")
        record = {"run_id": cfg.run_id, "config": cfg.to_dict(), "status": "failed", **result.info, "machine": machine()}
        atomic_write_text(self.runs / f"{cfg.run_id}.json", json.dumps(record, indent=1, sort_keys=True))
        return log

    def _steps_path(self, run_id: str) -> Path:
        return self.runs / f"{run_id}.steps.csv"

    def step_records(self, run_id: str) -> pd.DataFrame | None:
        """The run's per-optimizer-step records (testbed/health.py; ``kind`` as text, the rest numbers), or None when
        it has none (not trained, or trained before they were written)."""
        path = self._steps_path(run_id)
        return pd.read_csv(path, dtype={"kind": str}) if path.is_file() else None

    def record(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.runs / f"{run_id}.json").read_text())

    def write_config(self, meta: dict[str, Any], configs: Iterable[RunConfig], shared: bool = False) -> None:
        """config.json: ``meta`` (the command) and the resolved config of every run of ``configs``; ``shared`` (a
        store several commands add to): the runs of the earlier commands stay listed, before this command's."""
        runs = {c.run_id: c.resolved().to_dict() for c in configs}
        path = self.out / "config.json"
        if shared and path.is_file():
            try:
                earlier = json.loads(path.read_text()).get("runs", {})
            except (OSError, ValueError, AttributeError):
                earlier = {}
            runs = {**{k: v for k, v in earlier.items() if k not in runs}, **runs}
        atomic_write_text(path, json.dumps({**meta, "runs": runs}, indent=1, default=str))

    def table(self, configs: Iterable[RunConfig]) -> pd.DataFrame:
        """All recorded runs' rows, in the order of ``configs`` (a failed run has none)."""
        frames = [read_frame(self.runs / f"{c.run_id}.csv") for c in configs if self.has_record(c.run_id)]
        frames = [f for f in frames if len(f)]
        if not frames:
            return pd.DataFrame({c: pd.Series(dtype=t) for c, t in column_types([*CONFIG_COLUMNS, "status"]).items()})
        return pd.concat(frames, ignore_index=True)

    def summary(self, configs: Iterable[RunConfig], table: pd.DataFrame) -> pd.DataFrame:
        """One row per recorded run: config, status, final logged metrics, wall time, and what the status
        rule used (``chance_reward``, ``final_entropy``) or the error of a failed run."""
        rows = []
        last = table.groupby("run_id", sort=False).tail(1).set_index("run_id") if len(table) else None
        for c in configs:
            if not self.has_record(c.run_id):
                continue
            rec = self.record(c.run_id)
            row = {**config_columns(c), "status": rec["status"], "wall_s": rec.get("wall_s"),
                   "queue_peak_bytes": rec.get("queue_peak_bytes")}
            if last is not None and c.run_id in last.index:
                final = last.loc[c.run_id]
                for key in (*SUMMARY_FINALS, "diverged_at"):
                    if key in final.index:
                        row[f"final_{key}" if key != "diverged_at" else key] = final[key]
            for key in ("chance_reward", "final_entropy", "error", *HEALTH_KEYS):
                if key in rec:
                    row[key] = rec[key]
            rows.append(row)
        return pd.DataFrame(rows) if rows else pd.DataFrame(columns=[*CONFIG_COLUMNS, "status"])

    def finish(self, configs: list[RunConfig], fmt: str = "csv", shared: bool = False) -> pd.DataFrame:
        """Write results.csv (+ .parquet) and summary.csv from the recorded runs; return the table of ``configs``.

        ``shared`` (a store several commands add to): the tables keep the recorded runs of the earlier commands,
        their rows first, so that they always hold every run the store has; the same tables, byte for byte, as one
        command of all those runs in that order would write."""
        table = self.table(configs)
        written, summary = _integers(table.copy()), self.summary(configs, table)
        if shared:
            ids = {c.run_id for c in configs}
            written, summary = self._with_earlier("results.csv", written, ids), self._with_earlier("summary.csv", summary, ids)
        atomic_write_frame(written, self.out / "results.csv")
        if fmt == "parquet":
            atomic_write_frame(written, self.out / "results.parquet")
        atomic_write_frame(summary, self.out / "summary.csv")
        return table

    def _with_earlier(self, name: str, frame: pd.DataFrame, run_ids: set[str]) -> pd.DataFrame:
        """``frame`` after the rows of table ``name`` that earlier commands wrote for runs still recorded here and
        not in ``run_ids``."""
        path = self.out / name
        if not path.is_file():
            return frame
        earlier = read_frame(path)
        if "run_id" not in earlier or not len(earlier):
            return frame
        keep = earlier["run_id"].map(lambda rid: rid not in run_ids and self.has_record(rid))
        earlier = earlier[keep.astype(bool)]
        if not len(earlier):
            return frame
        return _integers(pd.concat([earlier, frame], ignore_index=True)) if len(frame) else earlier
