"""What a run writes and shows: tidy CSV logs, TensorBoard scalars, and progress for people.

`CsvLog` appends one row per step to a CSV file (columns grow as new metrics appear; nothing is held
in memory); on resume it keeps only the rows before the resumed step, so a run killed after its last
checkpoint neither loses nor duplicates a row. `Progress` is a tqdm bar on a terminal and a short
line every ``every_s`` seconds (and at 10% steps) otherwise, so logs are not flooded.
"""

from __future__ import annotations

import csv
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, TextIO


class CsvLog:
    """Rows keyed by an integer column ``key`` (``step`` or ``version``) in ``path``."""

    def __init__(self, path: Path, *, key: str = "step", keep_below: int | None = None) -> None:
        self.path, self.key = Path(path), key
        self.columns: list[str] = [key]
        rows: list[dict[str, str]] = []
        if keep_below is not None and self.path.is_file():
            with self.path.open(newline="") as handle:
                reader = csv.DictReader(handle)
                self.columns = list(reader.fieldnames or [key])
                rows = [row for row in reader if row.get(key) not in (None, "") and int(row[key]) < keep_below]
        self._rewrite(rows)

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with tmp.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)
        os.replace(tmp, self.path)

    def log(self, row: dict[str, Any]) -> None:
        new = [k for k in row if k not in self.columns]
        if new:
            with self.path.open(newline="") as handle:
                old = list(csv.DictReader(handle))
            self.columns.extend(new)
            self._rewrite([*old, row])
            return
        with self.path.open("a", newline="") as handle:
            csv.DictWriter(handle, fieldnames=self.columns).writerow(row)


def _quiet_writer_threads() -> None:
    """Keep TensorBoard's writer thread from printing a traceback when a write fails (a full disk).

    The writer keeps the exception and raises it in the training thread at its next write, flush or
    close, where the run reports it in one line; printed here too it would be a second, raw report.
    """
    import threading

    previous = threading.excepthook
    if getattr(previous, "_llm_scale_quiet", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and isinstance(args.exc_value, OSError):
            return
        previous(args)

    hook._llm_scale_quiet = True  # type: ignore[attr-defined]
    threading.excepthook = hook


def tensorboard_writer(logdir: Path, mode: str, warn: TextIO | None = None, purge_step: int | None = None) -> Any:
    """A ``SummaryWriter`` (mode on, or auto when tensorboard is installed), else None.

    ``purge_step`` (a resumed run's first step): TensorBoard discards the earlier events at steps
    >= it, so the steps a killed run logged after its last checkpoint are not shown twice.
    """
    if mode == "off":
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        if mode == "on":
            raise ImportError("--tensorboard on needs the tensorboard package (pip install -e '.[llm]')") from None
        print("note: tensorboard is not installed (pip install -e '.[llm]'): metrics go to metrics.csv only",
              file=warn or sys.stderr)  # fmt: skip
        return None
    _quiet_writer_threads()
    return SummaryWriter(str(logdir), purge_step=purge_step or None)


def add_scalars(writer: Any, row: dict[str, Any], step: int, prefix: str = "") -> None:
    if writer is None:
        return
    for key, value in row.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            writer.add_scalar(prefix + key, value, step)


class Progress:
    """A tqdm bar on a terminal; elsewhere a line every ``every_s`` seconds, at each 10% and at the end."""

    def __init__(
        self, enabled: bool, *, total: int, initial: int, stream: TextIO | None = None, every_s: float = 30.0,
        tty: bool | None = None,
    ) -> None:  # fmt: skip
        stream = sys.stderr if stream is None else stream  # looked up now: it may be redirected
        self.enabled, self.total, self.stream, self.every_s = enabled, total, stream, every_s
        self.tty = (getattr(stream, "isatty", lambda: False)() if tty is None else tty) and enabled
        self.t0 = self.last_time = time.perf_counter()
        self.last_step = initial
        self.bar = None
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True, file=stream)

    def update(self, done: int, row: dict[str, Any]) -> None:
        """``done`` updates finished; ``row`` the last update's metrics."""
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.bar.set_postfix(reward=f"{row.get('reward_mean', float('nan')):.3f}", lag=f"{row.get('lag_mean', 0):.1f}", refresh=False)
            return
        now = time.perf_counter()
        tenth = max(1, self.total // 10)
        if done == self.total or now - self.last_time >= self.every_s or done // tenth > self.last_step // tenth:
            self.last_time, self.last_step = now, done
            eval_text = f"  eval {row['eval_reward']:.3f}" if "eval_reward" in row else ""
            print(
                f"step {done}/{self.total} ({100 * done / self.total:.0f}%)  reward {row.get('reward_mean', float('nan')):.3f}"
                f"{eval_text}  lag {row.get('lag_mean', 0.0):.1f}  tokens/s {row.get('tokens_per_s', 0.0):,.0f}"
                f"  {now - self.t0:.0f} s",
                file=self.stream, flush=True,
            )  # fmt: skip

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
