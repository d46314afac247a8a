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

The package: `base` (styles, `Problem`, `Task`, the completion budget), `families` (the built-in tasks),
`answers` (answer checking from the text alone: `extract_answer`, `equation_answer`, and countdown's
`evaluate_expression`, Python's `ast` over a whitelist of nodes), `registry` (`TASKS`, `build_task`, user tasks).
"""

from .answers import clean_number, equation_answer, evaluate_expression, expression_value, extract_answer
from .base import BUDGET_PROBLEMS, STYLES, TRUNCATION_WARN_FRAC, Problem, Task, completion_budget, truncation_warning
from .families import GSM8K, Arithmetic, Copy, Countdown, PromptFile
from .registry import PROTOCOL, TASKS, build_task

__all__ = [
    "BUDGET_PROBLEMS", "GSM8K", "PROTOCOL", "STYLES", "TASKS", "TRUNCATION_WARN_FRAC", "Arithmetic", "Copy", "Countdown",
    "Problem", "PromptFile", "Task", "build_task", "clean_number", "completion_budget", "equation_answer",
    "evaluate_expression", "expression_value", "extract_answer", "truncation_warning",
]  # fmt: skip
