"""The project's one grid format (testbed/util/grid.py): product order, the seeds shorthand, size checks first."""

from __future__ import annotations

import pytest

from testbed.util.errors import UsageError
from testbed.util.grid import grid_keys, grid_settings


def test_product_in_file_order_with_base_in_every_run():
    got = grid_settings({"base": {"steps": 5}, "grid": {"b": [1, 2], "a": ["x", "y", "z"]}})
    assert got == [{"steps": 5, "b": b, "a": a} for b in (1, 2) for a in ("x", "y", "z")]
    assert grid_settings({"base": {"steps": 5}}) == [{"steps": 5}]


def test_seeds_shorthand_is_the_last_list_and_sizes_are_checked_before_expanding():
    asked = []
    got = grid_settings({"base": {"seeds": 3}, "grid": {"lr": [0.1, 0.2]}}, lambda n, what: asked.append((n, what)))
    assert [(s["lr"], s["seed"]) for s in got] == [(lr, s) for lr in (0.1, 0.2) for s in range(3)]
    assert grid_keys({"base": {"seeds": 3}, "grid": {"lr": [0.1, 0.2]}}) == ["lr", "seed"]
    assert grid_keys({"grid": {"seed": [4, 5], "lr": [0.1]}}) == ["seed", "lr"]  # given as a list: file order
    assert asked == [(3, "seeds = 3"), (6, "the grid")]

    def refuse(n: int, what: str) -> None:
        raise UsageError(f"{what} gives {n} runs")

    with pytest.raises(UsageError, match="the grid gives 6 runs"):
        grid_settings({"grid": {"a": [1, 2, 3], "b": [1, 2]}}, refuse)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({}, "the sweep has no runs"),
        ({"base": [1]}, r"\[base\] must be a table"),
        ({"base": {"a": 1}, "grid": {"a": [1]}}, "in both"),
        ({"grid": {"a": 1}}, "must be a non-empty list"),
        ({"base": {"seeds": 0}}, "seeds must be an integer >= 1"),
        ({"base": {"seeds": True}}, "seeds must be an integer >= 1"),
        ({"base": {"seeds": 2}, "grid": {"seed": [1]}}, "either seeds = N or seed"),
    ],
)
def test_malformed_grids_are_one_line_usage_errors(spec, message):
    with pytest.raises(UsageError, match=message):
        grid_settings(spec)
