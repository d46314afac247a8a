"""The code an object runs, as a digest, so that a cached result is reused only by the code that made it.

`source_digest` hashes the source of a class or function *and of everything it names*: the functions,
classes and module-level constants its code refers to (global names, attributes of the project's modules
it imports, base classes, methods), followed through the project's modules and the user's (everything
that is neither the standard library nor an installed package; torch, numpy and the like are taken as
they are), the plumbing modules (`PLUMBING`) left out. Editing the object or a helper it calls changes the
digest; editing a comment, a docstring or the layout does not (the source is compared as its syntax tree,
`_canonical`), nor editing code it does not reach. A run's fingerprint is a dict of such digests by part (the
testbed's: testbed/codeprint.py `run_code`; an LLM run's: llm_scale/trainer.py `run_code`), and `stale_parts`
names the parts that changed. A record without one (written before runs carried it) is not judged.
"""

from __future__ import annotations

import ast
import dis
import functools
import hashlib
import inspect
import sys
import sysconfig
import textwrap
import types
from pathlib import Path
from typing import Any

_EXTERNAL = tuple(str(Path(p).resolve()) for k, p in sysconfig.get_paths().items()
                  if k in ("stdlib", "platstdlib", "purelib", "platlib"))
_SCALARS = (bool, int, float, str, bytes, type(None))
# Modules that resolve names, parse specs, write files, show progress or describe the machine: they decide which
# code runs and where its results go, not what it computes, so editing them leaves every fingerprint as it was.
PLUMBING = frozenset({"testbed.stabilizers.registry", "testbed.stabilizers.spec", "testbed.config", "testbed.machine",
                      "testbed.util.files", "testbed.util.stopping", "testbed.usage",
                      "testbed.util.errors", "testbed.util.progress", "testbed.util.provenance",
                      "llm_scale.config", "llm_scale.cli", "llm_scale.processes"})


@functools.lru_cache(maxsize=512)
def _is_ours(module_name: str) -> bool:
    """True for a module of the project or the user's (a file outside the standard library and site-packages)."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not path or module_name in sys.builtin_module_names:
        return False
    resolved = str(Path(path).resolve())
    return not any(resolved.startswith(p + "/") or resolved == p for p in _EXTERNAL)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _functions(obj: Any) -> list[types.FunctionType]:
    if isinstance(obj, types.FunctionType):
        return [obj]
    if isinstance(obj, staticmethod | classmethod):
        return _functions(obj.__func__)
    if isinstance(obj, property):
        return [f for f in (obj.fget, obj.fset, obj.fdel) if isinstance(f, types.FunctionType)]
    if isinstance(obj, functools.cached_property):
        return _functions(obj.func)
    return []


def _canonical(source: str) -> str:
    """``source`` as code only: comments, docstrings and layout dropped (`ast.unparse` of the tree)."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body and \
                isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and \
                isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _stable_repr(value: Any) -> str:
    """``repr(value)`` without what changes from one process to the next: a function or class is named by its module
    and qualified name, another object whose repr holds a memory address by its type, inside tuples, lists and
    dicts too."""
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | type):
        return f"<{type(value).__name__} {getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', '?')}>"
    if isinstance(value, list):
        return "[" + ", ".join(_stable_repr(v) for v in value) + "]"
    if isinstance(value, tuple):
        inner = ", ".join(_stable_repr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_stable_repr(k)}: {_stable_repr(v)}" for k, v in value.items()) + "}"
    text = repr(value)
    return f"<{type(value).__module__}.{type(value).__qualname__} object>" if " at 0x" in text else text


def _source(obj: Any) -> str:
    """The code of ``obj`` (`_canonical`); a function's with its default values (a default may be a constant),
    written by `_stable_repr`."""
    defaults = "".join(f"\n{_stable_repr(f.__defaults__)} {_stable_repr(f.__kwdefaults__)}" for f in _functions(obj))
    try:
        return _canonical(inspect.getsource(obj)) + defaults
    except (OSError, TypeError):  # defined in a string or at the prompt: its bytecode stands in for it
        codes = [f.__code__ for f in _functions(obj)] if not isinstance(obj, type) else \
            [f.__code__ for v in vars(obj).values() for f in _functions(v)]
        return "\n".join(dis.Bytecode(c).dis() for c in codes) or repr(obj)


