"""A loop's checkpoint file: the state dict of a `testbed.runner.Runner` stopped between two steps.

The file holds only tensors and plain containers (dicts, lists, tuples, str, int, float, bool, None): the
runs' ids and resolved configs, parameters, optimizer and stabilizer state (their ``state_dict()``), the queued
chunks with their random streams as generator-state tensors, the logged rows and per-step records, and the
loop's counters. It is written atomically and read with ``torch.load(weights_only=True)``, which builds no
other Python object: a file that holds one (a loop pickled whole by an older version, or a crafted pickle whose
unpickling would run code) is refused in one line and nothing in it runs.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path
from typing import Any

import torch

from testbed.util.files import atomic_open

FORMAT = 2  # 1: the whole Runner pickled (not read: unpickling objects can run code)
UNREADABLE = "it cannot be read (damaged, or saved by a version that wrote another format)"
_OLD_RUNNER = "testbed.runner.Runner"


class CheckpointError(ValueError):
    """A checkpoint file that cannot resume a loop; ``reason`` says why in a few words, str() is one line that
    names the file and what to do."""

    def __init__(self, path: str | Path, reason: str) -> None:
        self.path, self.reason = Path(path), reason
        super().__init__(f"cannot resume from {str(path)!r}: {reason}; delete the file to train its runs afresh")


def write(path: str | Path, state: dict[str, Any]) -> None:
    """Write ``state`` (tensors and plain containers) to ``path`` atomically."""
    with atomic_open(path, "wb") as fh:
        torch.save({"format": FORMAT, **state}, fh)


def read(path: str | Path, run_ids: list[str]) -> dict[str, Any]:
    """The state saved at ``path`` for the loop of runs ``run_ids`` (in order), loaded with ``weights_only=True``;
    `CheckpointError` for a file that is damaged, of another format, of other runs, or holds a pickled object."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))  # torch names the first object it refuses
        if found is None:
            raise CheckpointError(path, UNREADABLE) from None
        reason = ("it is a loop pickled whole (an older checkpoint format), which is not loaded: unpickling Python "
                  "objects can run code" if found.group(1) == _OLD_RUNNER else
                  f"it holds a pickled Python object ({found.group(1)}), not only tensors and plain values; it is "
                  "not loaded: unpickling Python objects can run code")
        raise CheckpointError(path, reason) from None
    except (OSError, EOFError, RuntimeError, ValueError, KeyError):
        raise CheckpointError(path, UNREADABLE) from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(path, UNREADABLE)
    if state["format"] != FORMAT:
        raise CheckpointError(path, f"it is in checkpoint format {state['format']!r}; this version reads format "
                                    f"{FORMAT}")
    if list(state.get("run_ids", ())) != list(run_ids):
        raise CheckpointError(path, "it holds other runs (another loop's, or configs that have changed)")
    return state
