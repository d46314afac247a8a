"""Files written whole or not at all.

`atomic_open` (and `atomic_write_text`, `atomic_write_frame` over it: the one atomic write of the project)
opens a temporary file beside the target (same directory, so the final rename is
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
def atomic_open(path: str | Path, mode: str = "w", newline: str | None = None) -> Iterator[IO[Any]]:
    """A file (``mode`` "w" or "wb"; ``newline`` as for ``open``, e.g. "" for the csv module) to write instead of
    ``path``, its directory made if missing; see the module docstring. Anything that writes to a file object writes
    atomically through it: ``torch.save(obj, fh)``, ``fig.savefig(fh, format="png")``, a ``csv.writer``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    tmp = Path(name)
    try:
        with os.fdopen(fd, mode, newline=newline) as fh:
            yield fh
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # after a replace there is nothing left to remove


def atomic_write_text(path: str | Path, text: str) -> None:
    with atomic_open(path) as fh:
        fh.write(text)


def atomic_write_frame(df: Any, path: str | Path) -> None:
    """Write the pandas DataFrame ``df`` to ``path`` without its index: Parquet for a ``.parquet`` path, else CSV."""
    path = Path(path)
    if path.suffix == ".parquet":
        with atomic_open(path, "wb") as fh:
            df.to_parquet(fh, index=False)
    else:
        atomic_write_text(path, df.to_csv(index=False))


class DirectoryBusy(ValueError):
    """Another process holds the directory's writer lock (`one_writer`); the message is one line naming its pid."""


@contextlib.contextmanager
def one_writer(directory: str | Path, hint: str = "choose another --out", remove: bool = False) -> Iterator[None]:
    """Hold ``DIRECTORY/.lock`` (an exclusive ``flock``) while writing to ``directory``: one writer per directory.
    The lock dies with the process (a killed writer frees it); the file holds the writer's pid. A second writer
    gets `DirectoryBusy`. ``remove``: delete the lock file when done (still holding it; a writer that locked a file
    since removed sees that the path no longer names it and refuses). Without ``fcntl`` (not POSIX) nothing is
    locked."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    directory = Path(directory)
    fh = open(directory / ".lock", "a+")  # noqa: SIM115 (held for the duration)
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not os.path.samestat(os.fstat(fh.fileno()), os.stat(directory / ".lock")):
                raise OSError  # removed by the writer that held it, now done: the directory has a newer lock file
        except OSError:
            fh.seek(0)
            pid = fh.read().strip() or "?"
            raise DirectoryBusy(f"another process (pid {pid}) is writing to {str(directory)!r}; wait for it to finish "
                                f"or {hint}") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        try:
            yield
        finally:
            if remove:
                (directory / ".lock").unlink(missing_ok=True)
    finally:
        fh.close()
