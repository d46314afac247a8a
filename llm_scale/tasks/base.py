"""What every task shares: the prompt styles, `Problem`, the `Task` base class and the completion budget."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .answers import clean_number, extract_answer

STYLES = ("compact", "qa", "chat")


@dataclass(frozen=True)
class Problem:
    """One prompt: the question in each style's raw form, and the reference answer."""

    question: str  # natural-language instruction (qa and chat styles)
    compact: str  # terse prompt (compact style)
    answer: str
    meta: dict[str, Any] = field(default_factory=dict)


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
        return float(got is not None and got == clean_number(problem.answer))

    def prompt(self, problem: Problem, style: str) -> str:
        if style == "compact":
            return problem.compact
        if style == "qa":
            return f"Question: {problem.question}\nAnswer:"
        if style == "chat":
            return problem.question
        raise ValueError(f"unknown prompt style {style!r}; allowed: {', '.join(STYLES)}")



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
