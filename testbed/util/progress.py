"""Progress for people: a tqdm bar on a terminal, periodic plain lines anywhere else.

When the stream (default stderr) is not a terminal (a log file, a pipe, CI), a redrawn bar would write a line per
update into the log; `Progress` writes one plain line at most every ``interval`` seconds (default 30; environment
variable ``TESTBED_PROGRESS_INTERVAL``), optionally at each tenth of the total (``tenths``), when the count reaches
the total, and at `Progress.close` when the last count was not shown yet::

    runs: 3/12 (25%), 0:01:05 elapsed, about 0:03:15 left

A caller may word its own line (``line``: the count, the total, the seconds elapsed and the latest ``info`` dict
given to `Progress.update`) and the bar's postfix (``postfix``: ``info`` -> the fields shown after the bar).
"""

from __future__ import annotations

import datetime
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

Info = dict[str, Any]


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


def clock(seconds: float) -> str:
    """``seconds`` as H:MM:SS."""
    return str(datetime.timedelta(seconds=round(seconds)))


class Progress:
    """Counts finished items out of ``total``; ``enabled=False`` shows nothing (module docstring)."""

    def __init__(self, total: int, desc: str = "runs", unit: str = "run", initial: int = 0, enabled: bool = True,
                 stream: IO[str] | None = None, interval: float | None = None, tenths: bool = False,
                 line: Callable[[float, int, float, Info], str] | None = None,
                 postfix: Callable[[Info], dict[str, str]] | None = None) -> None:  # fmt: skip
        self.total, self.desc, self.n, self.initial = total, desc, initial, initial
        self.stream = sys.stderr if stream is None else stream  # looked up now: it may be redirected
        self.interval = _interval() if interval is None else interval
        self.enabled, self.tenths, self.line, self.postfix = enabled, tenths, line, postfix
        self.info: Info = {}
        self.bar: Any = None
        self.t0 = self.last = time.monotonic()
        self.shown = initial
        if enabled and interactive(self.stream):
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True, file=self.stream)

    def update(self, n: float = 1, info: Info | None = None) -> None:
        """``n`` more items finished; ``info``: what the latest one reported (for ``line`` and ``postfix``)."""
        self.update_to(self.n + n, info)

    def update_to(self, n: float, info: Info | None = None) -> None:
        """``n`` items finished in all."""
        done, self.n = n - self.n, n
        if info is not None:
            self.info = info
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.update(done)
            if self.postfix is not None and info is not None:
                self.bar.set_postfix(self.postfix(info), refresh=False)
            return
        tenth = max(1, self.total // 10)
        if (self.n >= self.total or time.monotonic() - self.last >= self.interval
                or (self.tenths and self.n // tenth > self.shown // tenth)):
            self._line()

    def _line(self) -> None:
        elapsed = time.monotonic() - self.t0
        if self.line is not None:
            text = self.line(self.n, self.total, elapsed, self.info)
        else:
            pct = f" ({100 * self.n / self.total:.0f}%)" if self.total else ""
            n = f"{self.n:.1f}" if self.n != int(self.n) else str(int(self.n))  # workers report fractions of runs
            text = f"{self.desc}: {n}/{self.total}{pct}, {clock(elapsed)} elapsed"
            done_here = self.n - self.initial
            if done_here > 0 and self.n < self.total:
                text += f", about {clock(elapsed / done_here * (self.total - self.n))} left"
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
