"""Tasks with verifiable rewards: generated arithmetic, countdown and copy problems, and GSM8K-style JSONL.

A task draws `Problem`s from a seeded ``random.Random`` and scores a completion (the decoded text
the policy generated after the prompt) with a reward in [0, 1]. Prompts come in three styles:

* ``compact``: terse text such as ``12+7=`` for the tiny character-level model (small alphabet);
* ``qa``: ``Question: ...\\nAnswer:`` for base models;
* ``chat``: the instruction as one user message, for models with a chat template (the trainer
  applies the template).

Task specs use the recipe grammar: ``"arithmetic"``, ``"arithmetic(max_operand=20, ops='+-*')"``,
``"countdown(n_numbers=3)"``, ``"copy(digits=2)"``, ``"gsm8k(path='data/train.jsonl')"``,
``"prompts(path='train.parquet')"`` (prompts and answers from a parquet or JSONL file, verl's layout by
default: `PromptFile`). A user's own task: ``"package.module:factory"`` or
``"package.module:factory(key=value, ...)"`` imports ``package.module`` and calls ``factory(**params)``,
which must return an object with the protocol of `Task` (``name``, ``alphabet``, ``max_new_tokens``,
``sample(rng) -> Problem``, ``prompt(problem, style) -> str``, ``reward(problem, completion) -> float``);
`build_task` checks it (and draws and scores one problem) before any work.

Answer extraction (`extract_answer`): the text after the last ``####`` marker if there is one,
else the content of the last ``\\boxed{...}``, else the last number in the text.

Instruct models (qa and chat styles) answer in sentences, so these styles get:

* a completion budget measured from the reference answer's tokenisation (`completion_budget`): the longest
  tokenised `Task.reference_completion` over a fixed sample of problems, plus the end token and
  `Task.budget_slack` tokens for the phrasing around it (never below the task's own ``max_new_tokens``);
  compact prompts keep ``max_new_tokens``;
* a strict answer format that the prompt asks for. Arithmetic asks for "the equation and its result" and
  scores the first occurrence of the asked equation ``a op b = N`` (`equation_answer`), or a completion that
  is just the number, so that "3 + 18 = 21 or 1." earns the reward and a truncated echo "17 + 2" does not
  (`Arithmetic.reward`); GSM8K asks for ``#### N``. ``Task.reward(problem, completion, style)`` takes the
  prompt style; without it, a completion with no letter and no whitespace is scored as compact;
* `truncation_warning`: the ``warning:`` line a trainer prints when more than `TRUNCATION_WARN_FRAC` of a
  batch's completions hit the budget (their rewards may be wrong; ``python -m llm_scale budget`` measures how many are).
"""

from __future__ import annotations

import json
import operator
import random
import re
import string
from dataclasses import dataclass, field, fields
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar

from testbed.stabilizers import parse_spec

STYLES = ("compact", "qa", "chat")


@dataclass(frozen=True)
class Problem:
    """One prompt: the question in each style's raw form, and the reference answer."""

    question: str  # natural-language instruction (qa and chat styles)
    compact: str  # terse prompt (compact style)
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _clean_number(text: str) -> str | None:
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
        return _clean_number(text.rsplit("####", 1)[1])
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        return _clean_number(boxed[-1])
    numbers = _NUMBER.findall(text)
    return _clean_number(numbers[-1]) if numbers else None


TRUNCATION_WARN_FRAC = 0.25  # warn when more than this fraction of a batch's completions hit the budget
BUDGET_PROBLEMS = 64  # problems whose reference completions set the budget (a fixed seeded sample)


