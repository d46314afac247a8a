"""Promotion: show the testbed scorecard of the recipe a run uses, and warn when it is missing or failed.

Scorecards are written by ``python -m testbed validate RECIPE`` (testbed/validate.py) as
``<dir>/<slug>.json``; the default directory is ``results/scorecards``.
"""

from __future__ import annotations

import json
from pathlib import Path

from testbed.validate import DEFAULT_DIR, scorecard_path


def find(spec: str, where: str | None = None) -> Path:
    """The scorecard file for ``spec``: ``where`` itself if it is a file, else inside ``where`` (or the default dir)."""
    if where is not None and Path(where).suffix == ".json":
        return Path(where)
    return scorecard_path(spec, where or DEFAULT_DIR)


def report(spec: str, where: str | None = None) -> tuple[bool, str]:
    """(passed, text): the scorecard's verdict and a short table, or a warning when there is none."""
    path = find(spec, where)
    if not path.is_file():
        return False, (
            f"WARNING: no testbed scorecard for recipe {spec!r} (looked for {path}). "
            f"Validate it first: python -m testbed validate {spec!r}"
        )
    try:
        card = json.loads(path.read_text())
        cells, passed, score = card["cells"], bool(card["passed"]), float(card["score"])
    except (ValueError, KeyError, TypeError) as exc:
        return False, f"WARNING: scorecard {path} is unreadable ({exc}); re-run python -m testbed validate {spec!r}"
    lines = [
        f"testbed scorecard for {spec!r} ({path}): score {score:.2f} (pass >= {card.get('threshold', 0.5)}): "
        + ("PASSED" if passed else "FAILED")
    ]
    for cell in cells:
        lines.append(
            f"  {cell['task']:<20} {cell['staleness']:<10} score {float(cell['score']):.2f}"
            f"  ({cell.get('metric', '')}: recipe {cell.get('recipe_value', float('nan')):.3f},"
            f" pg {cell.get('pg_value', float('nan')):.3f}, sync {cell.get('sync_value', float('nan')):.3f})"
        )
    if card.get("recipe") not in (None, spec):
        lines.append(f"  note: the scorecard was written for {card['recipe']!r}")
    if not passed:
        lines.insert(0, f"WARNING: recipe {spec!r} FAILED its testbed validation; promoting it anyway.")
    return passed, "\n".join(lines)
