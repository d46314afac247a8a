"""The task families: copy, arithmetic and countdown (generated), GSM8K-style JSONL and prompt files (read)."""

from __future__ import annotations

import json
import operator
import random
import re
import string
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

from .answers import clean_number, equation_answer, evaluate_expression, extract_answer
from .base import Problem, Task


@dataclass
class Copy(Task):
    """Echo the digits of the prompt: ``7=`` -> ``7``. The sanity-check task (trivially learnable)."""

    name: ClassVar[str] = "copy"
    alphabet: ClassVar[str] = string.digits + "="
    max_new_tokens: ClassVar[int] = 2
    digits: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.digits <= 12:
            raise ValueError(f"copy: digits must be in 1..12, got {self.digits}")

    def sample(self, rng: random.Random) -> Problem:
        text = "".join(rng.choice(string.digits) for _ in range(self.digits))
        if self.digits > 1:
            text = text.lstrip("0") or "0"
        return Problem(f"Repeat the number {text}. Answer with just the number.", f"{text}=", text)


_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul}


@dataclass
class Arithmetic(Task):
    """``a op b`` with integer operands in [min_operand, max_operand] and op drawn from ``ops``."""

    name: ClassVar[str] = "arithmetic"
    alphabet: ClassVar[str] = string.digits + "+-*="
    max_new_tokens: ClassVar[int] = 6
    min_operand: int = 0
    max_operand: int = 9
    ops: str = "+"

    def __post_init__(self) -> None:
        self.ops = str(self.ops)
        if not self.ops or any(op not in _OPS for op in self.ops):
            raise ValueError(f"arithmetic: ops must be a non-empty string of {''.join(_OPS)}, got {self.ops!r}")
        if not 0 <= self.min_operand <= self.max_operand <= 10**9:
            raise ValueError(
                f"arithmetic: need 0 <= min_operand <= max_operand <= 1e9, got {self.min_operand}, {self.max_operand}"
            )

    def sample(self, rng: random.Random) -> Problem:
        a = rng.randint(self.min_operand, self.max_operand)
        b = rng.randint(self.min_operand, self.max_operand)
        op = rng.choice(self.ops)
        ans = _OPS[op](a, b)
        question = f"What is {a} {op} {b}? Reply with one line: the equation and its result."
        return Problem(question, f"{a}{op}{b}=", str(ans), {"a": a, "op": op, "b": b})

    def reference_completion(self, problem: Problem, style: str) -> str:
        m = problem.meta
        return problem.answer if style == "compact" else f"{m['a']} {m['op']} {m['b']} = {problem.answer}"

    def reward(self, problem: Problem, completion: str, style: str | None = None) -> float:
        """Prose (qa and chat styles: the strict format their prompt asks for): 1 when `equation_answer` of the
        asked equation equals the answer, or the whole completion is just that number ("21", "21."). Compact:
        the last number equals the answer (`extract_answer`). ``style`` None: compact when the completion
        holds no letter and no whitespace (what the compact alphabet can produce), else prose."""
        if style is None:
            style = "compact" if not re.search(r"[A-Za-z\s]", completion) else "chat"
        if style == "compact" or "a" not in problem.meta:
            return super().reward(problem, completion)
        m = problem.meta
        got = equation_answer(completion, m["a"], m["op"], m["b"])
        if got is None and re.fullmatch(r"\s*-?\d[\d,]*\.?\s*", completion):
            got = clean_number(completion)
        return float(got is not None and got == problem.answer)


_EXPR_RUN = re.compile(r"[\d+\-*/() ]+")