class Task:
    """Base class: subclasses are dataclasses whose fields are the spec parameters."""

    name: ClassVar[str]
    alphabet: ClassVar[str] = string.digits  # characters of compact prompts and answers (tiny tokenizer)
    max_new_tokens: ClassVar[int] = 8  # a sensible default completion budget (compact style)
    budget_slack: ClassVar[int] = 12  # tokens beyond the reference completion for an instruct model's phrasing

    def reference_completion(self, problem: Problem, style: str) -> str:
        """A correct completion written in the format the ``style``'s prompt asks for (sets the budget)."""
        return problem.answer if style == "compact" else f"#### {problem.answer}"

    def sample(self, rng: random.Random) -> Problem:
        raise NotImplementedError

    def reward(self, problem: Problem, completion: str, style: str | None = None) -> float:
        """1.0 when the extracted answer equals the reference, else 0.0 (``style``: the prompt style, for tasks
        whose rule depends on it)."""
        got = extract_answer(completion)
        return float(got is not None and got == _clean_number(problem.answer))

    def prompt(self, problem: Problem, style: str) -> str:
        if style == "compact":
            return problem.compact
        if style == "qa":
            return f"Question: {problem.question}\nAnswer:"
        if style == "chat":
            return problem.question
        raise ValueError(f"unknown prompt style {style!r}; allowed: {', '.join(STYLES)}")


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
            got = _clean_number(completion)
        return float(got is not None and got == problem.answer)


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
    return None if match is None else _clean_number(match.group(1).replace(" ", ""))


class _SafeEval:
    """Evaluate an expression of integers, + - * / and parentheses exactly (Fractions); None if invalid."""

    _pattern = re.compile(r"\s*(\d+|[-+*/()])")

    def __init__(self, text: str) -> None:
        self.tokens: list[str] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            match = self._pattern.match(text, pos)
            if match is None:
                raise ValueError("bad character")
            self.tokens.append(match.group(1))
            pos = match.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0
        self.numbers: list[int] = []

    def parse(self) -> Fraction:
        value = self.expr()
        if self.i != len(self.tokens):
            raise ValueError("trailing tokens")
        return value

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str:
        tok = self.peek()
        if tok is None:
            raise ValueError("unexpected end")
        self.i += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.atom()
        while self.peek() in ("*", "/"):
            op = self.take()
            rhs = self.atom()
            if op == "*":
                value = value * rhs
            else:
                if rhs == 0:
                    raise ValueError("division by zero")
                value = value / rhs
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


def evaluate_expression(text: str) -> tuple[Fraction, list[int]] | None:
    """(exact value, integers used) of an arithmetic expression, or None if it is not one."""
    if not text.strip() or len(text) > 200:
        return None
    try:
        parser = _SafeEval(text)
        return parser.parse(), parser.numbers
    except ValueError:
        return None


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
        want = _clean_number(problem.answer) if re.fullmatch(r"\s*-?[\d,]+(\.\d+)?\s*", problem.answer) else None
        if want is not None:
            return float(extract_answer(completion) == want)
        text = completion.rsplit("####", 1)[1] if "####" in completion else completion
        return float(text.strip() == problem.answer)


TASKS: dict[str, type[Task]] = {cls.name: cls for cls in (Copy, Arithmetic, Countdown, GSM8K, PromptFile)}
PROTOCOL = ("name", "alphabet", "max_new_tokens", "sample", "prompt", "reward")


