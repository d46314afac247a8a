"""One registry mapping names to components and recipes, and `build`, which resolves a spec.

Specs follow the project's one grammar (`spec.py`): terms ``name(key=value, ...)`` joined by ``+``.

Every registered surrogate, advantage and gradient transform is also a recipe of its own name; a
named recipe (e.g. ``vcpo``) bundles several components. A term's components are *core* (what the
name is about) or *defaults* (used only if no other term provides that kind): ``"dg+gac"`` is the
dg surrogate with the gac projection, while ``"gac"`` alone falls back to the default advantage and
the pg surrogate. Two core surrogates (or advantages) in one spec is an error. Inside a bundled
recipe a parameter goes to the one component that has it; ``component.key=value`` disambiguates.
"""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from .base import Advantage, GradientTransform, Surrogate
from .recipe import Recipe
from .spec import SpecError, coerce, parse_spec

ADVANTAGES: dict[str, type[Advantage]] = {}
SURROGATES: dict[str, type[Surrogate]] = {}
TRANSFORMS: dict[str, type[GradientTransform]] = {}
_KINDS: dict[str, dict[str, Any]] = {"advantage": ADVANTAGES, "surrogate": SURROGATES, "transform": TRANSFORMS}

DEFAULT_ADVANTAGE = "auto"
DEFAULT_SURROGATE = "pg"


@dataclass(frozen=True)
class Part:
    """One component of a recipe: its kind, registered name, fixed parameters, and whether it is core."""

    kind: str
    name: str
    params: dict[str, Any] = field(default_factory=dict)
    core: bool = True


NAMED_RECIPES: dict[str, tuple[Part, ...]] = {}
RECIPE_DOCS: dict[str, str] = {}


def register(cls: type) -> type:
    """Class decorator: register an Advantage, Surrogate or GradientTransform under ``cls.name``."""
    for kind, base in (("advantage", Advantage), ("surrogate", Surrogate), ("transform", GradientTransform)):
        if issubclass(cls, base):
            table = _KINDS[kind]
            if cls.name in table or cls.name in NAMED_RECIPES:
                raise ValueError(f"name {cls.name!r} is already registered")
            table[cls.name] = cls
            return cls
    raise TypeError(f"{cls!r} is not an Advantage, Surrogate or GradientTransform")


def register_recipe(name: str, parts: tuple[Part, ...], doc: str) -> None:
    """Register a bundled recipe (a tuple of parts) under ``name``."""
    if name in NAMED_RECIPES or any(name in t for t in _KINDS.values()):
        raise ValueError(f"name {name!r} is already registered")
    NAMED_RECIPES[name] = parts
    RECIPE_DOCS[name] = doc


def available() -> list[str]:
    """All names a spec term may use: named recipes, surrogates, advantages and transforms."""
    names = set(NAMED_RECIPES) | set(SURROGATES) | set(ADVANTAGES) | set(TRANSFORMS)
    return sorted(names)


def _parts_of(name: str) -> tuple[Part, ...]:
    if name in NAMED_RECIPES:
        return NAMED_RECIPES[name]
    for kind, table in _KINDS.items():
        if name in table:
            return (Part(kind, name),)
    raise SpecError(f"unknown recipe or component {name!r}; allowed: {', '.join(available())}")


def _allowed_params(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.init and not f.name.startswith("_")]


def _route(name: str, parts: tuple[Part, ...], params: dict[str, Any]) -> tuple[Part, ...]:
    """Attach user parameters of one term to the parts that own them."""
    extra: list[dict[str, Any]] = [dict(p.params) for p in parts]
    classes = [_KINDS[p.kind][p.name] for p in parts]
    for key, value in params.items():
        target, _, leaf = key.rpartition(".")
        owners = [
            i
            for i, (p, cls) in enumerate(zip(parts, classes, strict=True))
            if leaf in _allowed_params(cls) and (not target or target == p.name)
        ]
        if not owners:
            allowed = sorted({f"{p.name}.{a}" if len(parts) > 1 else a for p, c in zip(parts, classes, strict=True) for a in _allowed_params(c)})
            raise ValueError(f"unknown parameter {key!r} for {name!r}; allowed: {', '.join(allowed) or '(none)'}")
        if len(owners) > 1:
            names = ", ".join(f"{parts[i].name}.{leaf}" for i in owners)
            raise ValueError(f"parameter {key!r} of {name!r} is ambiguous; write one of: {names}")
        extra[owners[0]][leaf] = value
    return tuple(Part(p.kind, p.name, e, p.core) for p, e in zip(parts, extra, strict=True))


def _instantiate(part: Part) -> Any:
    cls = _KINDS[part.kind][part.name]
    allowed = {f.name: f for f in fields(cls) if f.init}
    hints = typing.get_type_hints(cls)
    kwargs = {key: coerce(value, hints.get(key, Any), f"{part.name}: {key}") for key, value in part.params.items()}
    missing = [k for k, f in allowed.items() if f.default is MISSING and f.default_factory is MISSING and k not in kwargs]
    if missing:
        raise SpecError(f"{part.name!r} needs parameter(s) {', '.join(missing)}")
    return cls(**kwargs)


def build(spec: str) -> Recipe:
    """Resolve a spec such as ``"dg"``, ``"tis(c=2)"`` or ``"dg+gac(t_low=0.1)"`` into a `Recipe`.

    Raises ValueError naming the unknown name or parameter and listing what is allowed.
    """
    chosen: dict[str, list[Part]] = {"advantage": [], "surrogate": []}
    defaults: dict[str, Part] = {}
    transforms: list[Part] = []
    for name, params in parse_spec(spec):
        for part in _route(name, _parts_of(name), params):
            if part.kind == "transform":
                if part.core or not any(t.name == part.name for t in transforms):
                    if any(t.name == part.name for t in transforms):
                        raise ValueError(f"gradient transform {part.name!r} appears twice in {spec!r}")
                    transforms.append(part)
            elif part.core:
                chosen[part.kind].append(part)
            else:
                defaults.setdefault(part.kind, part)
    picked: dict[str, Part] = {}
    fallback = {"advantage": Part("advantage", DEFAULT_ADVANTAGE), "surrogate": Part("surrogate", DEFAULT_SURROGATE)}
    for kind, parts in chosen.items():
        if len(parts) > 1:
            raise ValueError(f"{spec!r} sets two {kind}s ({parts[0].name} and {parts[1].name}); a recipe has one")
        picked[kind] = parts[0] if parts else defaults.get(kind, fallback[kind])
    return Recipe(
        spec,
        advantage=_instantiate(picked["advantage"]),
        surrogate=_instantiate(picked["surrogate"]),
        transforms=[_instantiate(t) for t in transforms],
    )