def _walk(obj: Any, parts: dict[str, str]) -> None:
    """Add ``obj`` and what it names (module docstring) to ``parts`` (qualified name -> source)."""
    module_name = getattr(obj, "__module__", None)
    if not isinstance(module_name, str) or module_name in PLUMBING or not _is_ours(module_name):
        return
    key = f"{module_name}.{getattr(obj, '__qualname__', repr(obj))}"
    if key in parts:
        return
    parts[key] = _source(obj)
    module = sys.modules[module_name]
    names: set[str] = set()
    if isinstance(obj, type):
        for base in obj.__mro__[1:]:
            _walk(base, parts)
        for value in vars(obj).values():
            for fn in _functions(value):
                names |= _code_names(fn.__code__)
                if not fn.__qualname__.startswith(obj.__qualname__ + "."):  # set on the class from elsewhere
                    parts.setdefault(f"{key}.{fn.__name__}", _source(fn))
    else:
        for fn in _functions(obj):
            names |= _code_names(fn.__code__)
    for name in sorted(names):
        if not hasattr(module, name):  # an attribute or a builtin, not one of the module's globals
            continue
        value = getattr(module, name)
        if isinstance(value, types.ModuleType):
            if value.__name__ not in PLUMBING and _is_ours(value.__name__):  # module.attr: follow the attributes the code names
                for attr in sorted(names):
                    target = getattr(value, attr, None)
                    if isinstance(target, type | types.FunctionType):
                        _walk(target, parts)
        elif isinstance(value, type | types.FunctionType):
            _walk(value, parts)
        elif isinstance(value, _SCALARS) or (isinstance(value, tuple) and all(isinstance(v, _SCALARS) for v in value)):
            parts.setdefault(f"{module_name}.{name}", repr(value))


def _digest(objs: tuple[Any, ...]) -> str:
    parts: dict[str, str] = {}
    for obj in objs:
        _walk(obj, parts)
    h = hashlib.sha1()
    for key in sorted(parts):
        h.update(key.encode() + b"\0" + parts[key].encode() + b"\0")
    return h.hexdigest()[:16]


_digest_cached = functools.lru_cache(maxsize=256)(_digest)


def forget() -> None:
    """Forget the digests cached in this process: the next `source_digest` walks the code as it is then (after a
    module's global was replaced, as a test's monkeypatch does and undoes)."""
    _digest_cached.cache_clear()


def source_digest(*objs: Any, fresh: bool = False) -> str:
    """A digest of the source of ``objs`` and of everything they name in the project's or the user's modules.
    Cached per process by the objects themselves; ``fresh``: walked anew (the code as it is now, e.g. where a
    module's global has been replaced since), and not cached."""
    return _digest(tuple(objs)) if fresh else _digest_cached(tuple(objs))


def recipe_code(recipe: Any, fresh: bool = False) -> dict[str, str]:
    """The parts of a run's fingerprint that a recipe (`testbed.stabilizers.recipe.Recipe`) contributes, one per
    component, each its class's `source_digest`: ``advantage NAME``, ``surrogate NAME``, ``transform NAME``... (the
    loop that runs them finds them by name at run time, so their code is not reached from it)."""
    out = {f"advantage {recipe.advantage.name}": source_digest(type(recipe.advantage), fresh=fresh),
           f"surrogate {recipe.surrogate.name}": source_digest(type(recipe.surrogate), fresh=fresh)}
    for t in recipe.transforms:
        out[f"transform {t.name}"] = source_digest(type(t), fresh=fresh)
    return out


def stale_parts(recorded: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """The parts of ``current`` whose code differs from ``recorded`` (a record's ``code``); [] when it has none."""
    if not recorded:
        return []
    return [part for part, digest in current.items() if recorded.get(part) != digest]
