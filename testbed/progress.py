"""Progress for people: a tqdm bar on a terminal, periodic plain lines anywhere else.

When stderr is not a terminal (a log file, a pipe, CI), a redrawn bar would write a line per update
into the log; `Progress` writes one plain line at most every ``interval`` seconds (default 30;
environment variable ``TESTBED_PROGRESS_INTERVAL``) and one when it closes::

    runs: 3/12 (25%), 0:01:05 elapsed, about 0:03:15 left
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from typing import IO, Any


def interactive(stream: IO[str] | None = None) -> bool:
    """True when ``stream`` (default stderr) is a terminal."""
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _interval() -> float:
    try:
        return max(0.0, float(os.environ.get("TESTBED_PROGRESS_INTERVAL", "30")))
    except ValueError:
        return 30.0


def _clock(seconds: float) -> str:
    return str(datetime.timedelta(seconds=round(seconds)))


class Progress:
    """Counts finished items out of ``total``; ``enabled=False`` shows nothing."""

    def __init__(self, total: int, desc: str = "runs", unit: str = "run", initial: int = 0, enabled: bool = True,
                 stream: IO[str] | None = None, interval: float | None = None) -> None:
        self.total, self.desc, self.n, self.initial = total, desc, initial, initial
        self.stream = sys.stderr if stream is None else stream
        self.interval = _interval() if interval is None else interval
        self.enabled = enabled
        self.bar: Any = None
        self.t0 = self.last = time.monotonic()
        self.shown = initial
        if enabled and interactive(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, file=self.stream)

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.enabled and time.monotonic() - self.last >= self.interval:
            self._line()

    def _line(self) -> None:
        elapsed = time.monotonic() - self.t0
        pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
        n = f"{self.n:.1f}" if self.n != int(self.n) else str(int(self.n))  # workers report fractions of runs
        text = f"{self.desc}: {n}/{self.total}{pct}, {_clock(elapsed)} elapsed"
        done_here = self.n - self.initial
        if done_here > 0 and self.n < self.total:
            text += f", about {_clock(elapsed / done_here * (self.total - self.n))} left"
        print(text, file=self.stream, flush=True)
        self.last, self.shown = time.monotonic(), self.n

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled and self.n != self.shown:
            self._line()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
