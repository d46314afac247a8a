"""Answer checking: the final number of a completion, the result of an asked equation, and the exact value of an
arithmetic expression (countdown), each from the text alone; no task state."""

from __future__ import annotations

import ast
import operator
import re
import warnings
from fractions import Fraction

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def clean_number(text: str) -> str | None:
    """The first number in ``text`` normalised (commas and ``$`` removed, ``42.0`` -> ``42``), or None."""
    text = text.strip().replace(",", "").replace("$", "").rstrip(".")
    match = re.search(r"-?\d+(?:\.\d+)?", text)
    if match is None:
        return None
    value = Fraction(match.group(0))
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def extract_answer(text: str) -> str | None:
    """The final numeric answer in ``text``: after ``####``, else in the last ``\\boxed{}``, else the last number.

    Returns the number normalised (commas and ``$`` removed, ``42.0`` -> ``42``) or None.
    """
    if "####" in text:
        return clean_number(text.rsplit("####", 1)[1])
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        return clean_number(boxed[-1])
    numbers = _NUMBER.findall(text)
    return clean_number(numbers[-1]) if numbers else None


_OP_SPELLINGS = {"+": r"\+", "-": r"[-−–]", "*": r"[*×x·]"}


def equation_answer(text: str, a: int, op: str, b: int) -> str | None:
    """The result N of the first occurrence of the equation ``a op b = N`` in ``text``, normalised as by
    `extract_answer`, or None when the text never writes that equation with a result.

    The rule: operands exactly ``a`` and ``b`` in that order (not part of a longer number), the operator
    ``op`` (``*`` also written ``×``, ``x`` or ``·``; ``-`` also ``−`` or ``–``), any spaces, ``=`` (or the
    words "is", "equals", "is equal to", as in "6 + 9 is 15"), then a signed integer (commas allowed). The first occurrence counts: a model that writes the equation twice with
    different results is scored on the first. "3 + 18 = 21 or 1." gives 21; "17 + 2" (a truncated echo)
    gives None; "The answer is 21." gives None (no equation).
    """
    pattern = rf"(?<![\d.,]){a}\s*{_OP_SPELLINGS[op]}\s*{b}\s*(?:=|is equal to|equals|is)\s*(-?\s?\d[\d,]*)"
    match = re.search(pattern, text)
    return None if match is None else clean_number(match.group(1).replace(" ", ""))



# The grammar of an expression: non-negative integer literals, binary + - * / and parentheses.
_EXPRESSION_CHARACTERS = re.compile(r"[\d+\-*/()\s]*")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
MAX_EXPRESSION_CHARS = 200


def expression_value(node: ast.expr, numbers: list[int]) -> Fraction:
    """The exact value of a parsed expression whose nodes are integer constants and binary + - * /; appends the
    integers to ``numbers`` in the order they are written. Any other node (a name, call, attribute, power,
    floor division, modulo, unary sign, float, ...) is a ValueError naming it, raised before its operands are
    evaluated; division by zero is a ZeroDivisionError."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        numbers.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left = expression_value(node.left, numbers)
        return _OPERATORS[type(node.op)](left, expression_value(node.right, numbers))
    what = type(node.op).__name__ if isinstance(node, ast.BinOp) else type(node).__name__
    if isinstance(node, ast.Constant):
        what = type(node.value).__name__
    raise ValueError(f"{what} is not allowed in an arithmetic expression")


def evaluate_expression(text: str) -> tuple[Fraction, list[int]] | None:
    """(exact value, integers used in order) of an arithmetic expression, or None if it is not one.

    An expression is at most `MAX_EXPRESSION_CHARS` characters of decimal digits, ``+ - * /``, parentheses and
    whitespace, parsed by Python's own parser (`ast`) and evaluated by `expression_value` over its node
    whitelist, in Fractions (``1/3`` is exact). Integers may have leading zeros (``007`` is 7) and any decimal
    digits; a division by zero, a unary sign and every operator outside the four give None.
    """
    if not text.strip() or len(text) > MAX_EXPRESSION_CHARS or not _EXPRESSION_CHARACTERS.fullmatch(text):
        return None
    # integer literals as Python writes them (no leading zeros, ASCII digits), tokens split by single spaces
    source = re.sub(r"\d+", lambda m: str(int(m.group())), " ".join(text.split()))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)  # "1 (2)" parses as a call, with a warning
            tree = ast.parse(source, mode="eval")
        numbers: list[int] = []
        return expression_value(tree.body, numbers), numbers
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None
