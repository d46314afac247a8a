"""The scorecard format shared by the promotion battery (``python -m testbed validate``) and llm_scale.

A scorecard is one JSON file per recipe spec, ``<dir>/<slug>.json``, holding the recipe's score on
a fixed battery of staleness settings (each cell scored in [0, 1]) and whether it passed::

    {"recipe": "dg", "score": 0.83, "threshold": 0.5, "passed": true, "battery": "v1", "seed_scheme": 2,
     "code": {"version": "0.1.0", "commit": "3c943f7..."}, "seeds": 1,
     "cells": [{"task": ..., "staleness": ..., "score": ..., "metric": ..., "recipe_value": ...,
                "pg_value": ..., "sync_value": ..., "status": "ok"}, ...], ...}

``machine`` (`testbed.util.provenance.machine`) says where the numbers were made: on another CPU instruction set
or torch build they differ in the last bits, which training can amplify. ``battery`` (the cells and the
score rule) and ``seed_scheme`` (`testbed.util.seeding.SCHEME`, which fixes every random stream) say which
numbers the card can be compared with: a card whose versions differ from the running code's is stale
(`stale_reasons`), and llm_scale says so. ``code`` records the package version and, where the card was
made in a git checkout, its commit.

This module knows paths, the schema, reading, writing and the pass rule; it imports nothing from
the experiment layer (runner, sweeps, tasks), so llm_scale can read scorecards without it. The battery
itself (which cells, how a cell is scored) is `testbed.validate`.
"""

from __future__ import annotations

import json
import math
import re
from importlib import metadata
from pathlib import Path
from typing import Any

from .files import atomic_write_text
from .provenance import commit, machine
from .seeding import SCHEME

DEFAULT_DIR = "results/scorecards"
# The battery's version: bumped whenever its cells, their settings or the score rule change.
BATTERY_VERSION = "v2"
# Scorecards that ship with llm_scale for the recipes README and docs/llm_scale.md run (written by the same battery).
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "llm_scale" / "scorecards"

CARD_FIELDS: dict[str, type | tuple[type, ...]] = {
    "recipe": str, "score": (int, float), "threshold": (int, float), "passed": bool, "cells": list,
}  # fmt: skip
CELL_FIELDS: dict[str, type | tuple[type, ...]] = {"task": str, "staleness": str, "score": (int, float)}


class ScorecardError(ValueError):
    """A scorecard file is missing, unreadable or does not follow the schema."""


def provenance() -> dict[str, Any]:
    """What a scorecard made now records about the code and the machine: battery version, seed scheme, package
    version and commit, and `machine()`."""
    try:
        version = metadata.version("staleness-testbed")
    except metadata.PackageNotFoundError:
        version = None
    return {"battery": BATTERY_VERSION, "seed_scheme": SCHEME, "code": {"version": version, "commit": commit()},
            "machine": machine()}


def stale_reasons(card: dict[str, Any]) -> list[str]:
    """Why ``card``'s numbers cannot be reproduced by the running code (empty when they can)."""
    reasons = []
    if card.get("battery") != BATTERY_VERSION:
        reasons.append(f"battery {card.get('battery')!r}, the code runs {BATTERY_VERSION!r}")
    if card.get("seed_scheme") != SCHEME:
        found = card.get("seed_scheme", "not recorded")
        reasons.append(f"seed scheme {found}, the code uses {SCHEME}")
    return reasons


def slug(spec: str) -> str:
    """A file-name-safe form of a recipe spec (spaces dropped; other unsafe characters become '_')."""
    return re.sub(r"[^A-Za-z0-9_.=+,-]", "_", spec.replace(" ", "")) or "_"


def path_for(spec: str, directory: str | Path = DEFAULT_DIR) -> Path:
    """Where the scorecard of ``spec`` lives under ``directory``."""
    return Path(directory) / f"{slug(spec)}.json"


def passes(score: float, threshold: float) -> bool:
    """The pass rule: the mean cell score reaches the threshold (a NaN score never passes)."""
    return bool(math.isfinite(score) and score >= threshold)


def check(card: Any, where: str = "scorecard") -> dict[str, Any]:
    """Return ``card`` if it follows the schema, else raise `ScorecardError` naming the first problem."""
    if not isinstance(card, dict):
        raise ScorecardError(f"{where}: expected a JSON object, got {type(card).__name__}")
    for key, kind in CARD_FIELDS.items():
        if key not in card:
            raise ScorecardError(f"{where}: missing field {key!r}")
        if not isinstance(card[key], kind) or (kind is not bool and isinstance(card[key], bool)):
            raise ScorecardError(f"{where}: field {key!r} has the wrong type ({type(card[key]).__name__})")
    for i, cell in enumerate(card["cells"]):
        if not isinstance(cell, dict):
            raise ScorecardError(f"{where}: cells[{i}] is not an object")
        for key, kind in CELL_FIELDS.items():
            if not isinstance(cell.get(key), kind):
                raise ScorecardError(f"{where}: cells[{i}] lacks {key!r} or has the wrong type")
    if card["passed"] != passes(float(card["score"]), float(card["threshold"])):
        raise ScorecardError(f"{where}: 'passed' disagrees with score {card['score']} and threshold {card['threshold']}")
    return card


def read(path: str | Path) -> dict[str, Any]:
    """The scorecard at ``path`` (checked against the schema); `ScorecardError` if it cannot be used."""
    path = Path(path)
    try:
        card = json.loads(path.read_text())
    except FileNotFoundError:
        raise ScorecardError(f"no scorecard at {path}") from None
    except (OSError, ValueError) as exc:
        raise ScorecardError(f"scorecard {path} is unreadable ({exc})") from None
    return check(card, str(path))


def write(card: dict[str, Any], directory: str | Path = DEFAULT_DIR) -> Path:
    """Check ``card`` and write it to ``path_for(card['recipe'], directory)`` atomically; return the path.

    The file gets the user's normal permissions (the umask applies; testbed/util/files.py).
    """
    check(card)
    path = path_for(card["recipe"], directory)
    atomic_write_text(path, json.dumps(card, indent=1, default=float))
    return path


def find(spec: str, where: str | Path | None = None) -> Path:
    """The scorecard file for ``spec``.

    ``where`` may be a ``.json`` file (used as is) or a directory. Without it: the user's own
    validation under `DEFAULT_DIR` if there is one, else the scorecard shipped with llm_scale, else
    the (missing) path under `DEFAULT_DIR`.
    """
    if where is not None:
        where = Path(where)
        return where if where.suffix == ".json" else path_for(spec, where)
    own = path_for(spec, DEFAULT_DIR)
    shipped = path_for(spec, SHIPPED_DIR)
    return own if own.is_file() or not shipped.is_file() else shipped
