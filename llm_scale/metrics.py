"""What a run writes and shows: tidy CSV logs, TensorBoard scalars, and progress for people.

`CsvLog` appends one row per step to a CSV file (columns grow as new metrics appear; nothing is held
in memory); on resume it keeps only the rows before the resumed step, so a run killed after its last
checkpoint neither loses nor duplicates a row. `train_progress` is a tqdm bar on a terminal and a short
line every 30 seconds (and at 10% steps) otherwise, so logs are not flooded.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from typing import Any, TextIO

from testbed.util.files import atomic_open
from testbed.util.progress import Progress


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
        with atomic_open(self.path, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=self.columns)
            writer.writeheader()
            writer.writerows(rows)

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


def _step_line(done: float, total: int, elapsed: float, row: dict[str, Any]) -> str:
    eval_text = f"  eval {row['eval_reward']:.3f}" if "eval_reward" in row else ""
    return (f"step {done}/{total} ({100 * done / total:.0f}%)  reward {row.get('reward_mean', float('nan')):.3f}"
            f"{eval_text}  lag {row.get('lag_mean', 0.0):.1f}  tokens/s {row.get('tokens_per_s', 0.0):,.0f}"
            f"  {elapsed:.0f} s")  # fmt: skip


def _step_postfix(row: dict[str, Any]) -> dict[str, str]:
    return {"reward": f"{row.get('reward_mean', float('nan')):.3f}", "lag": f"{row.get('lag_mean', 0):.1f}"}


def train_progress(enabled: bool, *, total: int, initial: int, stream: TextIO | None = None) -> Progress:
    """The training loop's `Progress` (testbed/util/progress.py): a tqdm bar of steps with the reward and lag on a
    terminal; elsewhere a line (step, reward, eval, lag, tokens/s, seconds) every 30 s, at each 10% and at the end.
    Update it with ``update_to(step, row)``."""
    return Progress(total, desc="train", unit="step", initial=initial, enabled=enabled, stream=stream, tenths=True,
                    line=_step_line, postfix=_step_postfix)
