"""One registry mapping names to components and recipes, and `build`, which resolves a spec.

Specs follow the project's one grammar (`spec.py`): terms ``name(key=value, ...)`` joined by ``+``.

Every registered surrogate, advantage and gradient transform is also a recipe of its own name; a
named recipe (e.g. ``vcpo``) bundles several components. A term's components are *core* (what the
name is about) or *defaults* (used only if no other term provides that kind): ``"dg+gac"`` is the
dg surrogate with the gac projection, while ``"gac"`` alone falls back to the default advantage and
the pg surrogate. Two core surrogates (or advantages) in one spec is an error. Inside a bundled
recipe a parameter goes to the one component that has it; ``component.key=value`` disambiguates.

A user's own component lives in the user's module: `import_modules` imports it (the CLIs' ``--import
MODULE``) and lists it in the environment variable ``TESTBED_IMPORTS`` (os.pathsep-separated), so every
process started from this one (spawned sweep workers, a study's trainers, a plugin's workers) imports it
again when it meets a name it does not know. A spec term may also name the class itself,
``module:Name`` (``mystab:SoftIS(c=2)+gac``): the module is imported and the term resolved to the
class's registered name (the class is registered if it was not). docs/own_stabilizer.md shows both.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from testbed.util.workers import IMPORTS_ENV

from .base import Advantage, GradientTransform, Surrogate
from .recipe import Recipe
from .spec import SpecError, coerce, parse_spec

ADVANTAGES: dict[str, type[Advantage]] = {}
SURROGATES: dict[str, type[Surrogate]] = {}
TRANSFORMS: dict[str, type[GradientTransform]] = {}
_KINDS: dict[str, dict[str, Any]] = {"advantage": ADVANTAGES, "surrogate": SURROGATES, "transform": TRANSFORMS}

OWN_HINT = ("your own component: --import MODULE (a module that registers it with "
            "testbed.stabilizers.registry.register) or a 'module:ClassName' term; see docs/own_stabilizer.md")
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
            old = table.get(cls.name)
            if old is not None and (old.__module__, old.__qualname__) == (cls.__module__, cls.__qualname__):
                table[cls.name] = cls  # the same class imported again (a module reloaded, or by path and by name)
                return cls
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


def _import_one(name: str, how: str = "") -> None:
    """Import a user's module by dotted name (the working directory first on the path) or by ``.py`` path;
    ``how`` names the request in errors (default ``--import NAME``)."""
    how = how or f"--import {name!r}"
    try:
        if name.endswith(".py") or os.sep in name:
            path = os.path.abspath(name)
            if not os.path.isfile(path):
                raise SpecError(f"{how}: no such file")
            stem = os.path.splitext(os.path.basename(path))[0]
            if getattr(sys.modules.get(stem), "__file__", None) == path:
                return
            spec = importlib.util.spec_from_file_location(stem, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[stem] = module
            spec.loader.exec_module(module)
            return
        if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", name):
            raise SpecError(f"{how}: not a module name (a.b.c) or a path to a .py file")
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.insert(0, os.getcwd())
        importlib.import_module(name)
    except SpecError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and (name == exc.name or name.startswith(exc.name + ".")):
            raise SpecError(f"{how}: no module named {exc.name!r} in the working directory "
                            f"{os.getcwd()!r} or on the Python path") from None
        raise SpecError(f"{how}: importing it failed: ModuleNotFoundError: {exc}") from None
    except Exception as exc:  # the user's module raised while importing
        message = " ".join(str(exc).split())
        raise SpecError(f"{how}: importing it failed: {type(exc).__name__}: {message}") from None


def split_import_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """A command line without its ``--import MODULE`` / ``--import=MODULE`` options, and the modules they name
    (the CLIs' one way to take a user's module)."""
    rest, modules = [], []
    it = iter(argv)
    for arg in it:
        if arg == "--import" or arg.startswith("--import="):
            module = arg.partition("=")[2] if "=" in arg else next(it, None)
            if module is None or not module.strip() or module.startswith("-"):
                raise SpecError("--import needs a module name or a path to a .py file, e.g. --import mystab")
            modules.append(module)
        else:
            rest.append(arg)
    return rest, modules


_ENV_DONE: set[str] = set()  # the modules of TESTBED_IMPORTS this process imported


def imported_modules() -> list[str]:
    """The user modules this process (or the process that started it) imported, from ``TESTBED_IMPORTS``."""
    return [n for n in os.environ.get(IMPORTS_ENV, "").split(os.pathsep) if n]


def import_modules(names: list[str] | tuple[str, ...]) -> None:
    """Import the user's modules (registering their components) and list them in ``TESTBED_IMPORTS`` so that
    processes started from this one import them too. A module that cannot be imported -> SpecError, one line."""
    for name in names:
        _import_one(name)
        _ENV_DONE.add(name)
    known = imported_modules()
    os.environ[IMPORTS_ENV] = os.pathsep.join(dict.fromkeys([*known, *names]))


def _import_from_env() -> bool:
    """Import the modules ``TESTBED_IMPORTS`` lists that this process has not imported; True if it did any."""
    todo = [n for n in imported_modules() if n not in _ENV_DONE]
    for name in todo:
        _ENV_DONE.add(name)
        _import_one(name)
    return bool(todo)


_CLASS_TERM = re.compile(r"(?<![\w.'\"])([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)")


def _class_term(module: str, attr: str) -> str:
    """The registered name of class ``attr`` of module ``module`` (imported, and registered if it is not)."""
    _import_one(module, f"'{module}:{attr}'")
    cls = getattr(sys.modules[module], attr, None)
    if not isinstance(cls, type) or not issubclass(cls, Advantage | Surrogate | GradientTransform):
        raise SpecError(f"'{module}:{attr}': module {module!r} has no Advantage, Surrogate or GradientTransform "
                        f"class {attr!r}")
    if not isinstance(getattr(cls, "name", None), str):
        raise SpecError(f"'{module}:{attr}': the class has no name (set name = \"...\" in its body)")
    register(cls)
    known = imported_modules()
    if module not in known:  # processes started from this one resolve the name too
        os.environ[IMPORTS_ENV] = os.pathsep.join([*known, module])
    return cls.name


def resolve_classes(spec: str) -> str:
    """``spec`` with every ``module:ClassName`` term replaced by the class's registered name (module
    docstring); a ``name:value`` shorthand of a registered name (``tis:4``) is left as it is."""
    def swap(match: re.Match[str]) -> str:
        module, attr = match.groups()
        registered = module in NAMED_RECIPES or any(module in t for t in _KINDS.values())
        if registered and not isinstance(getattr(sys.modules.get(module), attr, None), type):
            return match.group(0)
        return _class_term(module, attr)

    return _CLASS_TERM.sub(swap, spec) if ":" in spec else spec


def available() -> list[str]:
    """All names a spec term may use: named recipes, surrogates, advantages and transforms."""
    _import_from_env()
    names = set(NAMED_RECIPES) | set(SURROGATES) | set(ADVANTAGES) | set(TRANSFORMS)
    return sorted(names)


def describe(name: str) -> tuple[str, str]:
    """(kind: ``recipe``, ``surrogate``, ``advantage`` or ``transform``; the first line of its documentation)."""
    _import_from_env()
    if name in NAMED_RECIPES:
        return "recipe", RECIPE_DOCS[name].split(". ")[0].rstrip(".")
    for kind, table in _KINDS.items():
        if name in table:
            doc = (table[name].__doc__ or "").strip()
            return kind, (doc.splitlines()[0].rstrip(".") if doc else "")
    raise SpecError(f"unknown recipe or component {name!r}; allowed: {', '.join(available())}; {OWN_HINT}")


def _parts_of(name: str) -> tuple[Part, ...]:
    if name in NAMED_RECIPES:
        return NAMED_RECIPES[name]
    for kind, table in _KINDS.items():
        if name in table:
            return (Part(kind, name),)
    if _import_from_env():
        return _parts_of(name)
    raise SpecError(f"unknown recipe or component {name!r}; allowed: {', '.join(available())}; {OWN_HINT}")


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
    spec = resolve_classes(spec)  # module:ClassName terms -> registered names (the Recipe keeps these)
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
