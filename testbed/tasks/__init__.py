"""Tasks the runner drives, by name, and their options (so the CLI and sweep files can set them).

A task is a class implementing the `Task` protocol (base.py) whose constructor keyword arguments
are its options (e.g. ``K`` for the bandit, ``data_dir`` for MNIST, ``H`` and ``M`` for token
reversal). Register it with ``@register_task``; modules listed in ``_LAZY`` are imported on first
use. A task class may also define ``runner_defaults`` (a dict of run settings such as
``{"n_actors": 10, "batch_size": 100}``) that apply unless the user sets them.

Importing this package registers the gymnasium environment ids (``testbed/KArmedBandit-v0``,
``testbed/ContextualBandit-v0``, ``testbed/MNISTBandit-v0``, ``testbed/TokenReversal-v0``).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from .base import ExactOracle, Task

TASKS: dict[str, type] = {}
# name -> module that registers it when imported (kept lazy: token reversal needs more imports).
_LAZY = {
    "bandit": "testbed.tasks.bandit",
    "contextual_bandit": "testbed.tasks.bandit",
    "mnist": "testbed.tasks.mnist",
    "token_reversal": "testbed.tasks.token_reversal",
}


def register_task(cls: type) -> type:
    """Class decorator: register a task class under ``cls.name``."""
    TASKS[cls.name] = cls
    return cls


def task_names() -> list[str]:
    return sorted(set(TASKS) | set(_LAZY))


def task_class(name: str) -> type:
    """The class registered as ``name``; ValueError listing the known tasks otherwise."""
    if name not in TASKS and name in _LAZY:
        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as exc:
            if exc.name != _LAZY[name]:
                raise
            raise ValueError(f"task {name!r} is not available (module {_LAZY[name]} is missing)") from None
        if name not in TASKS:  # a module that did not use @register_task: find the class by its name
            for obj in vars(module).values():
                if inspect.isclass(obj) and getattr(obj, "name", None) == name and hasattr(obj, "logits"):
                    TASKS[name] = obj
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; allowed: {', '.join(task_names())}")
    return TASKS[name]


@dataclass(frozen=True)
class TaskOption:
    name: str
    default: Any
    type: type
    help: str = ""


_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "list": list, "tuple": tuple}


def _annotated_type(annotation: Any) -> type:
    """The first concrete type named by an annotation such as ``"list | None"`` (default str)."""
    if isinstance(annotation, type):
        return annotation
    for word in str(annotation).replace("|", " ").replace("[", " ").split():
        if word in _TYPES:
            return _TYPES[word]
    return str


def task_options(name: str) -> dict[str, TaskOption]:
    """The options of task ``name`` (its constructor's keyword arguments with their defaults)."""
    cls = task_class(name)
    out = {}
    for p in inspect.signature(cls).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        typ = type(default) if default is not None else _annotated_type(p.annotation)
        out[p.name] = TaskOption(p.name, default, typ)
    return out


def coerce_option(task: str, key: str, value: Any) -> Any:
    """Convert ``value`` (possibly a CLI string) to the type of option ``key``'s default."""
    options = task_options(task)
    if key not in options:
        raise ValueError(f"unknown option {key!r} for task {task!r}; allowed: {', '.join(options) or '(none)'}")
    typ = options[key].type
    if not isinstance(value, str) or typ is str:
        if typ is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value
    try:
        if typ is bool:
            low = value.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError
            return low in ("true", "1", "yes")
        if typ in (int, float):
            return typ(value)
        if typ in (list, tuple):
            import ast

            return typ(ast.literal_eval(value))
    except (ValueError, SyntaxError):
        raise ValueError(f"task {task!r} option {key}={value!r}: expected a {typ.__name__}") from None
    return value


def make_task(name: str, **kwargs: Any) -> Task:
    """Instantiate task ``name`` with options ``kwargs`` (unknown options -> ValueError)."""
    cls = task_class(name)
    options = task_options(name)
    for key in kwargs:
        if key not in options:
            raise ValueError(f"unknown option {key!r} for task {name!r}; allowed: {', '.join(options) or '(none)'}")
    kwargs = {k: coerce_option(name, k, v) for k, v in kwargs.items()}
    return cls(**kwargs)


def runner_defaults(name: str) -> dict[str, Any]:
    return dict(getattr(task_class(name), "runner_defaults", {}) or {})


def _register_envs() -> None:
    import gymnasium

    ids = {
        "testbed/KArmedBandit-v0": "testbed.tasks.bandit:KArmedBanditEnv",
        "testbed/ContextualBandit-v0": "testbed.tasks.bandit:ContextualBanditEnv",
        "testbed/MNISTBandit-v0": "testbed.tasks.mnist:MNISTBanditEnv",
        "testbed/TokenReversal-v0": "testbed.tasks.token_reversal:TokenReversalEnv",  # added by the issue-4 helper
    }
    for env_id, entry in ids.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry)


_register_envs()

__all__ = ["TASKS", "ExactOracle", "Task", "TaskOption", "make_task", "register_task", "runner_defaults",
           "task_class", "task_names", "task_options"]
