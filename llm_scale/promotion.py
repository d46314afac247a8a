"""Promotion: show the testbed scorecard of the recipe a run uses, and warn when it is missing or failed.

Scorecards are written by ``python -m testbed validate RECIPE`` in the format of `testbed.util.scorecard`
(``results/scorecards/<slug>.json`` by default). The scorecards of the recipes README and docs/llm_scale.md run ship
with llm_scale (``llm_scale/scorecards``) and are used when the user has not validated the recipe. A
scorecard made with another battery version or seed scheme than the running code's is reported stale.
"""

from __future__ import annotations

from testbed.util import scorecard


def report(spec: str, where: str | None = None) -> tuple[bool, str]:
    """(passed, text): the scorecard's verdict and a short table, or a warning when there is none."""
    path = scorecard.find(spec, where)
    if not path.is_file():
        return False, (
            f"WARNING: no testbed scorecard for recipe {spec!r} (looked for {path}). "
            f"Validate it first: python -m testbed validate {spec!r}"
        )
    try:
        card = scorecard.read(path)
    except scorecard.ScorecardError as exc:
        return False, f"WARNING: {exc}; re-run python -m testbed validate {spec!r}"
    passed, score = bool(card["passed"]), float(card["score"])
    shipped = " (shipped with llm_scale)" if path.parent.resolve() == scorecard.SHIPPED_DIR else ""
    lines = [
        f"testbed scorecard for {spec!r} ({path}{shipped}): score {score:.2f} (pass >= {card['threshold']}): "
        + ("PASSED" if passed else "FAILED")
    ]
    for cell in card["cells"]:
        lines.append(
            f"  {cell['task']:<20} {cell['staleness']:<10} score {float(cell['score']):.2f}"
            f"  ({cell.get('metric', '')}: recipe {cell.get('recipe_value', float('nan')):.3f},"
            f" pg {cell.get('pg_value', float('nan')):.3f}, sync {cell.get('sync_value', float('nan')):.3f})"
        )
    if card["recipe"] != spec:
        lines.append(f"  note: the scorecard was written for {card['recipe']!r}")
    if not passed:
        lines.insert(0, f"WARNING: recipe {spec!r} FAILED its testbed validation; promoting it anyway.")
    stale = scorecard.stale_reasons(card)
    if stale:
        lines.insert(0, f"WARNING: the scorecard for {spec!r} is stale ({'; '.join(stale)}): its numbers are not this "
                        f"code's; re-run python -m testbed validate {spec!r}")  # fmt: skip
    return passed, "\n".join(lines)