def _user_task(spec: str) -> Any:
    """``package.module:factory[(params)]``: import, call, and check the result against the task protocol."""
    import importlib

    head, paren, rest = spec.partition("(")
    module_name, _, factory_name = head.strip().rpartition(":")
    if not re.fullmatch(r"[A-Za-z_][\w.]*", module_name) or not re.fullmatch(r"[A-Za-z_]\w*", factory_name):
        raise ValueError(f"task {spec!r}: a user task is package.module:factory or package.module:factory(key=value, ...)")
    params = parse_spec(f"factory({rest}")[0][1] if paren else {}
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ValueError(f"task {spec!r}: cannot import module {module_name!r}: {type(exc).__name__}: {exc}") from None
    factory = getattr(module, factory_name, None)
    if not callable(factory):
        raise ValueError(f"task {spec!r}: module {module_name!r} has no callable {factory_name!r}")
    try:
        task = factory(**params)
    except Exception as exc:
        raise ValueError(f"task {spec!r}: {factory_name}({', '.join(f'{k}={v!r}' for k, v in params.items())}) failed: "
                         f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from None  # fmt: skip
    missing = [a for a in PROTOCOL if not hasattr(task, a)]
    if missing:
        raise ValueError(f"task {spec!r}: the factory's result lacks {', '.join(missing)} (a task needs {', '.join(PROTOCOL)})")
    if not isinstance(task.alphabet, str) or isinstance(task.max_new_tokens, bool) or not isinstance(task.max_new_tokens, int) \
            or task.max_new_tokens < 1:
        raise ValueError(f"task {spec!r}: alphabet must be a string and max_new_tokens a positive integer, got "
                         f"{task.alphabet!r}, {task.max_new_tokens!r}")  # fmt: skip
    try:
        problem = task.sample(random.Random(0))
        prompts = [task.prompt(problem, style) for style in STYLES]
        score = task.reward(problem, problem.answer)
    except Exception as exc:
        raise ValueError(f"task {spec!r}: drawing and scoring a first problem failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(problem, Problem) or not all(isinstance(p, str) for p in prompts):
        raise ValueError(f"task {spec!r}: sample() must return a llm_scale.tasks.Problem and prompt() a string, got "
                         f"{type(problem).__name__}")  # fmt: skip
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= float(score) <= 1.0:
        raise ValueError(f"task {spec!r}: reward() must return a number in [0, 1], got {score!r}")
    return task


def completion_budget(task: Task, style: str, tokenizer: Any, seed: int = 0) -> int:
    """Completion budget (new tokens) for ``task`` prompted in ``style``.

    compact: ``task.max_new_tokens``. qa and chat: max(``task.max_new_tokens``, L + 1 + ``task.budget_slack``),
    L the longest tokenisation (no special tokens) of `Task.reference_completion` over `BUDGET_PROBLEMS`
    problems drawn with ``random.Random(seed)``, + 1 for the end token.
    """
    if style == "compact":
        return task.max_new_tokens
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}; allowed: {', '.join(STYLES)}")
    rng = random.Random(seed)
    texts = [task.reference_completion(task.sample(rng), style) for _ in range(BUDGET_PROBLEMS)]
    longest = max(len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"])
    return max(task.max_new_tokens, longest + 1 + task.budget_slack)


def truncation_warning(truncated: int, total: int, budget: int, limit: float = TRUNCATION_WARN_FRAC) -> str | None:
    """The ``warning:`` line to print when more than ``limit`` of ``total`` completions were cut by the
    ``budget`` of new tokens (None otherwise): their answers may be missing, so their rewards may be wrong. How
    many are is what ``python -m llm_scale budget`` measures (a model that answers first and keeps talking is
    cut often and scored right)."""
    if total <= 0 or truncated / total <= limit:
        return None
    return (f"warning: {truncated} of {total} completions ({truncated / total:.0%}) hit the {budget}-token budget "
            f"(more than {limit:.0%}); their rewards may be wrong: measure how many with python -m llm_scale budget, "
            f"or raise --max-new-tokens")


def build_task(spec: str, *, data: str | None = None) -> Task:
    """A task from a spec such as ``"arithmetic(max_operand=20)"`` or ``"package.module:factory(...)"``; ``data``
    fills the ``path`` of gsm8k and prompts."""
    if isinstance(spec, str) and ":" in spec.partition("(")[0]:
        return _user_task(spec)
    terms = parse_spec(spec) if isinstance(spec, str) and spec.strip() else []
    if len(terms) != 1:
        raise ValueError(f"task spec must name one task, got {spec!r}; allowed: {', '.join(TASKS)}")
    name, params = terms[0]
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(TASKS)}")
    cls = TASKS[name]
    allowed = [f.name for f in fields(cls) if f.init]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"unknown parameter(s) {', '.join(unknown)} for task {name!r}; allowed: {', '.join(allowed)}")
    if data is not None and "path" in allowed and "path" not in params:
        params["path"] = data
    defaults = {f.name: f.default for f in fields(cls) if f.init}
    for key, value in params.items():
        kind = type(defaults[key])
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{name}({key}={value!r}): {key} must be an integer, got {type(value).__name__}")
        if kind is str and not isinstance(value, (str, int, float)):
            raise ValueError(f"{name}({key}={value!r}): {key} must be text, got {type(value).__name__}")
    return cls(**{k: str(v) if type(defaults[k]) is str else v for k, v in params.items()})
