"""The delay-controlled simulator: actors -> delay -> learner -> stabilizer -> optimizer, for S >= 1 runs.

One loop trains any number of runs that share a model shape (the fields in `SHAPE_FIELDS`) as one
computation; seeds, recipes, delays, frictions, learning rates, optimizers, aggregation and the
proximal setting may differ between them. S = 1 is the ordinary case. For learner step
t = 0 .. steps - 1 (the current parameters of every run are its version t)::

    1. act: every actor chunk whose (next) tokens are due at version t is sampled *now*, from the
       run's version t with the run's frictions, and waits in the run's queue (delay.Schedule)
       until its consumption step;
    2. learn: the chunks due at step t form each run's batch; one forward and one backward of the
       stacked policy give every run's gradient; each run's recipe computes advantages and loss
       and steps the run's own optimizer (K epochs x N minibatches of such steps per batch:
       ``epochs``, ``minibatches``), which produces version t + 1;
    3. log (every ``log_every`` steps and at the end): diagnostics, evaluation, one row per run.

Modules: the loop (this one: `Runner`, which builds the loop, runs its steps, records divergence, evaluates and
gives results), its explicit state (testbed/state.py: `LoopState`, shared by the parts, and each run's
`RunState`), the actors (testbed/actor.py: step 1), the learner (testbed/learner.py: step 2 and the per-step
records; it returns the runs whose update failed), a run's configuration (testbed/config.py: `RunConfig`,
`RunSpec`; imported from there), the checkpoint file (testbed/checkpoint.py) and the slot helpers (testbed/slots.py).

The policy (testbed/tasks/stacked.py) holds one slot per run; slot s depends only on run s, and every
per-run computation (sampling draws, advantages, the loss, gradient transforms, the optimizer) is
that run's alone, so a run trained with others is identical, bit for bit, to the same run alone
(tests/integration/test_one_loop.py). A run that diverges is recorded as diverged and leaves the
batch; the others go on.

Stopping. ``run(stop=...)`` asks ``stop()`` after every step and raises `Interrupted` between two steps when it
says so; `Runner.save` then keeps the whole loop as a state dict of tensors and plain values (parameters,
optimizer and stabilizer state, queued batches, logged rows, random streams: testbed/checkpoint.py) and
`Runner.load` + ``run`` finish it exactly as an uninterrupted loop (testbed/util/stopping.py).

Policy versions. No old parameters are stored: a chunk with lag L is sampled at the moment version
t - L is current and waits in the queue (about 40 bytes per sample on MNIST). Per-token mixed
versions (partial rollouts) work the same way: a chunk's later tokens are sampled at the later
version's event, conditioned on the prefix already sampled (whose keys and values the new version
recomputes, as a rollout engine does after a weight update).

Recorded behaviour log-probs are those of the clean policy of the version that sampled each token;
with inference mismatch or an actor bug the actor *samples* from something else (frictions.py) but
records these, as a real system would.

Randomness (testbed/util/seeding.py): every stream is keyed by (seed, purpose, ...): ``init`` (weights),
``lags``, ``bugs`` (sticky bugs), ``slot, step, actor`` (everything one chunk draws: its contexts,
bug status, token versions, sampling uniforms and friction noise at its start; perturbed weights at
each of its events; reward corruption at its end), ``minibatch, step, epoch`` and ``eval, step``. A
chunk is therefore the same whatever order events happen in and whichever runs share the loop, and
runs that differ only in their delay see the same contexts (common random numbers for paired
comparisons).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from testbed import checkpoint, health
from testbed.actor import Actor
from testbed.config import OPTIMIZERS, SHAPE_FIELDS, Loop, RunConfig, RunSpec, chunk_sizes
from testbed.delay import Schedule
from testbed.learner import Learner, NoCompileAdam, NoCompileSGD, skip_dynamo_import
from testbed.machine import describe
from testbed.slots import call_with
from testbed.stabilizers.spec import SpecError
from testbed.state import Interrupted, LoopState, RunResult, RunState
from testbed.tasks import make_task
from testbed.tasks.base import token_logp
from testbed.util.provenance import machine
from testbed.util.seeding import generator, numpy_rng


class Runner:
    """Trains ``configs`` (one or several runs sharing `SHAPE_FIELDS`) as one computation.

    Its parts: ``loop`` (`LoopState`: task, policy, runs, optimizers, the runs still training), ``actor``
    (`Actor`) and ``learner`` (`Learner`), both working on ``loop``. Hooks for tests and instrumentation:
    ``on_version(run, version, params)`` for every new version of every run (0 first; ``params`` the run's
    parameter dict) and ``on_batch(run, step, batch)`` with every consumed batch before the update.
    """

    def __init__(self, configs: RunConfig | Sequence[RunConfig], task: Any = None,
                 specs: Sequence[RunSpec] | None = None) -> None:
        if specs is None and isinstance(configs, Loop):  # a Loop carries the plan's parsed specs and built task
            specs, task = configs.specs, task if task is not None else configs.task
        configs = [configs] if isinstance(configs, RunConfig) else list(configs)
        if not configs:
            raise ValueError("Runner needs at least one config")
        # ``specs``: the configs already parsed (a sweep's plan parses every config once); each is used by
        # this runner only (a recipe holds one run's state)
        specs = [c.parse() for c in configs] if specs is None else list(specs)
        if len(specs) != len(configs):
            raise ValueError(f"Runner got {len(configs)} configs but {len(specs)} parsed specs")
        for spec in specs[1:]:
            for name, a, b in zip(SHAPE_FIELDS, specs[0].shape, spec.shape, strict=True):
                if a != b:
                    raise SpecError(f"runs trained in one loop must agree on {', '.join(SHAPE_FIELDS)}; they differ in "
                                    f"{name} ({a!r} vs {b!r})")
        ids = [s.run_id for s in specs]
        if len(set(ids)) != len(ids):
            raise SpecError("the same run appears twice in one loop")
        cfg0 = specs[0].config
        task = task if task is not None else make_task(cfg0.task, **specs[0].task_args)
        sizes = chunk_sizes(cfg0.batch_size, cfg0.n_actors)
        policy: nn.Module = task.make_policy([generator(s.config.seed, "init") for s in specs])
        runs: list[RunState] = []
        for i, spec in enumerate(specs):
            cfg = spec.config
            # the run's parameters are its slot of the policy's: leaf views that its optimizer updates in place
            params = {k: v.detach()[i].requires_grad_(True) for k, v in policy.named_parameters()}
            lags = spec.staleness.lags(cfg.steps, cfg.n_actors, numpy_rng(cfg.seed, "lags"))
            sticky = spec.frictions.buggy_actors(cfg.n_actors, generator(cfg.seed, "bugs"))
            runs.append(RunState(spec, Schedule(lags, sizes), sticky, params))
        # one optimizer per kind, one param group (with its own lr) per run: a run's updates are those of an
        # optimizer of its own (Adam's state is per parameter), in one call for all runs
        optimizers: dict[str, torch.optim.Optimizer] = {}
        skip_dynamo_import()
        for kind in OPTIMIZERS:
            of_kind = [run for run in runs if run.cfg.optimizer == kind]
            if not of_kind:
                continue
            groups = [{"params": list(run.params.values()), "lr": run.cfg.lr} for run in of_kind]
            optimizers[kind] = (NoCompileAdam(groups, fused=True) if kind == "adam" else NoCompileSGD(groups))
            for run, group in zip(of_kind, optimizers[kind].param_groups, strict=True):
                run.group = group
        self.loop = LoopState(cfg0, task, policy, runs, optimizers, active=list(range(len(runs))))
        self.actor, self.learner = Actor(self.loop), Learner(self.loop)
        self.on_version: Callable[[int, int, dict[str, Tensor]], None] | None = None
        self.on_batch: Callable[[int, int, dict[str, Tensor]], None] | None = None
        self.next_step = 0  # the first learner step `run` takes (> 0 in a runner restored by `load`)
        self.wall = 0.0  # seconds spent in `run` before an interruption
        # the machines that trained the loop: [{from_step, machine}], a new entry when `run` starts on another
        self.trained_on: list[dict[str, Any]] = []

    # the loop's state, read through the runner
    @property
    def cfg0(self) -> RunConfig:
        return self.loop.cfg0

    @property
    def task(self) -> Any:
        return self.loop.task

    @property
    def policy(self) -> nn.Module:
        return self.loop.policy

    @property
    def runs(self) -> list[RunState]:
        return self.loop.runs

    @property
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return self.loop.optimizers

    @property
    def active(self) -> list[int]:
        """The runs still training, in slot order."""
        return self.loop.active

    # -- interruption: save and load a whole loop -------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The loop between two steps as tensors and plain containers (testbed/checkpoint.py): the runs' ids and
        resolved configs, every run's parameters, stabilizer state, queue, rows and per-step records, the
        optimizers' state and the loop's counters. The task (its data) is rebuilt from the configs, and the
        hooks belong to the caller."""
        runs = [{"params": {k: v.detach() for k, v in run.params.items()}, "recipe": run.recipe.state_dict(),
                 "schedule": run.schedule.state_dict(), "sticky": run.sticky, "rows": run.rows, "status": run.status,
                 "prev_grad": run.prev_grad, "reward_sum": run.reward_sum, "reward_n": run.reward_n,
                 "queue_peak": run.queue_peak, "steps": run.steps, "window": run.window, "lost_final": run.lost_final}
                for run in self.runs]
        return {"run_ids": [run.spec.run_id for run in self.runs], "configs": [run.cfg.to_dict() for run in self.runs],
                "next_step": self.next_step, "wall": self.wall, "active": list(self.active),
                "trained_on": [{**e, "machine": e["machine"] and {k: str(v) for k, v in e["machine"].items()}}
                               for e in self.trained_on],  # (torch's version is a str subclass)
                "optimizers": {k: o.state_dict() for k, o in self.optimizers.items()},
                "runs": runs}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from `state_dict`'s ``state``, in a runner built afresh from the same configs."""
        if self.next_step or len(self.active) != len(self.runs):
            raise ValueError("load_state_dict needs a runner that has not trained yet")
        self.loop.remove([pos for pos in range(len(self.runs)) if pos not in state["active"]])
        with torch.no_grad():
            for run, saved in zip(self.runs, state["runs"], strict=True):
                for name, value in run.params.items():  # the active runs' are views of their slot of the policy
                    value.copy_(saved["params"][name])
        for kind, optimizer in self.optimizers.items():
            optimizer.load_state_dict(state["optimizers"][kind])  # (new param group dicts: the runs take them)
            runs = [run for run in self.runs if run.cfg.optimizer == kind]
            for run, group in zip(runs, optimizer.param_groups, strict=True):
                run.group = group
        for run, saved in zip(self.runs, state["runs"], strict=True):
            run.recipe.load_state_dict(saved["recipe"])
            run.schedule = Schedule.from_state_dict(saved["schedule"])
            for name in ("sticky", "rows", "status", "prev_grad", "reward_sum", "reward_n", "queue_peak", "steps",
                         "window", "lost_final"):
                setattr(run, name, saved[name])
        self.next_step, self.wall, self.trained_on = state["next_step"], state["wall"], state["trained_on"]

    def save(self, path: str | Path) -> None:
        """Write the whole loop (`state_dict`) to ``path`` atomically; only between two steps (after
        `Interrupted`)."""
        checkpoint.write(path, self.state_dict())

    @staticmethod
    def load(path: str | Path, task: Any, run_ids: Sequence[str]) -> Runner:
        """The loop saved at ``path``, rebuilt from its configs with ``task`` (built from the same configs) and
        continued from its state; `checkpoint.CheckpointError` (one line) unless the file holds exactly the runs
        ``run_ids`` (their ids fix config and seed scheme) in the format this code reads."""
        state = checkpoint.read(path, list(run_ids))
        try:
            runner = Runner([RunConfig(**c) for c in state["configs"]], task=task)
            runner.load_state_dict(state)
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError):
            raise checkpoint.CheckpointError(path, checkpoint.UNREADABLE) from None
        if [run.spec.run_id for run in runner.runs] != list(run_ids):
            raise checkpoint.CheckpointError(path, "its configs do not give its run ids")
        return runner

    # -- the policy's slots ------------------------------------------------------------------------
    def params(self, run: int) -> dict[str, Tensor]:
        """The current parameters of run ``run`` (leaf tensors; their shapes are one slot's)."""
        return self.runs[run].params

    def token_logp(self, params: dict[str, Tensor], contexts: Tensor, actions: Tensor) -> Tensor:
        """log pi(a_t | x, a_<t) [S', B, T] under ``params`` (a dict of [S', ...] tensors)."""
        return token_logp(self.task.logits(functools.partial(call_with, self.policy, params), contexts, actions), actions)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, progress: bool = False, stop: Callable[[], bool] | None = None) -> list[RunResult]:
        """Train every run to its last step (or its divergence), from `next_step`; one result per run, in order.
        ``stop``: asked after every step; when it returns True before the last step, `Interrupted` is raised
        with the loop whole between two steps (`save` keeps it)."""
        t0 = time.perf_counter() - self.wall
        if not self.trained_on or describe(self.trained_on[-1]["machine"]) != describe(machine()):
            self.trained_on.append({"from_step": self.next_step, "machine": machine()})
        bar = None
        if progress:
            from tqdm.auto import tqdm

            label = self.runs[0].cfg.recipe if len(self.runs) == 1 else f"{len(self.runs)} runs"
            bar = tqdm(total=self.cfg0.steps, initial=self.next_step, desc=label, leave=False)
        try:
            if self.next_step == 0:
                self.publish(-1)
            for t in range(self.next_step, self.cfg0.steps):
                if not self.active:
                    break
                self.act(t)
                self.learn(t)
                self.publish(t)
                self.next_step = t + 1
                if bar is not None:
                    bar.update(1)
                if stop is not None and self.next_step < self.cfg0.steps and self.active and stop():
                    self.wall = time.perf_counter() - t0
                    raise Interrupted(t)
        finally:
            if bar is not None:
                bar.close()
        return self.results(time.perf_counter() - t0)

    def results(self, wall: float = float("nan")) -> list[RunResult]:
        param_bytes = sum(p.numel() * p.element_size() for p in self.runs[0].params.values())
        n = len(self.runs)
        return [RunResult(r.cfg, r.rows, r.status, {"wall_s": wall / n, "loop_wall_s": wall, "loop_runs": n,
                                                    "queue_peak_bytes": r.queue_peak, "param_bytes": param_bytes,
                                                    **health.run_health(r.steps, r.cfg.steps, r.lost_final),
                                                    **({"trained_on": self.trained_on} if len(self.trained_on) > 1
                                                       else {})},
                          r.steps)
                for r in self.runs]

    def act(self, t: int) -> None:
        """Step 1 of step t: every chunk due at version t is sampled (`Actor.act`)."""
        self.actor.act(t)

    def learn(self, t: int) -> None:
        """Step 2 of step t: every active run's update(s) (`Learner.learn`); a run whose update failed is recorded
        as diverged."""
        for r, step in self.learner.learn(t, self.on_batch):
            self.runs[r].diverge(step)

    def publish(self, t: int) -> None:
        """After update t (t = -1: at the start): every run's version t + 1 is in the policy (each run's optimizer
        updates its slot in place); record runs whose parameters blew up as diverged at update t, and on a
        logged step evaluate and log."""
        if t >= 0:
            for r in self.loop.remove(self.loop.nonfinite()):
                self.runs[r].diverge(t)
        if self.on_version is not None:
            for r in self.active:
                self.on_version(r, t + 1, self.runs[r].params)
        if t >= 0 and self.loop.logs(t) and self.active:
            self._log(t)

    def _log(self, t: int) -> None:
        """Evaluate every active run at its new version and complete its row of step t."""
        with torch.no_grad():
            metrics = self.task.evaluate(self.policy, [generator(self.runs[r].cfg.seed, "eval", t) for r in self.active])
            lost = health.count_lost_classes(self.task, self.policy, len(self.active))
        for pos, r in enumerate(self.active):
            run = self.runs[r]
            if not run.rows or run.rows[-1].get("step") != t + 1:
                continue
            run.rows[-1].update(metrics[pos])
            run.rows[-1]["lost_classes"] = run.lost_final = lost[pos]
            run.rows[-1]["reward_avg"] = float(run.reward_sum) / run.reward_n
            run.reward_sum, run.reward_n = 0.0, 0


def run_many(configs: Sequence[RunConfig], progress: bool = False, task: Any = None) -> list[RunResult]:
    """Train ``configs`` (sharing `SHAPE_FIELDS`) in one loop; results in order, each equal to running it alone."""
    return Runner(configs, task=task).run(progress=progress)


def run(config: RunConfig, progress: bool = False, task: Any = None) -> RunResult:
    """Train one config."""
    return Runner([config], task=task).run(progress=progress)[0]
