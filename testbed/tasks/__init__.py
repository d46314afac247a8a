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

import dataclasses
import importlib
import inspect
import types
import typing
from dataclasses import dataclass
from typing import Any

from testbed.stabilizers.spec import SpecError, coerce, parse, parse_value

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
        raise SpecError(f"unknown task {name!r}; allowed: {', '.join(task_names())}")
    return TASKS[name]


@dataclass(frozen=True)
class TaskOption:
    name: str
    default: Any
    type: Any  # the constructor's annotation, e.g. int, float | None, list | None
    help: str = ""


def task_options(name: str) -> dict[str, TaskOption]:
    """The options of task ``name`` (its constructor's keyword arguments with their defaults and types)."""
    cls = task_class(name)
    hints = typing.get_type_hints(cls if dataclasses.is_dataclass(cls) else cls.__init__)
    out = {}
    for p in inspect.signature(cls).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = None if p.default is inspect.Parameter.empty else p.default
        out[p.name] = TaskOption(p.name, default, hints.get(p.name, Any))
    return out


def _is_text(tp: Any) -> bool:
    return tp is str or (typing.get_origin(tp) in (typing.Union, types.UnionType) and str in typing.get_args(tp))


def coerce_option(task: str, key: str, value: Any) -> Any:
    """``value`` checked against the type of option ``key``. A string (from the command line or a sweep
    file) is read with the project's spec grammar (``10``, ``0.5``, ``true``, ``[1, 2]``, ``none``), except
    for text options, which take it as it is."""
    options = task_options(task)
    if key not in options:
        raise SpecError(f"unknown option {key!r} for task {task!r}; allowed: {', '.join(options) or '(none)'}")
    tp = options[key].type
    if isinstance(value, str) and not _is_text(tp):
        value = parse_value(value)
    return coerce(value, tp, f"task {task!r} option {key}")


def parse_task(spec: str) -> tuple[str, dict[str, Any]]:
    """``"token_reversal(H=10, M=2)"`` -> ("token_reversal", {"H": 10, "M": 2}), options checked by type."""
    terms = parse(spec)
    if len(terms) != 1 or terms[0].args:
        raise SpecError(f"a task spec is one name with named options, e.g. token_reversal(H=10); got {spec!r}")
    name = terms[0].name
    task_class(name)
    return name, {k: coerce_option(name, k, v) for k, v in terms[0].kwargs.items()}


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
        "testbed/TokenReversal-v0": "testbed.tasks.token_reversal:TokenReversalEnv",
    }
    for env_id, entry in ids.items():
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry)


_register_envs()

__all__ = ["TASKS", "ExactOracle", "Task", "TaskOption", "make_task", "register_task", "runner_defaults",
           "task_class", "task_names", "task_options"]
