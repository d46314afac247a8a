"""Promotion battery: ``python -m testbed validate RECIPE`` scores a recipe on a fixed set of testbed runs.

(Work in progress: the battery lands once the runner is in place.)
"""

from __future__ import annotations

import re
from pathlib import Path

DEFAULT_DIR = "results/scorecards"


def slug(spec: str) -> str:
    """A file-name-safe form of a recipe spec (spaces dropped; other unsafe characters become '_')."""
    return re.sub(r"[^A-Za-z0-9_.=+,-]", "_", spec.replace(" ", "")) or "_"


def scorecard_path(spec: str, directory: str | Path = DEFAULT_DIR) -> Path:
    """Where the scorecard of ``spec`` lives under ``directory``."""
    return Path(directory) / f"{slug(spec)}.json"


def cli(argv: list[str] | None = None) -> int:
    """``python -m testbed validate RECIPE``: not yet available (the battery needs the runner)."""
    del argv
    print("error: the validation battery is not implemented yet", file=__import__("sys").stderr)
    return 2
