"""Evidence: the numbers an experiment's claims are judged on, as a typed record.

Each experiment (figures/experiments/<experiment>/evidence.py) defines ``Evidence``, a dataclass derived from
`Evidence` here whose fields are the numbers its judges read (per-seed values by cell, events, the grid in words),
reads it from the runs, and judges it in its claims' records (judges.py, figures/records.py). Figure modules
only draw it. On disk (``<out>/data/<figure>.json``) it is plain JSON (`to_json`), read back with
`from_json`, which refuses fields the record does not have, so a data file from other code is one clear
error, not a silently different report.

Cells. A per-cell dict is keyed by the cell's parts, a `Cell` tuple such as ``("pg", "fixed:100")`` (recipe,
delay); `KEYED` names those fields (``"theory.cases"``: a dict inside a field). On disk and in the report a cell
is its `label`, the parts joined by ``|`` (``"pg|fixed:100"``); `from_json` parses the labels back once.

Common fields: ``grid`` (the setting in words), ``seeds`` (every seed of the design, aligned with the
per-seed lists), ``sequential`` (per claim id: where its sequential design stopped, figures/staging.py)
and ``design`` (the design, testbed/util/sequential.py). `PER_SEED` names the fields whose dicts hold one value
per seed per cell; `SEEDED_EVENTS` those that are lists of events carrying a ``seed``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np

E = TypeVar("E", bound="Evidence")
Cell = tuple[str, ...]
SEP = "|"


def cell_key(*parts: object) -> Cell:
    """A cell's key from its parts (each as text: ``cell_key("pg", 1)`` is ``("pg", "1")``)."""
    return tuple(str(p) for p in parts)


def label(key: Cell | str) -> str:
    """A cell as written on disk and in the report: its parts joined by ``|`` (a label stays as it is)."""
    return key if isinstance(key, str) else SEP.join(key)


def parse_label(text: str) -> Cell:
    """The cell a `label` names."""
    return tuple(text.split(SEP))


@dataclass
class Evidence:
    """Base of every experiment's evidence (module docstring)."""

    PER_SEED: ClassVar[tuple[str, ...]] = ()  # dict fields: cell -> one value per seed (or dicts of such lists)
    SEEDED_EVENTS: ClassVar[tuple[str, ...]] = ()  # list fields: events, each a dict with a "seed"
    KEYED: ClassVar[tuple[str, ...]] = ()  # dict fields keyed by `Cell`s ("a.b": the dict under key b of field a)

    grid: str = ""
    seeds: list[int] = field(default_factory=list)
    sequential: dict[str, dict[str, Any]] = field(default_factory=dict)
    design: dict[str, Any] | None = None

    def __bool__(self) -> bool:
        """False for the empty record of an experiment that has not run (every field at its default)."""
        empty = type(self)()
        return not all(_same(getattr(self, f.name), getattr(empty, f.name)) for f in dataclasses.fields(self))

    def to_json(self) -> dict[str, Any]:
        return to_jsonable(dataclasses.asdict(self))

    @classmethod
    def from_json(cls: type[E], data: Mapping[str, Any]) -> E:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{cls.__module__}.{cls.__qualname__} has no field(s) {', '.join(unknown)}")
        fields = dict(data)
        for path in cls.KEYED:
            name, *inner = path.split(".")
            fields[name] = _parse_keys(fields.get(name), inner)
        return cls(**fields)

    def truncated(self: E, n: int) -> E:
        """The evidence as it was after the first ``n`` seeds: per-seed lists (`PER_SEED`) cut to n, events
        (`SEEDED_EVENTS`) kept only for those seeds."""
        if n >= len(self.seeds):
            return self
        keep, total = set(self.seeds[:n]), len(self.seeds)
        changes: dict[str, Any] = {"seeds": list(self.seeds[:n])}
        for name in self.PER_SEED:
            value = getattr(self, name)
            if isinstance(value, dict):
                changes[name] = {k: _cut(v, n, total) for k, v in value.items()}
        for name in self.SEEDED_EVENTS:
            changes[name] = [x for x in getattr(self, name) if not isinstance(x, dict) or x.get("seed") in keep]
        return dataclasses.replace(self, **changes)


def _parse_keys(value: Any, inner: list[str]) -> Any:
    """``value`` with the labels keying the dict at ``inner`` (a path of keys, [] for ``value`` itself) parsed into
    `Cell`s; anything else as it is."""
    if not isinstance(value, dict):
        return value
    if inner:
        return {**value, inner[0]: _parse_keys(value.get(inner[0]), inner[1:])} if inner[0] in value else value
    return {parse_label(k) if isinstance(k, str) else k: v for k, v in value.items()}


def _same(value: Any, default: Any) -> bool:
    """``value`` is a field's default: NaN for a NaN default, empty for an empty container (no element-wise
    comparison of the data)."""
    if isinstance(default, float) and math.isnan(default):
        return isinstance(value, float) and math.isnan(value)
    if isinstance(default, dict | list):
        return isinstance(value, dict | list) and not value
    return value == default


def _cut(v: Any, n: int, total: int) -> Any:
    if isinstance(v, dict):
        return {k: _cut(x, n, total) for k, x in v.items()}
    if isinstance(v, list | tuple | np.ndarray) and len(v) == total:
        return list(v)[:n]
    return v


def to_jsonable(obj: Any) -> Any:
    """Plain JSON values: numpy scalars and arrays as Python numbers and lists, non-finite floats as None, `Cell`
    keys as their `label`."""
    if isinstance(obj, dict):
        return {label(k) if isinstance(k, tuple) else str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.floating | float):
        f = float(obj)
        return f if math.isfinite(f) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj
