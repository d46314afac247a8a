"""The state of one loop of the simulator (testbed/runner.py), shared explicitly by its parts.

`LoopState` is what the actors (testbed/actor.py) and the learner (testbed/learner.py) read and change: the
task, the stacked policy (one slot per active run: testbed/tasks/stacked.py), every run's `RunState`, the
optimizers, and which runs still train. A run that diverges leaves the computation through `LoopState.remove`
(its slot is taken out of the policy) and is recorded by `RunState.diverge`; the learner returns the runs that
failed in its step, and the runner records them. `RunResult` is what a run gives back; `Interrupted` stops a
loop between two steps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

from testbed.config import RunConfig, RunSpec
from testbed.delay import Schedule
from testbed.slots import call_with
from testbed.stabilizers import Recipe
from testbed.tasks import ExactOracle


@dataclass
class RunResult:
    config: RunConfig  # resolved
    rows: list[dict[str, Any]]
    status: str  # "ok" or "diverged"
    info: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)  # per optimizer step (testbed/health.py)


class Interrupted(KeyboardInterrupt):
    """Raised by `Runner.run` between two steps when its ``stop`` callable asks: the runner is whole (every
    run at the same version, nothing half done), so `Runner.save` can keep it and `Runner.load` + `run`
    finish it exactly as an uninterrupted loop would have."""

    def __init__(self, step: int) -> None:
        super().__init__(step)
        self.step = step

    def __str__(self) -> str:
        return f"stopped after step {self.step}"


@dataclass
class RunState:
    """One run's own state inside the loop."""

    spec: RunSpec
    schedule: Schedule
    sticky: Tensor | None
    params: dict[str, Tensor]  # leaf views of the run's slot of the policy: its current version
    group: dict[str, Any] = field(default_factory=dict)  # the run's param group in the loop's optimizer of its kind
    rows: list[dict[str, Any]] = field(default_factory=list)
    status: str = "ok"
    prev_grad: Tensor | None = None
    reward_sum: Tensor | float = 0.0
    reward_n: int = 0
    queue_peak: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)  # one record per optimizer step (testbed/health.py)
    window: int = 0  # index in ``steps`` of the current logging window's first step
    lost_final: float = float("nan")

    @property
    def cfg(self) -> RunConfig:
        return self.spec.config

    @property
    def recipe(self) -> Recipe:
        return self.spec.recipe

    def diverge(self, step: int) -> None:
        """Record the run as diverged at update ``step``: rows of that update and later ones are dropped."""
        self.status = "diverged"
        while self.rows and self.rows[-1].get("step", 0) > step:
            self.rows.pop()
        self.rows.append({"step": step + 1, "diverged_at": step + 1})


@dataclass(eq=False)
class LoopState:
    """What one loop's actors and learner share: the task, the stacked policy, the runs, one optimizer per kind
    (one param group per run) and ``active``, the runs still training in slot order (slot position p of the
    policy is run ``active[p]``)."""

    cfg0: RunConfig  # the first run's: the loop's shape (`SHAPE_FIELDS`) is every run's
    task: Any
    policy: nn.Module
    runs: list[RunState]
    optimizers: dict[str, torch.optim.Optimizer]
    active: list[int]

    @property
    def horizon(self) -> int:
        return int(self.task.horizon)

    @property
    def n_actions(self) -> int:
        return int(self.task.n_actions)

    @property
    def oracle(self) -> bool:
        """Whether the task gives exact policy gradients (logged as oracle alignment)."""
        return self.horizon == 1 and isinstance(self.task, ExactOracle)

    def logs(self, t: int) -> bool:
        """Whether step t is a logged one (every ``log_every`` steps and the last)."""
        return (t + 1) % self.cfg0.log_every == 0 or t + 1 == self.cfg0.steps

    def view(self, slots: list[int]) -> Callable[..., Any]:
        """The policy restricted to the given slot positions (all of them: the policy itself)."""
        if len(slots) == len(self.active):
            return self.policy
        idx = torch.tensor(slots)
        params = {k: v.index_select(0, idx) for k, v in self.policy.named_parameters()}
        return functools.partial(call_with, self.policy, params)

    def nonfinite(self) -> list[int]:
        """Slot positions whose parameters have blown up: some tensor's L2 norm is not finite in float32
        (NaN, inf, or entries so large that their squares overflow)."""
        if not self.active:
            return []
        with torch.no_grad():
            norms = torch.stack([torch.linalg.vector_norm(p.flatten(1), dim=1) for p in self.policy.parameters()])
            ok = torch.isfinite(norms).all(0)
        return [pos for pos, good in enumerate(ok.tolist()) if not good]

    def remove(self, positions: list[int]) -> list[int]:
        """Take the runs at these slot positions out of the computation (their slots leave the policy); returns
        their run indices."""
        if not positions:
            return []
        gone = [self.active[pos] for pos in positions]
        keep = [pos for pos in range(len(self.active)) if pos not in positions]
        self.active = [self.active[pos] for pos in keep]
        idx = torch.tensor(keep, dtype=torch.long)
        with torch.no_grad():
            for name, p in self.policy.named_parameters():
                p.data = p.data.index_select(0, idx)
                p.grad = None
                for pos, r in enumerate(self.active):  # the remaining runs' parameters: views of the new slots
                    self.runs[r].params[name].data = p.data[pos]
        return gone