@dataclass
class Countdown(Task):
    """Reach ``target`` with + - * / over ``n_numbers`` given numbers, each used at most once.

    Problems are generated solvable: the target is the value of a random expression over a random
    subset of the numbers (positive integer, intermediate divisions exact). The reward is 1 when the
    completion holds an expression that uses only the given numbers (each at most once) and equals
    the target; the expression is the text after ``####`` if present, else the last run of
    characters made of digits, operators, parentheses and spaces.
    """

    name: ClassVar[str] = "countdown"
    alphabet: ClassVar[str] = string.digits + "+-*/() ,:="
    max_new_tokens: ClassVar[int] = 16
    n_numbers: int = 3
    max_number: int = 10
    max_target: int = 100

    def __post_init__(self) -> None:
        if not 2 <= self.n_numbers <= 6:
            raise ValueError(f"countdown: n_numbers must be in 2..6, got {self.n_numbers}")
        if not (1 <= self.max_number <= 10**6 and 1 <= self.max_target <= 10**9):
            raise ValueError(
                f"countdown: need 1 <= max_number <= 1e6 and 1 <= max_target <= 1e9, got {self.max_number}, {self.max_target}"
            )

    def sample(self, rng: random.Random) -> Problem:
        for _ in range(1000):
            numbers = [rng.randint(1, self.max_number) for _ in range(self.n_numbers)]
            k = rng.randint(2, self.n_numbers)
            chosen = rng.sample(numbers, k)
            expr, value = str(chosen[0]), Fraction(chosen[0])
            for x in chosen[1:]:
                op = rng.choice("+-*/")
                if op == "/" and (x == 0 or (value / x).denominator != 1):
                    op = "+"
                value = {"+": value + x, "-": value - x, "*": value * x, "/": value / x}[op]
                expr = f"({expr}){op}{x}" if op in "*/" and any(c in expr for c in "+-") else f"{expr}{op}{x}"
            if value.denominator == 1 and 1 <= value <= self.max_target:
                nums = " ".join(map(str, numbers))
                target = int(value)
                question = (
                    f"Using the numbers {', '.join(map(str, numbers))} (each at most once) and + - * /, "
                    f"write an expression equal to {target}. Answer with just the expression."
                )
                return Problem(question, f"{nums}:{target}=", expr, {"numbers": numbers, "target": target})
        raise RuntimeError("countdown: could not generate a problem; raise max_target")  # pragma: no cover

    def reward(self, problem: Problem, completion: str, style: str | None = None) -> float:
        text = completion.rsplit("####", 1)[1] if "####" in completion else completion
        text = text.split("=", 1)[0]
        runs = [r for r in _EXPR_RUN.findall(text) if any(c.isdigit() for c in r)]
        if not runs:
            return 0.0
        parsed = evaluate_expression(runs[-1])
        if parsed is None:
            return 0.0
        value, used = parsed
        pool = list(problem.meta["numbers"])
        for x in used:
            if x not in pool:
                return 0.0
            pool.remove(x)
        return float(value == problem.meta["target"])


@dataclass
class GSM8K(Task):
    """Word problems from a JSONL file of ``{"question": ..., "answer": ...}`` rows (GSM8K's format).

    The reference answer is extracted from the ``answer`` field (after ``####``, else its last
    number). No data ships with the project: pass ``path`` to a file you provide.
    """

    name: ClassVar[str] = "gsm8k"
    alphabet: ClassVar[str] = string.printable
    max_new_tokens: ClassVar[int] = 256
    path: str = ""
    question_key: str = "question"
    answer_key: str = "answer"

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("gsm8k needs a data file: --task 'gsm8k(path=FILE.jsonl)' or --data FILE.jsonl")
        file = Path(str(self.path)).expanduser()
        if not file.is_file():
            raise FileNotFoundError(
                f"gsm8k: data file {str(file)!r} not found; give a JSONL file with one "
                f'{{"{self.question_key}": ..., "{self.answer_key}": ...}} object per line'
            )
        self.rows: list[Problem] = []
        with file.open(encoding="utf-8") as handle:
            for lineno, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    question, raw = str(row[self.question_key]), str(row[self.answer_key])
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise ValueError(
                        f"gsm8k: {file}:{lineno} is not a JSON object with keys "
                        f"{self.question_key!r} and {self.answer_key!r} ({exc})"
                    ) from None
                answer = extract_answer(raw)
                if answer is None:
                    raise ValueError(f"gsm8k: {file}:{lineno}: no numeric answer in {raw[-80:]!r}")
                instruction = f"{question}\nGive the final answer after '####'."
                self.rows.append(Problem(instruction, f"Q: {question}\nA:", answer))
        if not self.rows:
            raise ValueError(f"gsm8k: {file} holds no rows")

    def sample(self, rng: random.Random) -> Problem:
        return self.rows[rng.randrange(len(self.rows))]


