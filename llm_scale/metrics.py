"""Per-step metrics: a tidy CSV (one row per step; columns grow as new metrics appear) and TensorBoard."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any


class MetricsLog:
    """Appends one row per step to ``path``; on resume keeps only the rows before the resumed step."""

    def __init__(self, path: Path, *, resume_step: int | None = None, tensorboard: str = "auto") -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] = []
        if resume_step is not None and self.path.is_file():
            with self.path.open(newline="") as handle:
                for row in csv.DictReader(handle):
                    if int(row["step"]) < resume_step:
                        self.rows.append({k: _parse(v) for k, v in row.items() if v != ""})
            for row in self.rows:
                self._extend(row)
        self._rewrite()
        self.tb = _tensorboard(self.path.parent / "tensorboard", tensorboard)

    def _extend(self, row: dict[str, Any]) -> bool:
        new = [k for k in row if k not in self.columns]
        self.columns.extend(new)
        return bool(new)

    def _rewrite(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(self.rows)
        tmp.replace(self.path)

    def log(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if self._extend(row) or not self.path.is_file():
            self._rewrite()
        else:
            with self.path.open("a", newline="") as handle:
                csv.DictWriter(handle, fieldnames=self.columns).writerow(row)
        if self.tb is not None:
            step = int(row["step"])
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.flush()
            self.tb.close()


def _parse(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def _tensorboard(logdir: Path, mode: str) -> Any:
    if mode not in ("auto", "on", "off"):
        raise ValueError(f"tensorboard must be auto, on or off, got {mode!r}")
    if mode == "off":
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if mode == "on":
            raise ImportError("--tensorboard on needs the tensorboard package (pip install tensorboard)") from None
        return None
    return SummaryWriter(str(logdir))
