"""The grid format of the project's sweep files: settings shared by every run and lists whose product is the sweep.

A sweep file (TOML or YAML, read by `testbed.util.settings_file.read_settings`) names its runs with two tables::

    [base]                  # settings shared by every run
    steps = 3000

    [grid]                  # lists: the sweep is their cartesian product, in file order
    recipe = ["pg", "dg"]
    seed = [0, 1, 2]        # or, in [base] or [grid]: seeds = 3 (seeds 0, 1, 2, as the grid's last list)

A key is in [base] or in [grid], not both; every [grid] value is a non-empty list; ``seeds = N`` (an integer >= 1)
and ``seed`` exclude each other. `grid_settings` is that format's one expansion: the testbed's sweeps
(testbed/sweep_file.py) and the LLM trainer's (llm_scale/sweep.py) read the same files the same way; what a
setting may be is the caller's to check (a `testbed.config.RunConfig` field or a task option; a
`llm_scale.config.TrainConfig` field).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from testbed.util.errors import UsageError


def _tables(spec: dict[str, Any], check_count: Callable[[int, str], None] | None = None
            ) -> tuple[dict[str, Any], dict[str, list[Any]]]:
    """``spec``'s [base] and [grid], checked, with ``seeds = N`` turned into the grid's last list ``seed``."""
    base, grid = spec.get("base"), spec.get("grid")
    for name, table in (("base", base), ("grid", grid)):
        if table is not None and not isinstance(table, dict):
            raise UsageError(f"[{name}] must be a table (mapping of settings), got {table!r}")
    base, grid = dict(base or {}), dict(grid or {})
    if not base and not grid:
        raise UsageError("the sweep has no runs: give at least one setting in [base] or [grid]")
    both = sorted(set(base) & set(grid))
    if both:
        raise UsageError(f"key(s) {', '.join(map(repr, both))} in both [base] and [grid]; give each once")
    if "seeds" in base or "seeds" in grid:
        if "seed" in grid or "seed" in base:
            raise UsageError("give either seeds = N or seed, not both")
        n = base.pop("seeds", None) if "seeds" in base else grid.pop("seeds")
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise UsageError(f"seeds must be an integer >= 1, got {n!r}")
        if check_count is not None:
            check_count(n, f"seeds = {n}")
        grid["seed"] = list(range(n))
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"grid key {key!r} must be a non-empty list, got {values!r}")
    return base, grid


def grid_keys(spec: dict[str, Any]) -> list[str]:
    """The settings ``spec``'s grid varies, in product order (``seed`` last when given as ``seeds = N``); one-line
    `UsageError` for a malformed grid."""
    return list(_tables(spec)[1])


def grid_settings(spec: dict[str, Any], check_count: Callable[[int, str], None] | None = None) -> list[dict[str, Any]]:
    """The settings of every run of ``spec``'s [base] and [grid] (module docstring), in product order (the last list
    varies fastest); one-line `UsageError` for a malformed grid. ``check_count(n, what)``, where given, is asked first
    about ``seeds = n`` and about the grid's size (e.g. to refuse a grid that cannot fit in memory)."""
    base, grid = _tables(spec, check_count)
    keys = list(grid)
    if check_count is not None:
        check_count(math.prod(len(grid[k]) for k in keys), "the grid")
    return [{**base, **dict(zip(keys, combo, strict=True))} for combo in itertools.product(*(grid[k] for k in keys))]