def _dotted(row: dict[str, Any], key: str) -> Any:
    """``row["a"]["b"]`` for key ``"a.b"`` (a column of nested records, as verl's ``reward_model.ground_truth``)."""
    value: Any = row
    for part in key.split("."):
        if not isinstance(value, dict) or part not in value:
            raise KeyError(key)
        value = value[part]
    return value


@dataclass
class PromptFile(Task):
    """Prompts and reference answers from a parquet or JSONL file, read with the ``datasets`` package.

    Columns are named by ``prompt_key`` and ``answer_key``; a dotted key reads inside a nested column.
    The defaults are verl's layout (``data.train_files``): ``prompt`` holds a list of chat messages (the
    last user message is the question) or plain text, and ``reward_model.ground_truth`` the answer. The
    reward: numeric answers compare `extract_answer` of the completion with the answer (``####``, else the
    last ``\\boxed{}``, else the last number); other answers compare the stripped text after the last
    ``####`` (else the whole stripped completion) with the answer, exactly. The prompt asks for ``#### ANSWER``.
    """

    name: ClassVar[str] = "prompts"
    alphabet: ClassVar[str] = string.printable
    max_new_tokens: ClassVar[int] = 256
    path: str = ""
    prompt_key: str = "prompt"
    answer_key: str = "reward_model.ground_truth"

    def __post_init__(self) -> None:
        file = Path(str(self.path)).expanduser()
        if not self.path or not file.is_file():
            raise FileNotFoundError(f"prompts: data file {str(self.path)!r} not found; give path='FILE.parquet' or "
                                    f"path='FILE.jsonl'")  # fmt: skip
        kind = {".parquet": "parquet", ".jsonl": "json", ".json": "json"}.get(file.suffix.lower())
        if kind is None:
            raise ValueError(f"prompts: {file.name!r} is neither .parquet nor .jsonl")
        try:
            import datasets
        except ImportError:
            raise ValueError("prompts: reading data files needs the datasets package (pip install datasets)") from None
        quiet = datasets.are_progress_bars_disabled()
        datasets.disable_progress_bars()  # errors are one line; no bars on stderr
        try:
            data = datasets.Dataset.from_parquet(str(file)) if kind == "parquet" else datasets.Dataset.from_json(str(file))
        except Exception as exc:
            raise ValueError(f"prompts: cannot read {str(file)!r}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}") from None
        finally:
            if not quiet:
                datasets.enable_progress_bars()
        self.rows: list[Problem] = []
        for i, row in enumerate(data):
            try:
                prompt, answer = _dotted(row, self.prompt_key), _dotted(row, self.answer_key)
            except KeyError as exc:
                raise ValueError(f"prompts: row {i} of {file.name} has no column {exc.args[0]!r}; columns: "
                                 f"{', '.join(data.column_names)} (set prompt_key= / answer_key=)") from None  # fmt: skip
            if isinstance(prompt, list):
                users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
                prompt = users[-1] if users else None
            if not isinstance(prompt, str) or not prompt.strip() or answer is None:
                raise ValueError(f"prompts: row {i} of {file.name}: the prompt must be text or chat messages with a "
                                 f"user turn, and the answer present; got {str(prompt)[:60]!r}, {answer!r}")  # fmt: skip
            answer = str(answer).strip()
            question = prompt if "####" in prompt else f"{prompt}\nGive the final answer after '####'."
            self.rows.append(Problem(question, prompt, answer))
        if not self.rows:
            raise ValueError(f"prompts: {file} holds no rows")

    def sample(self, rng: random.Random) -> Problem:
        return self.rows[rng.randrange(len(self.rows))]

    def reward(self, problem: Problem, completion: str, style: str | None = None) -> float:
        want = clean_number(problem.answer) if re.fullmatch(r"\s*-?[\d,]+(\.\d+)?\s*", problem.answer) else None
        if want is not None:
            return float(extract_answer(completion) == want)
        text = completion.rsplit("####", 1)[1] if "####" in completion else completion
        return float(text.strip() == problem.answer)
