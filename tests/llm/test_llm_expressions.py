"""Countdown's answer checker: `evaluate_expression` against a recursive-descent reference over many expressions.

The reference is a hand-written parser of the grammar the checker accepts (non-negative integers, binary
+ - * /, parentheses, whitespace; exact Fractions; division by zero is no value); the checker must give the
same (value, integers used) or None on every text, valid or not, and refuse every other construct.
"""

from __future__ import annotations

import ast
import random
import re
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llm_scale.tasks import evaluate_expression
from llm_scale.tasks.answers import expression_value


class _Reference:
    """expr = term (('+' | '-') term)*; term = atom (('*' | '/') atom)*; atom = digits | '(' expr ')'."""

    _token = re.compile(r"\s*(\d+|[-+*/()])")

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos, text = 0, text.strip()
        while pos < len(text):
            match = self._token.match(text, pos)
            if match is None:
                raise ValueError("bad character")
            self.tokens.append(match.group(1))
            pos = match.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i, self.numbers = 0, []

    def take(self) -> str:
        if self.i >= len(self.tokens):
            raise ValueError("unexpected end")
        self.i += 1
        return self.tokens[self.i - 1]

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.atom()
        while self.peek() in ("*", "/"):
            op, rhs = self.take(), self.atom()
            if op == "/" and rhs == 0:
                raise ValueError("division by zero")
            value = value * rhs if op == "*" else value / rhs
        return value

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            if self.take() != ")":
                raise ValueError("unbalanced")
            return value
        if tok.isdigit():
            self.numbers.append(int(tok))
            return Fraction(int(tok))
        raise ValueError(f"unexpected {tok!r}")


def reference(text: str) -> tuple[Fraction, list[int]] | None:
    if not text.strip() or len(text) > 200:
        return None
    try:
        parser = _Reference(text)
        value = parser.expr()
        if parser.i != len(parser.tokens):
            return None
        return value, parser.numbers
    except ValueError:
        return None


def _number(rng: random.Random) -> str:
    digits = str(rng.choice([0, 1, 2, 7, 10, rng.randint(0, 999), rng.randint(0, 10**12)]))
    if rng.random() < 0.05:
        digits = "0" * rng.randint(1, 3) + digits  # leading zeros
    if rng.random() < 0.02:
        digits = digits.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))  # other decimal digits
    return digits


def _expression(rng: random.Random, depth: int = 0) -> str:
    if depth > 4 or rng.random() < 0.35:
        return _number(rng)
    left, right = _expression(rng, depth + 1), _expression(rng, depth + 1)
    text = f"{left}{rng.choice(' ' * 3 + chr(9))}{rng.choice('+-*/')}{rng.choice(['', ' ', '  '])}{right}"
    return f"({text})" if rng.random() < 0.4 else text


_NOISE = ["**", "//", "%", "-", "+", "(", ")", "()", " ", "\n", "1.5", "x", "1_0", "1e3", "²", "0x1", "j", ",", "2(", "'"]


def _mutated(rng: random.Random, text: str) -> str:
    for _ in range(rng.randint(1, 3)):
        i = rng.randint(0, len(text))
        drop = rng.random() < 0.5 and text  # drop a character, else insert a piece of noise
        text = text[:i] + text[i + 1 :] if drop else text[:i] + rng.choice(_NOISE) + text[i:]
    return text


def test_generated_expressions_and_their_mutations_agree_with_the_reference():
    """10,000 well-formed expressions (nested, spaced, divisions by zero, leading zeros, non-ASCII digits) and
    20,000 mutations of them (dropped characters, operators Python knows but the grammar does not, stray tokens)."""
    rng = random.Random(0)
    valid = invalid = 0
    for _ in range(10_000):
        text = _expression(rng)
        for candidate in (text, _mutated(rng, text)):
            want = reference(candidate)
            assert evaluate_expression(candidate) == want, candidate
            valid, invalid = valid + (want is not None), invalid + (want is None)
    assert valid > 7_500 and invalid > 4_000  # both sides of the grammar were exercised


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet="0123456789+-*/() \t\n%.x٣", max_size=30))
def test_any_text_over_the_grammars_characters_agrees_with_the_reference(text):
    assert evaluate_expression(text) == reference(text)


@pytest.mark.parametrize(
    "text, value, used",
    [("3*4+2", 14, [3, 4, 2]), ("(7*4)/2", 14, [7, 4, 2]), ("10 - 2 - 3", 5, [10, 2, 3]), ("1/3", Fraction(1, 3), [1, 3]),
     ("007+1", 8, [7, 1]), (" ( ( 5 ) ) ", 5, [5]), ("8/(3-8/3)", 24, [8, 3, 8, 3])],
)  # fmt: skip
def test_values_and_the_integers_used_in_order(text, value, used):
    assert evaluate_expression(text) == (Fraction(value), used)


@pytest.mark.parametrize(
    "text",
    ["", "   ", "1/0", "4/(2-2)", "-3", "+3", "2--1", "2**3", "7//2", "7%2", "1 2", "1()", "(1)(2)", "()", "1.5", "1e3",
     "1_000", "x", "x+1", "abs(1)", "(1).real", "__import__('os')", "1" * 201, "9**9**9**9", "(1"],
)  # fmt: skip
def test_everything_else_is_refused(text):
    assert evaluate_expression(text) is None


@pytest.mark.parametrize(
    "source, kind",
    [("x", "Name"), ("abs(1)", "Call"), ("(1).real", "Attribute"), ("2**10**10", "Pow"), ("7//2", "FloorDiv"),
     ("7%2", "Mod"), ("-1", "UnaryOp"), ("1.5", "float"), ("'1'", "str"), ("(1, 2)", "Tuple"), ("1 < 2", "Compare")],
)  # fmt: skip
def test_the_node_whitelist_refuses_names_calls_attributes_and_powers_without_evaluating_them(source, kind):
    """The whitelist itself, below the character filter: a power tower is refused before anything is computed."""
    with pytest.raises(ValueError, match=kind):
        expression_value(ast.parse(source, mode="eval").body, [])
