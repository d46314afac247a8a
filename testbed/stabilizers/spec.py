"""The one spec grammar of the project: recipes, staleness models, frictions and task options.

A spec is one or more *terms* joined by ``+``; a term is a name with optional arguments::

    spec  := term ('+' term)*
    term  := name | name '(' [arg (',' arg)*] ')' | name ':' value (',' value)*
    arg   := value | key '=' value          (key may be dotted: component.param)
    value := number | true | false | none | inf | nan | 'quoted string' | bare_word | [value, ...]

Examples: ``dg+gac(t_low=0.1)``, ``vcpo(tis.c=4)``, ``fixed:1000`` (= ``fixed(1000)``),
``bounded(eta=4, speed=2)+mixed(q=0.3)``, ``bug(frac=0.2, kind=random)+reward(p=0.1)``.

The text is parsed by the standard library's `ast` (after two rewrites: the ``name:a,b`` shorthand
becomes ``name(a,b)`` and a dotted key ``a.b=`` becomes a plain identifier), so nothing is evaluated:
only literals, names (bare words, read as strings) and unary minus are accepted as values.
`bind` turns a term into a dataclass instance, checking every value against the field's type, so
``tis(c=abc)`` fails with one line naming ``c`` and the type it takes, wherever the spec came from.
"""

from __future__ import annotations

import ast
import io
import keyword
import math
import tokenize
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

_WORDS = {"true": True, "false": False, "none": None, "inf": math.inf, "nan": math.nan}
_DOT = "__dot__"  # a dotted key a.b is parsed as the identifier a__dot__b
_KW = "__kw__"  # a name that is a Python keyword (the recipe ``is``) is parsed as is__kw__


class SpecError(ValueError):
    """A spec that does not parse or does not fit its target; the message is one line."""


@dataclass(frozen=True)
class Term:
    """One term of a spec: ``name(*args, **kwargs)``."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [repr(a) if isinstance(a, str) else str(a) for a in self.args]
        parts += [f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})" if parts else self.name


def _value(node: ast.AST, text: str) -> Any:
    """A literal value (see the module grammar); SpecError for anything else."""
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, bool | int | float | str)):
        return node.value
    if isinstance(node, ast.Name):
        word = node.id.removesuffix(_KW)
        return _WORDS.get(word.lower(), word)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        inner = _value(node.operand, text)
        if isinstance(inner, bool) or not isinstance(inner, int | float):
            raise SpecError(f"cannot negate {inner!r} in {text!r}")
        return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, ast.List | ast.Tuple):
        return [_value(e, text) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):  # a hyphenated bare word: seq-mean-token-mean
        left, right = _value(node.left, text), _value(node.right, text)
        if isinstance(left, str) and isinstance(right, str):
            return f"{left}-{right}"
    segment = ast.unparse(node).replace(_DOT, ".").replace(_KW, "")
    raise SpecError(f"cannot parse value {segment!r} in {text!r}; values are numbers, true/false/none, words, "
                    "quoted strings or [lists]")


def _terms(node: ast.AST, text: str) -> list[Term]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _terms(node.left, text) + _terms(node.right, text)
    if isinstance(node, ast.Name):
        return [Term(node.id.removesuffix(_KW))]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise SpecError(f"* and ** are not allowed in {text!r}")
        kwargs: dict[str, Any] = {}
        for kw in node.keywords:
            key = kw.arg.replace(_DOT, ".")
            kwargs[key] = _value(kw.value, text)
        return [Term(node.func.id.removesuffix(_KW), tuple(_value(a, text) for a in node.args), kwargs)]
    segment = ast.unparse(node).replace(_DOT, ".").replace(_KW, "")
    raise SpecError(f"malformed term {segment!r} in {text!r}; expected name, name(key=value, ...) or name:value")


def _rewrite(text: str) -> str:
    """The spec as Python expression syntax: ``name:a,b`` -> ``name(a,b)`` (up to the next top-level
    ``+``), ``a.b=`` -> ``a__dot__b=``, keyword names -> ``name__kw__``. Token-based, so quoted strings
    are left alone."""
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(text).readline)
                  if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER)]
    except tokenize.TokenError:
        raise SpecError(f"cannot parse {text!r}: unbalanced parentheses, brackets or quotes") from None
    except (IndentationError, SyntaxError) as exc:
        raise SpecError(f"cannot parse {text!r}: {exc.args[0]}") from None
    out: list[str] = []
    depth, shorthand = 0, False
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        nxt = tokens[i + 1].string if i + 1 < len(tokens) else ""
        if tok.type == tokenize.NAME and nxt == "." and i + 3 < len(tokens) and tokens[i + 2].type == tokenize.NAME \
                and tokens[i + 3].string == "=":
            out.append(f"{tok.string}{_DOT}{tokens[i + 2].string}")
            i += 3
            continue
        if tok.type == tokenize.NAME and keyword.iskeyword(tok.string) and tok.string not in ("True", "False", "None"):
            out.append(tok.string + _KW)
        elif tok.type == tokenize.NAME and nxt == ":" and depth == 0 and not shorthand:
            out += [tok.string, "("]
            shorthand = True
            i += 2
            continue
        elif tok.string == "+" and depth == 0 and shorthand:
            out += [")", "+"]
            shorthand = False
        else:
            depth += {"(": 1, "[": 1, ")": -1, "]": -1}.get(tok.string, 0)
            out.append(tok.string)
        i += 1
    if shorthand:
        out.append(")")
    return " ".join(out)


def parse(text: str) -> list[Term]:
    """Parse a spec into its terms (see the module docstring). SpecError on malformed text."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"a spec must be a non-empty string, got {text!r}")
    try:
        tree = ast.parse(_rewrite(text.strip()), mode="eval")
    except SyntaxError as exc:
        raise SpecError(f"cannot parse {text!r}: {exc.msg}") from None
    return _terms(tree.body, text)


