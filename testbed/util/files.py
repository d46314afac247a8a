"""Files written whole or not at all.

`atomic_open` opens a temporary file beside the target (same directory, so the final rename is
atomic; named ``.<name>.<random>.tmp``, so that what a killed writer leaves is recognisable and
`testbed.sweep` clears it); when the block ends without error the file is closed, gets the mode a plain
``open()`` would give and replaces the target, otherwise it is removed. A reader therefore sees the old file or the
new one, never a part.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

_UMASK: int | None = None


def file_mode() -> int:
    """0666 less the process umask: the mode a plain ``open()`` gives (mkstemp gives 0600)."""
    global _UMASK
    if _UMASK is None:
        _UMASK = os.umask(0o022)
        os.umask(_UMASK)
    return 0o666 & ~_UMASK


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A file (``mode`` "w" or "wb") to write instead of ``path``, its directory made if missing; see the
    module docstring."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, mode) as fh:
            yield fh
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # after a replace there is nothing left to remove


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)
