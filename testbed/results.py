"""Results on disk: one tidy table (one row per run x logged step, config columns included).

Layout of an output directory::

    OUT/config.json        the sweep (or run command) and the resolved config of every run, by run id
    OUT/runs/<id>.csv      the logged rows of one finished run      (written first)
    OUT/runs/<id>.json     its config, status and timing            (written last: the "done" marker)
    OUT/results.csv        all runs' rows, in the sweep's order     (+ results.parquet with --format parquet)
    OUT/summary.csv        one row per run: config, status, final metrics, wall time

Every file is written to a temporary name and renamed into place, so an interrupted sweep leaves
finished runs complete and unfinished runs absent: rerunning skips exactly the finished ones.

Run status is a column: ``ok`` or ``diverged`` (non-finite loss or parameters). A diverged run keeps
the rows it logged before diverging and ends with one row marking the step (``diverged_at``).
Timing (``wall_s``) lives in summary.csv and the run's JSON, not in results.csv, so the same configs
give the same results table byte for byte.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from testbed.runner import RunConfig, RunResult

CONFIG_COLUMNS = ["run_id", "task", "recipe", "delay", "frictions", "seed", "steps", "batch_size", "lr", "n_actors",
                  "group_size", "log_every", "agg", "optimizer", "proximal"]


def config_columns(cfg: RunConfig) -> dict[str, Any]:
    """The config of a (resolved) run as flat columns; task options become ``task.<name>``."""
    cfg = cfg.resolved()
    d = cfg.to_dict()
    out = {"run_id": cfg.run_id, **{k: d[k] for k in CONFIG_COLUMNS[1:]}}
    for key, value in d["task_args"].items():
        out[f"task.{key}"] = value if isinstance(value, int | float | str | bool) else json.dumps(value)
    return out


def result_frame(result: RunResult) -> pd.DataFrame:
    """The tidy rows of one run: config columns, ``status``, then the logged metrics."""
    base = {**config_columns(result.config), "status": result.status}
    return pd.DataFrame([{**base, **row} for row in result.rows])


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_frame(df: pd.DataFrame, path: Path) -> None:
    if path.suffix == ".parquet":
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        try:
            df.to_parquet(tmp, index=False)
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    else:
        atomic_write_text(path, df.to_csv(index=False))


def read_frame(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    # exact float round trip (pandas >= 3 does it by default and deprecates the option)
    extra = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    return pd.read_csv(path, **extra)


class ResultStore:
    """The files of one output directory (see the module docstring)."""

    def __init__(self, out: str | Path) -> None:
        self.out = Path(out)
        self.runs = self.out / "runs"

    def done(self, run_id: str) -> bool:
        return (self.runs / f"{run_id}.json").is_file()

    def save(self, result: RunResult) -> None:
        run_id = result.config.run_id
        atomic_write_frame(result_frame(result), self.runs / f"{run_id}.csv")
        record = {"run_id": run_id, "config": result.config.to_dict(), "status": result.status, **result.info}
        atomic_write_text(self.runs / f"{run_id}.json", json.dumps(record, indent=1, sort_keys=True))

    def record(self, run_id: str) -> dict[str, Any]:
        return json.loads((self.runs / f"{run_id}.json").read_text())

    def write_config(self, meta: dict[str, Any], configs: Iterable[RunConfig]) -> None:
        runs = {c.run_id: c.resolved().to_dict() for c in configs}
        atomic_write_text(self.out / "config.json", json.dumps({**meta, "runs": runs}, indent=1, default=str))

    def table(self, configs: Iterable[RunConfig]) -> pd.DataFrame:
        """All finished runs' rows, in the order of ``configs``."""
        frames = [read_frame(self.runs / f"{c.run_id}.csv") for c in configs if self.done(c.run_id)]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CONFIG_COLUMNS)

    def summary(self, configs: Iterable[RunConfig], table: pd.DataFrame) -> pd.DataFrame:
        """One row per finished run: config, status, final logged metrics, wall time."""
        rows = []
        last = table.groupby("run_id", sort=False).tail(1).set_index("run_id") if len(table) else None
        for c in configs:
            if not self.done(c.run_id):
                continue
            rec = self.record(c.run_id)
            row = {**config_columns(c), "status": rec["status"], "wall_s": rec.get("wall_s"),
                   "queue_peak_bytes": rec.get("queue_peak_bytes")}
            if last is not None and c.run_id in last.index:
                final = last.loc[c.run_id]
                for key in ("step", "test_error", "test_reward", "reward_avg", "diverged_at"):
                    if key in final.index:
                        row[f"final_{key}" if key != "diverged_at" else key] = final[key]
            rows.append(row)
        return pd.DataFrame(rows)

    def finish(self, configs: list[RunConfig], fmt: str = "csv") -> pd.DataFrame:
        """Write results.csv (+ .parquet) and summary.csv from the finished runs; return the table."""
        table = self.table(configs)
        atomic_write_frame(table, self.out / "results.csv")
        if fmt == "parquet":
            atomic_write_frame(table, self.out / "results.parquet")
        atomic_write_frame(self.summary(configs, table), self.out / "summary.csv")
        return table
