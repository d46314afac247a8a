"""Task specs: the registry of task families, ``package.module:factory`` tasks of a user's own, and `build_task`."""

from __future__ import annotations

import random
import re
from dataclasses import fields
from typing import Any

from testbed.stabilizers import parse_spec

from .base import STYLES, Problem, Task
from .families import GSM8K, Arithmetic, Copy, Countdown, PromptFile

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
