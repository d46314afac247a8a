"""The errors a command line turns into an exit code and one line, shared by every package's CLI.

* `UsageError`: bad input found before any work started (a value out of range, a file that cannot be read, work
  that cannot fit the machine): exit 2 (`EXIT_USAGE`), one line ``error: ...`` on stderr naming the bad value and
  what is allowed, nothing written;
* `RunFailed`: work started and did not complete as asked: exit 1 (`EXIT_FAILED`), one short line;
* interrupted (Ctrl-C): exit 130 (`EXIT_INTERRUPTED`).

`one_line` joins a message's lines, so whatever a check raises reaches the terminal as one line.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
    """Bad input from the user, found before any work started: one line naming the bad value and what is allowed
    (exit code 2)."""


class RunFailed(Exception):
    """Work started and did not complete as asked (exit 1, one short line)."""


def one_line(message: object) -> str:
    """``message`` as a single line (line breaks joined with '; ')."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    return "; ".join(lines) or "(no message)"
