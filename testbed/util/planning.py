"""Which planned runs to train: the one rule every experiment of the project plans by.

Every experiment names each of its runs by a key computed once from the run's settings (a testbed run's
`testbed.config.RunConfig.run_id`; an LLM study's or pilot's `llm_scale.study.Run.key`) and keeps a finished run
in a store under that key (a testbed `testbed.results.ResultStore`, the figures' run cache, a study's run
directories). Given the runs an invocation asks for, `plan_runs` says which to train:

* a key asked for twice is one run: the first is kept, in the order given;
* a run whose stored copy was made, or begun, by code that has changed since (``changed``: the parts of the code
  that did) is trained again, and is listed in `RunPlan.changed` so the command can say so;
* a run its store holds finished (``done``) is reused;
* every other run is trained, in the order given.

The testbed's sweep planner (testbed/plan.py), the figures' run cache and side caches (figures/common.py,
figures/oracle_runs.py, figures/gac_probe.py) and the LLM study's scheduler (llm_scale/study/runs.py: the study, its
pilots and the LLM sweep) plan by it; each keeps its own store and its own test of "finished".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RunPlan(Generic[T]):
    """The runs asked for, without repeats (`runs`), and those of them to train (`todo`), both in the order given."""

    runs: list[T]
    todo: list[T]
    changed: dict[str, list[str]] = field(default_factory=dict)  # by key: runs retrained because their code changed

    @property
    def reused(self) -> int:
        """How many of the runs the store already holds finished by the current code."""
        return len(self.runs) - len(self.todo)


def unique(items: Iterable[T], key: Callable[[T], str]) -> list[T]:
    """``items`` with every key after its first occurrence left out, in order."""
    seen: set[str] = set()
    out = []
    for item in items:
        k = key(item)
        if k not in seen:
            seen.add(k)
            out.append(item)
    return out


def plan_runs(items: Iterable[T], key: Callable[[T], str], done: Callable[[T], bool],
              changed: Callable[[T], list[str]] | None = None) -> RunPlan[T]:
    """The plan of ``items`` (module docstring): ``key(item)`` its run's key, ``done(item)`` whether its store holds
    it finished, ``changed(item)`` the parts of the code that changed since its stored copy was made or begun ([]
    when none did, or when there is no copy to judge)."""
    runs = unique(items, key)
    todo, stale = [], {}
    for item in runs:
        parts = changed(item) if changed is not None else []
        if parts:
            stale[key(item)] = list(parts)
            todo.append(item)
        elif not done(item):
            todo.append(item)
    return RunPlan(runs, todo, stale)
