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

The policy (testbed/tasks/stacked.py) holds one slot per run; slot s depends only on run s, and every
per-run computation (sampling draws, advantages, the loss, gradient transforms, the optimizer) is
that run's alone, so a run trained with others is identical, bit for bit, to the same run alone
(tests/integration/test_one_loop.py). A run that diverges is recorded as diverged and leaves the
batch; the others go on.

Policy versions. No old parameters are stored: a chunk with lag L is sampled at the moment version
t - L is current and waits in the queue (about 40 bytes per sample on MNIST). Per-token mixed
versions (partial rollouts) work the same way: a chunk's later tokens are sampled at the later
version's event, conditioned on the prefix already sampled (whose keys and values the new version
recomputes, as a rollout engine does after a weight update).

Recorded behaviour log-probs are those of the clean policy of the version that sampled each token;
with inference mismatch or an actor bug the actor *samples* from something else (frictions.py) but
records these, as a real system would.

Randomness (testbed/seeding.py): every stream is keyed by (seed, purpose, ...): ``init`` (weights),
``lags``, ``bugs`` (sticky bugs), ``slot, step, actor`` (everything one chunk draws: its contexts,
bug status, token versions, sampling uniforms and friction noise at its start; perturbed weights at
each of its events; reward corruption at its end), ``minibatch, step, epoch`` and ``eval, step``. A
chunk is therefore the same whatever order events happen in and whichever runs share the loop, and
runs that differ only in their delay see the same contexts (common random numbers for paired
comparisons).
"""

from __future__ import annotations

import functools
import hashlib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from testbed import diagnostics as diag
from testbed import health
from testbed.delay import Chunk, Schedule, Staleness, parse_staleness
from testbed.frictions import Frictions, act, parse_frictions
from testbed.regimes import get_regime
from testbed.seeding import SCHEME, generator, numpy_rng
from testbed.stabilizers import AGG_MODES, PolicyTerms, Recipe, build
from testbed.stabilizers.numerics import sequence_log_ratio
from testbed.stabilizers.spec import SpecError
from testbed.tasks import ExactOracle, make_task, runner_defaults, task_options
from testbed.tasks.base import token_logp

DEFAULTS: dict[str, Any] = {"batch_size": 100, "lr": 1e-3, "n_actors": 1, "agg": "token-mean", "delay": "sync",
                            "group_size": 1, "epochs": 1, "minibatches": 1}
OPTIMIZERS = ("adam", "sgd")
PROXIMAL = ("current", "none")
# How a batch is cut into minibatches: "groups" = contiguous runs of whole prompt groups, in order, the same
# order every epoch (verl: ppo_mini_batch_size x n, no shuffling across groups); "random" = a fresh permutation
# of the samples per epoch (groups split across minibatches).
MINIBATCH_SPLITS = ("groups", "random")
# Fields left out of the run id at these values (runs recorded before the field existed keep their ids).
_ID_OMITTED = {"minibatch_split": "random"}
# Fields that fix the shape of the computation: runs trained in one loop must agree on them.
SHAPE_FIELDS = ("task", "task_args", "steps", "log_every", "batch_size", "n_actors", "epochs",
                "minibatches")


@dataclass
class RunConfig:
    """Everything that determines a run (its hash is the run id). ``None`` = the task's default.

    ``proximal="current"``: the proximal policy of decoupled PPO is the learner's policy at the start
    of the batch (AReaL's definition; with one step per batch, the current policy). ``epochs`` x
    ``minibatches`` optimizer steps per batch (PPO/GRPO trainers' regime; 1 x 1 is one step per batch).
    ``minibatch_split`` (`MINIBATCH_SPLITS`): default ``groups`` wherever groups exist (group_size > 1),
    else ``random``.
    """

    task: str = "mnist"
    recipe: str = "pg"
    delay: str | None = None
    frictions: str = "none"
    seed: int = 0
    steps: int = 1000
    batch_size: int | None = None
    lr: float | None = None
    n_actors: int | None = None
    group_size: int | None = None
    epochs: int | None = None
    minibatches: int | None = None
    log_every: int = 100
    agg: str | None = None
    optimizer: str = "adam"
    proximal: str = "current"
    regime: str = "one_step"
    minibatch_split: str | None = None
    task_args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def resolved(self) -> RunConfig:
        """A copy with every ``None`` filled from the regime (testbed/regimes.py), then the task's
        ``runner_defaults``, then DEFAULTS."""
        values = asdict(self)
        preset = get_regime(self.regime).for_task(self.task)
        task_defaults = runner_defaults(self.task)
        for key, value in values.items():
            if value is None:
                values[key] = preset.get(key, task_defaults.get(key, DEFAULTS.get(key)))
        if values["minibatch_split"] is None:
            values["minibatch_split"] = "groups" if values["group_size"] > 1 else "random"
        values["task_args"] = dict(sorted(values["task_args"].items()))
        return RunConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def run_id(self) -> str:
        """Hash of the resolved config and the seed scheme: the key under which results are stored."""
        payload = {**asdict(self.resolved()), "seed_scheme": SCHEME}
        for key, value in _ID_OMITTED.items():
            if payload[key] == value:
                del payload[key]
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def parse(self) -> RunSpec:
        """Check every field and parse every spec once; the typed result the runner uses."""
        task_options(self.task)  # raises for an unknown task
        cfg = self.resolved()
        from testbed.tasks import coerce_option

        task_args = {k: coerce_option(cfg.task, k, v) for k, v in cfg.task_args.items()}
        ints = ("steps", "batch_size", "n_actors", "group_size", "epochs", "minibatches", "log_every")
        for name in ints:
            value = getattr(cfg, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
            raise SpecError(f"seed must be an integer >= 0, got {cfg.seed!r}")
        if isinstance(cfg.lr, bool) or not isinstance(cfg.lr, int | float) or not 0 < cfg.lr < float("inf"):
            raise SpecError(f"lr must be a finite number > 0, got {cfg.lr!r}")
        for name, allowed in (("agg", AGG_MODES), ("optimizer", OPTIMIZERS), ("proximal", PROXIMAL),
                              ("minibatch_split", MINIBATCH_SPLITS)):
            if getattr(cfg, name) not in allowed:
                raise SpecError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
        if cfg.batch_size < cfg.n_actors:
            raise SpecError(f"batch_size ({cfg.batch_size}) must be >= n_actors ({cfg.n_actors})")
        sizes = chunk_sizes(cfg.batch_size, cfg.n_actors)
        if any(size % cfg.group_size for size in sizes):
            raise SpecError(f"group_size {cfg.group_size} must divide every actor's share of the batch ({sizes})")
        if cfg.batch_size % cfg.minibatches:
            raise SpecError(f"minibatches ({cfg.minibatches}) must divide batch_size ({cfg.batch_size})")
        if cfg.minibatch_split == "groups" and (cfg.batch_size // cfg.minibatches) % cfg.group_size:
            raise SpecError(f"minibatch_split 'groups' needs whole groups in every minibatch: minibatches "
                            f"({cfg.minibatches}) must divide the number of groups per batch "
                            f"({cfg.batch_size}/{cfg.group_size}); or use minibatch_split 'random'")
        return RunSpec(cfg, build(cfg.recipe), parse_staleness(cfg.delay), parse_frictions(cfg.frictions), task_args)

    def validate(self) -> RunConfig:
        """Check every field (building the recipe, parsing the specs); return the resolved config."""
        return self.parse().config


@dataclass
class RunSpec:
    """A run's config with its specs parsed: the recipe (fresh state: one run's), staleness model,
    frictions and task options as typed objects."""

    config: RunConfig  # resolved
    recipe: Recipe
    staleness: Staleness
    frictions: Frictions
    task_args: dict[str, Any]

    @property
    def shape(self) -> tuple:
        """What runs trained in one loop must share (`SHAPE_FIELDS`)."""
        cfg = self.config
        return tuple(sorted(self.task_args.items()) if f == "task_args" else getattr(cfg, f) for f in SHAPE_FIELDS)


def chunk_sizes(batch_size: int, n_actors: int) -> list[int]:
    """How a batch is split among actors: as evenly as possible, the first ones one larger."""
    base, extra = divmod(batch_size, n_actors)
    return [base + (1 if a < extra else 0) for a in range(n_actors)]


@dataclass
class RunResult:
    config: RunConfig  # resolved
    rows: list[dict[str, Any]]
    status: str  # "ok" or "diverged"
    info: dict[str, Any]
    steps: list[dict[str, Any]] = field(default_factory=list)  # per optimizer step (testbed/health.py)


class Diverged(Exception):
    """A run's loss, gradient or parameters became non-finite (or its optimizer overflowed)."""


@dataclass
class _Run:
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


@dataclass
class _Work:
    """The learner's view of one step's batches, by slot position (filtered when a run leaves)."""

    t: int
    batches: list[dict[str, Tensor]]
    x: Tensor  # [S, B, ...] contexts
    a: Tensor  # [S, B, T] actions
    start_logp: Tensor | None = None  # [S, B, T] under the policy at the start of the batch (K x N > 1)
    score: Tensor | None = None  # [S, B] per-sample squared score norms (OPOB)
    order: Tensor | None = None  # [S, B] this epoch's minibatch permutation
    advantages: list[Tensor] = field(default_factory=list)

    def keep(self, positions: list[int]) -> None:
        idx = torch.tensor(positions, dtype=torch.long)
        self.batches = [self.batches[p] for p in positions]
        self.x, self.a = self.x.index_select(0, idx), self.a.index_select(0, idx)
        for name in ("start_logp", "score", "order"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, idx))
        self.advantages = [self.advantages[p] for p in positions if p < len(self.advantages)]


