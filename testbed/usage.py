"""Command-line plumbing shared by ``python -m testbed`` and ``python -m figures``.

Exit codes and what the user sees (the errors and codes are testbed/util/errors.py, shared with llm_scale):

* usage error (bad input, work that cannot fit the machine, an output directory that cannot be
  written): exit 2, one line ``error: ...`` on stderr naming the bad value and what is allowed,
  nothing written;
* failure after work started (a run raised an exception, a worker process died, the disk filled
  up): exit 1 and a short ``error: ...`` line; tracebacks go to a log file, never to the terminal;
* interrupted (Ctrl-C): exit 130; finished runs are saved.

Argument types (`integer`, `number`, `directory`) read values with the project's one spec grammar
(testbed/stabilizers/spec.py), so ``--steps 1e6`` and ``steps = 1e6`` in a sweep file mean the same.
This module imports nothing heavy: it is safe to use before torch is loaded.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from testbed.util.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, RunFailed, UsageError, one_line

__all__ = ["directory", "guarded", "integer", "number", "write_log"]


def _grammar_value(text: str) -> Any:
    from testbed.stabilizers.spec import SpecError, parse_value

    try:
        return parse_value(text)
    except SpecError:
        return text


def integer(lo: int | None = None, hi: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi] (``1e6`` accepted, as in sweep files)."""
    allowed = "an integer" + (f" >= {lo}" if lo is not None and hi is None else "") + (
        f" in [{lo}, {hi}]" if lo is not None and hi is not None else "")

    def convert(text: str) -> int:
        value = _grammar_value(text)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or (lo is not None and value < lo) or (
                hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
        return value

    convert.__name__ = "integer"
    return convert


def number(lo: float | None = None, hi: float | None = None, *, open_lo: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] ((lo, hi] with ``open_lo``)."""
    if lo is not None and hi is not None:
        allowed = f"a number in {'(' if open_lo else '['}{lo}, {hi}]"
    elif lo is not None:
        allowed = f"a finite number {'>' if open_lo else '>='} {lo}"
    else:
        allowed = "a finite number"

    def convert(text: str) -> float:
        value = _grammar_value(text)
        ok = not isinstance(value, bool) and isinstance(value, int | float)
        if ok:
            value = float(value)
            ok = math.isfinite(value) and (lo is None or (value > lo if open_lo else value >= lo)) and (
                hi is None or value <= hi)
        if not ok:
            raise argparse.ArgumentTypeError(f"must be {allowed}, got {text!r}")
        return value

    convert.__name__ = "number"
    return convert


def directory(text: str) -> str:
    """An argparse type: a directory path (not empty, no NUL character; existence is checked later)."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must be a directory path, got {text!r}")
    if "\0" in text:
        raise argparse.ArgumentTypeError(f"must be a directory path without NUL characters, got {text!r}")
    return text


def write_log(text: str, directory: str | Path | None = None, name: str = "error") -> Path:
    """Write ``text`` to ``<directory>/<name>-<time>.log`` (the temporary directory when ``directory`` is
    missing or not writable); return the path."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for base in ([Path(directory)] if directory else []) + [Path(tempfile.gettempdir())]:
        try:
            if base.is_dir():
                path = base / f"{name}-{stamp}-{os.getpid()}.log"
                path.write_text(text)
                return path
        except OSError:
            continue
    return Path(os.devnull)


def guarded(command: Callable[[], int], log_dir: Callable[[], str | Path | None] = lambda: None) -> int:
    """Run ``command`` and turn what it raises into an exit code and one line on stderr (module docstring)."""
    try:
        from testbed.stabilizers.spec import SpecError  # loads torch, the slowest part of starting
    except KeyboardInterrupt:
        print("interrupted while starting: nothing was run", file=sys.stderr)
        return EXIT_INTERRUPTED

    try:
        return command()
    except (UsageError, SpecError) as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except RunFailed as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted: finished runs are saved; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except OSError as exc:  # the disk filled up, a file vanished, ... while working
        where = f" ({exc.filename})" if exc.filename else ""
        print(f"error: {exc.strerror or one_line(exc)}{where}; finished runs are saved; fix this and rerun the same "
              "command to resume", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as exc:  # checks of the library code below the command line: still bad input
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        log = write_log(traceback.format_exc(), _safe(log_dir))
        print(f"error: internal error ({type(exc).__name__}: {one_line(exc)}); traceback in {log}", file=sys.stderr)
        return EXIT_FAILED


def _safe(get: Callable[[], str | Path | None]) -> str | Path | None:
    try:
        return get()
    except Exception:
        return None