def parse_value(text: str) -> Any:
    """One value of the grammar (a number, true/false/none, a word, a quoted string or a list)."""
    if not isinstance(text, str) or not text.strip():
        raise SpecError(f"expected a value, got {text!r}")
    term = parse(f"v({text})")
    if len(term) != 1 or len(term[0].args) != 1 or term[0].kwargs:
        raise SpecError(f"expected one value, got {text!r}")
    return term[0].args[0]


def parse_spec(text: str) -> list[tuple[str, dict[str, Any]]]:
    """``[(name, {key: value})]`` of a keyword-only spec (positional arguments are an error)."""
    out = []
    for term in parse(text):
        if term.args:
            raise SpecError(f"{term.name}: arguments must be named (key=value) in {text!r}")
        out.append((term.name, dict(term.kwargs)))
    return out


# -- values against types --------------------------------------------------------------------------


def _type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, typing.get_args(tp)))
    if origin in (list, tuple):
        return "a list"
    if tp is type(None):
        return "none"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a word"}.get(tp, getattr(tp, "__name__", str(tp)))


def coerce(value: Any, tp: Any, what: str) -> Any:
    """``value`` checked against annotation ``tp`` (ints accepted where floats are); SpecError naming
    ``what`` otherwise. Supports bool, int, float, str, None, Literal, unions and lists of these."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return coerce(value, option, what)
            except SpecError:
                continue
    elif origin is typing.Literal:
        if value in typing.get_args(tp):
            return value
    elif origin in (list, tuple) or tp in (list, tuple):
        if isinstance(value, list | tuple):
            args = typing.get_args(tp)
            inner = args[0] if args else Any
            items = [coerce(v, inner, what) for v in value]
            return tuple(items) if (origin or tp) is tuple else items
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is type(None):
        if value is None:
            return None
    else:
        return value
    raise SpecError(f"{what} must be {_type_name(tp)}, got {value!r}")


def bind(term: Term, cls: type, *, where: str = "", positional: tuple[str, ...] | None = None) -> Any:
    """Instantiate dataclass ``cls`` from ``term``: positional arguments fill ``positional`` (default: the
    fields in order), keywords by name; every value is checked by `coerce`. Unknown or repeated keys and
    missing required fields raise a one-line SpecError listing what ``cls`` takes."""
    hints = typing.get_type_hints(cls)
    params = [f for f in fields(cls) if f.init and not f.name.startswith("_")]
    names = [f.name for f in params]
    order = list(positional) if positional is not None else names
    label = f"{where}{term.name}"
    allowed = ", ".join(names) or "(no parameters)"
    if len(term.args) > len(order):
        raise SpecError(f"{label} takes at most {len(order)} positional argument(s) ({', '.join(order) or 'none'}), "
                        f"got {len(term.args)}")
    values = dict(zip(order, term.args, strict=False))
    for key, value in term.kwargs.items():
        if key not in names:
            raise SpecError(f"unknown parameter {key!r} for {label}; allowed: {allowed}")
        if key in values:
            raise SpecError(f"parameter {key!r} of {label} is given twice")
        values[key] = value
    missing = [f.name for f in params if f.name not in values and f.default is MISSING and f.default_factory is MISSING]
    if missing:
        raise SpecError(f"{label} needs parameter(s) {', '.join(missing)}")
    kwargs = {k: coerce(v, hints.get(k, Any), f"{label}: {k}") for k, v in values.items()}
    try:
        return cls(**kwargs)
    except SpecError:
        raise
    except ValueError as exc:
        raise SpecError(str(exc)) from None