def _cat(tensors: list[Tensor]) -> Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def _stack(tensors: list[Tensor]) -> Tensor:
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


class Runner:
    """Trains ``configs`` (one or several runs sharing `SHAPE_FIELDS`) as one computation.

    Hooks for tests and instrumentation: ``on_version(run, version, params)`` for every new version
    of every run (0 first; ``params`` the run's parameter dict) and ``on_batch(run, step, batch)``
    with every consumed batch before the update.
    """

    def __init__(self, configs: RunConfig | Sequence[RunConfig], task: Any = None,
                 specs: Sequence[RunSpec] | None = None) -> None:
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
        ids = [s.config.run_id for s in specs]
        if len(set(ids)) != len(ids):
            raise SpecError("the same run appears twice in one loop")
        cfg0 = specs[0].config
        self.cfg0 = cfg0
        self.task = task if task is not None else make_task(cfg0.task, **specs[0].task_args)
        self.horizon, self.n_actions = int(self.task.horizon), int(self.task.n_actions)
        self.sizes = chunk_sizes(cfg0.batch_size, cfg0.n_actors)
        self.policy: nn.Module = self.task.make_policy([generator(s.config.seed, "init") for s in specs])
        self.runs: list[_Run] = []
        for i, spec in enumerate(specs):
            cfg = spec.config
            # the run's parameters are its slot of the policy's: leaf views that its optimizer updates in place
            params = {k: v.detach()[i].requires_grad_(True) for k, v in self.policy.named_parameters()}
            lags = spec.staleness.lags(cfg.steps, cfg.n_actors, numpy_rng(cfg.seed, "lags"))
            sticky = spec.frictions.buggy_actors(cfg.n_actors, generator(cfg.seed, "bugs"))
            self.runs.append(_Run(spec, Schedule(lags, self.sizes), sticky, params))
        # one optimizer per kind, one param group (with its own lr) per run: a run's updates are those of an
        # optimizer of its own (Adam's state is per parameter), in one call for all runs
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        _skip_dynamo_import()
        for kind in OPTIMIZERS:
            runs = [run for run in self.runs if run.cfg.optimizer == kind]
            if not runs:
                continue
            groups = [{"params": list(run.params.values()), "lr": run.cfg.lr} for run in runs]
            self.optimizers[kind] = (_Adam(groups, fused=True) if kind == "adam" else _SGD(groups))
            for run, group in zip(runs, self.optimizers[kind].param_groups, strict=True):
                run.group = group
        self.active = list(range(len(self.runs)))  # runs still training, in slot order
        self.oracle = self.horizon == 1 and isinstance(self.task, ExactOracle)
        self.on_version: Callable[[int, int, dict[str, Tensor]], None] | None = None
        self.on_batch: Callable[[int, int, dict[str, Tensor]], None] | None = None

    # -- the policy's slots ------------------------------------------------------------------------
    def params(self, run: int) -> dict[str, Tensor]:
        """The current parameters of run ``run`` (leaf tensors; their shapes are one slot's)."""
        return self.runs[run].params

    def _nonfinite(self) -> list[int]:
        """Slot positions whose parameters have blown up: some tensor's L2 norm is not finite in float32
        (NaN, inf, or entries so large that their squares overflow)."""
        if not self.active:
            return []
        with torch.no_grad():
            norms = torch.stack([torch.linalg.vector_norm(p.flatten(1), dim=1) for p in self.policy.parameters()])
            ok = torch.isfinite(norms).all(0)
        return [pos for pos, good in enumerate(ok.tolist()) if not good]

    def _view(self, slots: list[int]) -> Callable[..., Any]:
        """The policy restricted to the given slot positions (all of them: the policy itself)."""
        if len(slots) == len(self.active):
            return self.policy
        idx = torch.tensor(slots)
        params = {k: v.index_select(0, idx) for k, v in self.policy.named_parameters()}
        return functools.partial(_call, self.policy, params)

    def token_logp(self, params: dict[str, Tensor], contexts: Tensor, actions: Tensor) -> Tensor:
        """log pi(a_t | x, a_<t) [S', B, T] under ``params`` (a dict of [S', ...] tensors)."""
        return token_logp(self.task.logits(functools.partial(_call, self.policy, params), contexts, actions), actions)

    # -- the loop ------------------------------------------------------------------------------------
    def run(self, progress: bool = False) -> list[RunResult]:
        """Train every run to its last step (or its divergence); one result per run, in order."""
        t0 = time.perf_counter()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            label = self.runs[0].cfg.recipe if len(self.runs) == 1 else f"{len(self.runs)} runs"
            bar = tqdm(total=self.cfg0.steps, desc=label, leave=False)
        try:
            self.publish(-1)
            for t in range(self.cfg0.steps):
                if not self.active:
                    break
                self.act(t)
                self.learn(t)
                self.publish(t)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        return self.results(time.perf_counter() - t0)

    def results(self, wall: float = float("nan")) -> list[RunResult]:
        param_bytes = sum(p.numel() * p.element_size() for p in self.runs[0].params.values())
        n = len(self.runs)
        return [RunResult(r.cfg, r.rows, r.status, {"wall_s": wall / n, "loop_wall_s": wall, "loop_runs": n,
                                                    "queue_peak_bytes": r.queue_peak, "param_bytes": param_bytes,
                                                    **health.run_health(r.steps, r.cfg.steps, r.lost_final)},
                          r.steps)
                for r in self.runs]

    def publish(self, t: int) -> None:
        """After update t (t = -1: at the start): every run's version t + 1 is in the policy (each run's optimizer
        updates its slot in place); record runs whose parameters blew up as diverged at update t, and on a
        logged step evaluate and log."""
        if t >= 0:
            self._drop(self._nonfinite(), t)
        if self.on_version is not None:
            for r in self.active:
                self.on_version(r, t + 1, self.runs[r].params)
        if t >= 0 and self._logs(t) and self.active:
            self._log(t)

    def _logs(self, t: int) -> bool:
        return (t + 1) % self.cfg0.log_every == 0 or t + 1 == self.cfg0.steps

    def _drop(self, positions: list[int], step: int) -> None:
        """Record the runs at these slot positions as diverged at update ``step`` and take them out."""
        for pos in positions:
            self._record_divergence(self.runs[self.active[pos]], step)
        self._remove(positions)

    @staticmethod
    def _record_divergence(run: _Run, step: int) -> None:
        run.status = "diverged"
        while run.rows and run.rows[-1].get("step", 0) > step:
            run.rows.pop()  # rows of updates at or after the one that diverged
        run.rows.append({"step": step + 1, "diverged_at": step + 1})

    def _remove(self, positions: list[int]) -> None:
        if not positions:
            return
        keep = [pos for pos in range(len(self.active)) if pos not in positions]
        self.active = [self.active[pos] for pos in keep]
        idx = torch.tensor(keep, dtype=torch.long)
        with torch.no_grad():
            for name, p in self.policy.named_parameters():
                p.data = p.data.index_select(0, idx)
                p.grad = None
                for pos, r in enumerate(self.active):  # the remaining runs' parameters: views of the new slots
                    self.runs[r].params[name].data = p.data[pos]

    # -- actors --------------------------------------------------------------------------------------
    def _start(self, run: _Run, chunk: Chunk) -> None:
        """A chunk's first event: contexts, bug status, token versions and its pre-drawn randomness."""
        cfg, spec = run.cfg, run.spec
        gen = generator(cfg.seed, "slot", chunk.step, chunk.actor)
        g = cfg.group_size
        contexts = self.task.sample_contexts(chunk.size // g, gen, "train")
        if g > 1:
            contexts = contexts.repeat_interleave(g, dim=0)
            chunk.group_ids = torch.arange(chunk.size // g).repeat_interleave(g)
        chunk.contexts = contexts
        chunk.buggy = spec.frictions.is_buggy(chunk.actor, run.sticky, gen)
        shape = (chunk.size, self.horizon)
        mixed = spec.staleness.token_versions(chunk.start, chunk.step, shape, gen)
        chunk.versions = torch.full(shape, chunk.start, dtype=torch.long) if mixed is None else torch.from_numpy(mixed)
        chunk.actions = torch.zeros(shape, dtype=torch.long)
        chunk.behavior_logp = torch.zeros(shape, dtype=torch.float32)
        chunk.state = {"gen": gen, **spec.frictions.draws(chunk.size, self.horizon, self.n_actions, chunk.buggy, gen)}

    def act(self, t: int) -> None:
        """Sample every chunk due at version t, all runs with the same job shape in one computation."""
        jobs: dict[tuple[int, int, int], list[tuple[int, list[Chunk]]]] = defaultdict(list)
        for pos, r in enumerate(self.active):
            run = self.runs[r]
            chunks = run.schedule.due(t)
            if not chunks:
                continue
            for chunk in chunks:
                if chunk.contexts is None:
                    self._start(run, chunk)
            due = torch.cat([c.versions == t for c in chunks]) if len(chunks) > 1 else chunks[0].versions == t
            cols = due.any(0).nonzero().flatten()
            key = (int(due.shape[0]), int(cols[0]), int(cols[-1]))
            jobs[key].append((pos, chunks))
        for (_, k0, k1), group in jobs.items():
            self._sample(t, group, k0, k1)
        if self._logs(t):
            for r in self.active:
                run = self.runs[r]
                run.queue_peak = max(run.queue_peak, run.schedule.pending_bytes())

    def _sample(self, t: int, group: list[tuple[int, list[Chunk]]], k0: int, k1: int) -> None:
        """Sample positions k0..k1 of the due rows of every chunk in ``group`` ([(slot position, chunks)])."""
        slots = [pos for pos, _ in group]
        policy = self._view(slots)
        runs = [self.runs[self.active[pos]] for pos in slots]
        allc = [c for _, chunks in group for c in chunks]

        def gather(get: Callable[[Chunk], Tensor]) -> Tensor:
            return _stack([_cat([get(c) for c in chunks]) for _, chunks in group])

        def temperature(run: _Run, chunks: list[Chunk]) -> Tensor:
            return _cat([torch.full((c.size, 1), run.spec.frictions.temperature(c.buggy)) for c in chunks])

        x = gather(lambda c: c.contexts)
        actions = gather(lambda c: c.actions)
        blogp = gather(lambda c: c.behavior_logp)
        due = gather(lambda c: c.versions == t)
        u = gather(lambda c: c.state["u"])
        temp = noise = flip = rand = None
        if any(run.spec.frictions.temperature(c.buggy) != 1.0 for run, (_, chunks) in zip(runs, group, strict=True)
               for c in chunks):
            temp = _stack([temperature(run, chunks) for run, (_, chunks) in zip(runs, group, strict=True)])
        if any("noise" in c.state for c in allc):
            noise = gather(lambda c: c.state.get("noise", torch.zeros((c.size, self.horizon, self.n_actions))))
        if any("flip" in c.state for c in allc):
            flip = gather(lambda c: c.state.get("flip", torch.zeros((c.size, self.horizon), dtype=torch.bool)))
            rand = gather(lambda c: c.state.get("random", torch.zeros((c.size, self.horizon), dtype=torch.long)))
        perturbed = self._perturbed(t, group, runs, k0)
        with torch.no_grad():
            state = self.task.decode_state(policy, x, actions, k0)
            for k in range(k0, k1 + 1):
                logits, state = self.task.decode(policy, state, actions, k)
                acting = logits
                if perturbed:
                    acting = logits.clone()
                    for (g, lo, hi), (view, pstate) in list(perturbed.items()):
                        plogits, pstate = self.task.decode(view, pstate, actions[g : g + 1, lo:hi], k)
                        perturbed[(g, lo, hi)] = (view, pstate)
                        acting[g, lo:hi] = plogits[0]
                a = act(acting, u[..., k], temp, None if noise is None else noise[..., k, :],
                        None if flip is None else flip[..., k], None if rand is None else rand[..., k])
                d = due[..., k]
                actions[..., k] = torch.where(d, a, actions[..., k])
                blogp[..., k] = torch.where(d, token_logp(logits.unsqueeze(-2), a.unsqueeze(-1)).squeeze(-1), blogp[..., k])
        for g, ((_, chunks), run) in enumerate(zip(group, runs, strict=True)):
            lo = 0
            for c in chunks:
                c.actions, c.behavior_logp = actions[g, lo : lo + c.size], blogp[g, lo : lo + c.size]
                lo += c.size
                later = c.versions[c.versions > t]
                if later.numel():
                    run.schedule.defer(c, int(later.min()))
                else:
                    self._finish(run, c)

    def _perturbed(self, t: int, group: list, runs: list[_Run], k0: int) -> dict:
        """For chunks sampled by a ``perturb`` bug: a view of the policy with that run's weights perturbed
        (drawn now from the chunk's stream) and its decode state, keyed by (group row, first, last row)."""
        out = {}
        for g, ((pos, chunks), run) in enumerate(zip(group, runs, strict=True)):
            lo = 0
            for c in chunks:
                if c.buggy and run.spec.frictions.bug.kind == "perturb":
                    params = {k: v[pos : pos + 1] for k, v in self.policy.named_parameters()}
                    noisy = run.spec.frictions.perturbed(params, c.state["gen"])
                    view = functools.partial(_call, self.policy, noisy)
                    x, a = c.contexts.unsqueeze(0), c.actions.unsqueeze(0)
                    out[(g, lo, lo + c.size)] = (view, self.task.decode_state(view, x, a, k0))
                lo += c.size
        return out

    def _finish(self, run: _Run, chunk: Chunk) -> None:
        """A chunk's last event: its rewards (true and as shown to the learner)."""
        with torch.no_grad():
            chunk.true_rewards = self.task.reward(chunk.contexts, chunk.actions).to(torch.float32)
        chunk.rewards = run.spec.frictions.corrupt_rewards(chunk.true_rewards, chunk.state["gen"])
        chunk.actions, chunk.behavior_logp = chunk.actions.clone(), chunk.behavior_logp.clone()
        chunk.state = {}

    # -- learner -------------------------------------------------------------------------------------
    def _batch(self, run: _Run, chunks: list[Chunk]) -> dict[str, Tensor]:
        batch = {name: _cat([getattr(c, name) for c in chunks]) for name in
                 ("contexts", "actions", "behavior_logp", "versions", "rewards", "true_rewards")}
        g = run.cfg.group_size
        if g > 1:
            offsets, gids = 0, []
            for c in chunks:
                gids.append(c.group_ids + offsets)
                offsets += c.size // g
            batch["group_ids"] = torch.cat(gids)
        batch["buggy_frac"] = sum(c.size for c in chunks if c.buggy) / sum(c.size for c in chunks)  # type: ignore[assignment]
        return batch

    def learn(self, t: int) -> None:
        """Every active run's update(s) from its batch of step t: epochs x minibatches optimizer steps."""
        cfg0 = self.cfg0
        log_now = self._logs(t)
        batches = []
        for r in self.active:
            run = self.runs[r]
            batch = self._batch(run, run.schedule.take(t))
            run.reward_sum = run.reward_sum + batch["true_rewards"].mean()
            run.reward_n += 1
            if self.on_batch is not None:
                self.on_batch(r, t, batch)
            batches.append(batch)
        work = _Work(t, batches, _stack([b["contexts"] for b in batches]), _stack([b["actions"] for b in batches]))
        n_steps = cfg0.epochs * cfg0.minibatches
        with torch.no_grad():
            if n_steps > 1:  # the policy at the start of the batch: advantages and the proximal policy
                work.start_logp = token_logp(self.task.logits(self.policy, work.x, work.a), work.a)
        if any(self.runs[r].recipe.needs_score_norms for r in self.active):
            work.score = diag.score_sq_norms(self.task, self.policy, work.x, work.a)
        step = 0
        for epoch in range(cfg0.epochs):
            work.order = self._minibatch_order(t, epoch) if cfg0.minibatches > 1 else None
            for mb in range(cfg0.minibatches):
                last = step == n_steps - 1
                if step > 0:
                    self._drop_and_filter([(pos, t) for pos in self._nonfinite()], work)
                if not self.active:
                    return
                size = cfg0.batch_size // cfg0.minibatches
                idx = None if work.order is None else work.order[:, mb * size : (mb + 1) * size]
                failed = self._update(work, idx, log_now and last, (epoch, mb))
                self._drop_and_filter(failed, work)
                step += 1

    def _drop_and_filter(self, failed: list[tuple[int, int]], work: _Work) -> None:
        if failed:
            positions = [pos for pos, _ in failed]
            keep = [pos for pos in range(len(self.active)) if pos not in positions]
            for pos, step in failed:
                self._record_divergence(self.runs[self.active[pos]], step)
            self._remove(positions)
            work.keep(keep)

    def _minibatch_order(self, t: int, epoch: int) -> Tensor:
        """Each active run's order of its batch's rows for this epoch [S, B]: with ``minibatch_split``
        ``groups`` the batch's own order (groups are contiguous rows, so consecutive minibatches hold whole,
        disjoint groups), with ``random`` a permutation from the run's own stream."""
        b = self.cfg0.batch_size
        return torch.stack([torch.arange(b) if self.runs[r].cfg.minibatch_split == "groups" else
                            torch.randperm(b, generator=generator(self.runs[r].cfg.seed, "minibatch", t, epoch))
                            for r in self.active])

    def _update(self, work: _Work, idx: Tensor | None, log_now: bool, where: tuple[int, int]) -> list[tuple[int, int]]:
        """One optimizer step of every active run (``idx`` [S, b]: this minibatch's rows of each batch;
        ``where``: (epoch, minibatch)); returns (slot position, step of the update that diverged) of the runs
        that diverged."""
        t = work.t
        params = list(self.policy.parameters())
        for p in params:
            p.grad = None
        xs, as_ = (work.x, work.a) if idx is None else (_take(work.x, idx), _take(work.a, idx))
        logits = self.task.logits(self.policy, xs, as_)
        logp = token_logp(logits, as_)
        losses, outs, terms_of = [], [], []
        for pos, r in enumerate(self.active):
            run, batch = self.runs[r], work.batches[pos]
            rows = slice(None) if idx is None else idx[pos]
            start = logp[pos].detach() if work.start_logp is None else work.start_logp[pos]
            if len(work.advantages) <= pos:
                work.advantages.append(run.recipe.advantages(
                    batch["rewards"], group_ids=batch.get("group_ids"), logp=start, behavior_logp=batch["behavior_logp"],
                    mask=torch.ones_like(start, dtype=torch.bool), score_sq_norms=None if work.score is None else work.score[pos]))
            group_ids = batch.get("group_ids")
            terms = PolicyTerms(logp[pos], batch["behavior_logp"][rows], work.advantages[pos][rows],
                                torch.ones_like(logp[pos], dtype=torch.bool),
                                proximal_logp=start[rows] if run.cfg.proximal == "current" else None,
                                versions=batch["versions"][rows], group_ids=None if group_ids is None else group_ids[rows],
                                rewards=batch["rewards"][rows])
            out = run.recipe.loss(terms, run.cfg.agg, nan_policy="ignore")  # logp and the loss are checked here
            losses.append(out.loss)
            outs.append(out)
            terms_of.append(terms)
        total = torch.stack(losses)
        finite = (torch.isfinite(total) & torch.isfinite(logp.detach()).flatten(1).all(1)).tolist()
        # (a version whose parameters blew up never gets here: `publish` removed it; so a non-finite loss or
        # log-prob is this update's: finite parameters whose forward overflowed, or a surrogate's)
        failed = [pos for pos, good in enumerate(finite) if not good]
        diverged = [(pos, t) for pos in failed]
        ok = [pos for pos in range(len(self.active)) if pos not in failed]
        if not ok:
            return diverged
        total[ok].sum().backward()
        oracle = diag.oracle_gradients(self.task, self.policy, xs) if log_now and self.oracle else None
        entries: dict[str, list] = defaultdict(list)
        rows: dict[int, dict[str, Any]] = {}
        records: dict[int, dict[str, Any]] = {}
        for pos in ok:
            run = self.runs[self.active[pos]]
            leaves = run.group["params"]
            for leaf, p in zip(leaves, params, strict=True):
                # transforms edit gradients in place: give them their own memory, as a run alone has
                leaf.grad = p.grad[pos].clone() if run.recipe.transforms else p.grad[pos]
            grad = diag.flat_grad(leaves)
            records[pos] = self._step_record(t, where, logits[pos], logp[pos].detach(), terms_of[pos], grad,
                                             run.prev_grad)
            if log_now:
                rows[pos] = self._diagnostics(t, work.batches[pos], logp[pos].detach(), terms_of[pos].behavior_logp,
                                              outs[pos], grad, run.prev_grad,
                                              None if oracle is None else (oracle[0][pos], oracle[1][pos]))
            run.prev_grad = grad
            entries[run.cfg.optimizer].append((pos, (run.recipe, run.group, terms_of[pos])))
        for kind, items in entries.items():
            metrics = Recipe.step_groups(self.optimizers[kind], [entry for _, entry in items])
            for (pos, _), m in zip(items, metrics, strict=True):
                run = self.runs[self.active[pos]]
                rec = records[pos]
                rec["projected"] = float(m["projected"]) if "projected" in m else float("nan")
                rec["skipped"] = float(m["skipped"]) if "skipped" in m else float("nan")
                run.steps.append(rec)
                if pos in rows:
                    window = health.window_summary(run.steps[run.window:])
                    run.window = len(run.steps)
                    run.rows.append({**{k: float(v) for k, v in m.items()}, **rows[pos], **window})
        for p in params:
            p.grad = None
        for pos in ok:
            for leaf in self.runs[self.active[pos]].group["params"]:
                leaf.grad = None
        return diverged

    @staticmethod
    def _step_record(t: int, where: tuple[int, int], logits: Tensor, logp: Tensor, terms: PolicyTerms, grad: Tensor,
                     prev_grad: Tensor | None) -> dict[str, Any]:
        """The cheap per-optimizer-step record of one run (testbed/health.py)."""
        seq_lr = sequence_log_ratio(logp, terms.behavior_logp, torch.ones_like(logp, dtype=torch.bool))
        stats = diag.ratio_stats(logp - terms.behavior_logp, seq_lr)
        norm = float(torch.linalg.vector_norm(grad))
        entropy, max_prob = health.policy_sharpness(logits)
        return {"step": t + 1, "epoch": where[0], "minibatch": where[1],
                "kind": "within" if where != (0, 0) else "across",
                "grad_cos": diag.cosine(grad, prev_grad) if prev_grad is not None else float("nan"),
                "grad_norm": norm, "zero_grad": float(norm == 0.0), "ess": stats["ess"],
                "ratio_max": float(stats["behav_ratio_max"]),
                "logratio_q95": float(torch.quantile((logp - terms.behavior_logp).flatten().double(), 0.95)),
                "zero_adv_frac": health.zero_fraction(terms.advantages),
                "entropy": entropy, "max_prob": max_prob}

    def _diagnostics(self, t: int, batch: dict, logp: Tensor, blogp: Tensor, out: Any, grad: Tensor,
                     prev_grad: Tensor | None, oracle: tuple[Tensor, Tensor] | None) -> dict[str, Any]:
        lags = (t - batch["versions"]).float()
        seq_lr = sequence_log_ratio(logp, blogp, torch.ones_like(logp, dtype=torch.bool))
        row: dict[str, Any] = {
            "step": t + 1,
            "loss": float(out.loss.detach()),
            "reward": float(batch["rewards"].mean()),
            "true_reward": float(batch["true_rewards"].mean()),
            "lag_mean": float(lags.mean()),
            "lag_max": int(lags.max()),
            "buggy_frac": batch["buggy_frac"],
            "grad_norm": float(torch.linalg.vector_norm(grad)),
            "grad_cos_prev": diag.cosine(grad, prev_grad) if prev_grad is not None else float("nan"),
            **{k: float(v) for k, v in out.metrics.items()},
            **diag.ratio_stats(logp - blogp, seq_lr),
        }
        if oracle is not None:
            row["cos_true_pg"] = diag.cosine(grad, oracle[0])
            row["cos_ce"] = diag.cosine(grad, oracle[1])
        return row

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


class _Adam(torch.optim.Adam):
    """torch's Adam, stepped without its compile wrapper (which imports torch._dynamo: `_skip_dynamo_import`);
    the wrapper's only effect outside torch.compile is to run the step without autograd, done here."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        return torch.optim.Adam.step.__wrapped__(self, closure)


class _SGD(torch.optim.SGD):
    """torch's SGD, stepped like `_Adam`."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        return torch.optim.SGD.step.__wrapped__(self, closure)


@functools.cache
def _skip_dynamo_import() -> None:
    """Let torch's optimizers run without importing torch._dynamo (about 2 s of CPU, most of a short run's
    start-up). Optimizer methods such as ``add_param_group`` are wrapped by ``torch._compile._disable_dynamo``,
    whose wrapper imports torch._dynamo on its first call only to mark the method as not to be compiled, and
    caches the result on the method as ``__dynamo_disable``. The runner never compiles, so the method itself is
    cached there: the same code runs, and torch._dynamo is imported only by whoever compiles."""
    from torch import _compile

    marker = _compile._disable_dynamo(lambda: None).__code__
    for cls in (torch.optim.Optimizer, torch.optim.Adam, torch.optim.SGD):
        for attr in vars(cls).values():
            inner = getattr(attr, "__wrapped__", None)
            if getattr(attr, "__code__", None) is marker and inner is not None and "torch._dynamo" not in sys.modules:
                inner.__dynamo_disable = inner


def _call(module: nn.Module, params: dict[str, Tensor], *args: Any, **kwargs: Any) -> Any:
    return functional_call(module, params, args, kwargs)


def _take(x: Tensor, idx: Tensor) -> Tensor:
    """Rows ``idx[s]`` of every slot s of ``x`` [S, B, ...] -> [S, b, ...]."""
    return torch.stack([x[s].index_select(0, idx[s]) for s in range(x.shape[0])])


def run_many(configs: Sequence[RunConfig], progress: bool = False, task: Any = None) -> list[RunResult]:
    """Train ``configs`` (sharing `SHAPE_FIELDS`) in one loop; results in order, each equal to running it alone."""
    return Runner(configs, task=task).run(progress=progress)


def run(config: RunConfig, progress: bool = False, task: Any = None) -> RunResult:
    """Train one config."""
    return Runner([config], task=task).run(progress=progress)[0]
