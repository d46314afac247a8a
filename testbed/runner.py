"""The delay-controlled simulator: actors -> delay -> learner -> stabilizer -> optimizer.

One run = one `RunConfig`. The loop, for learner step t = 0 .. steps - 1 (the current parameters
are version t)::

    1. actor events at version t: every actor chunk whose (next) tokens are due at version t is
       sampled *now*, autoregressively from task.logits under version t, with the run's frictions,
       and queued until its consumption step;
    2. learner step t: the chunks of the n_actors actors due at step t form the batch; the recipe
       computes advantages, the loss (the learner's log-probs under version t, with gradients) and
       the update, which produces version t + 1.

Policy versions. The policy is a parameter dict evaluated with ``torch.func.functional_call``
(nothing else holds state), so the runner stores no old versions at all: a chunk with lag L is
generated at the moment version t - L is current and waits in the queue. What the queue holds per
sample is the context (an index for MNIST), T actions, T behaviour log-probs, T versions and two
rewards: about 40 bytes per sample on MNIST (T = 1), so D = 1000 with batch 100 costs ~4 MB instead
of the ~320 MB that 1001 copies of the 79,510-parameter MLP would take. Per-token mixed versions
(partial rollouts) work the same way: a chunk's later tokens are sampled at the later version's
event, conditioned on the prefix already sampled.

Recorded behaviour log-probs are those of the clean policy of the version that sampled each token;
with inference mismatch or an actor bug the actor *samples* from something else (frictions.py) but
records these, as a real system would.

Randomness is derived from (seed, purpose, step, actor), never from a shared stream, so a chunk is
the same whatever order events happen in: with lag 0 the pipeline reproduces a plain on-policy loop
exactly (tests/integration/test_runner.py). Per chunk (step t, actor a) the generator
``slot_generator(seed, t, a)`` is used, in order, for: the contexts (``task.sample_contexts``),
the bug draw (only with a non-sticky bug friction), the per-token versions (only with
``+mixed:q``), the perturbed weights (perturb bug), then per token the mismatch noise, the action
(``torch.multinomial``) and the random-action draws, then the reward corruption.
"""

from __future__ import annotations

import hashlib
import json
import time
import zlib
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import functional_call

from testbed import diagnostics as diag
from testbed.delay import parse_staleness
from testbed.frictions import parse_frictions
from testbed.stabilizers import AGG_MODES, PolicyTerms, build
from testbed.stabilizers.numerics import sequence_log_ratio
from testbed.tasks import make_task, runner_defaults, task_options

DEFAULTS: dict[str, Any] = {"batch_size": 100, "lr": 1e-3, "n_actors": 1, "agg": "token-mean"}
OPTIMIZERS = ("adam", "sgd")


@dataclass
class RunConfig:
    """Everything that determines a run (its hash is the run id). ``None`` = the task's default."""

    task: str = "mnist"
    recipe: str = "pg"
    delay: str = "sync"
    frictions: str = "none"
    seed: int = 0
    steps: int = 1000
    batch_size: int | None = None
    lr: float | None = None
    n_actors: int | None = None
    group_size: int = 1
    log_every: int = 100
    agg: str | None = None
    optimizer: str = "adam"
    proximal: str = "current"
    task_args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def resolved(self) -> RunConfig:
        """A copy with every ``None`` filled from the task's ``runner_defaults`` and then DEFAULTS."""
        values = asdict(self)
        task_defaults = runner_defaults(self.task)
        for key, value in values.items():
            if value is None:
                values[key] = task_defaults.get(key, DEFAULTS.get(key))
        values["task_args"] = dict(sorted(values["task_args"].items()))
        return RunConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def run_id(self) -> str:
        """Hash of the resolved config: the key under which results are stored."""
        text = json.dumps(asdict(self.resolved()), sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def validate(self) -> RunConfig:
        """Check every field (building the recipe, parsing the specs); return the resolved config."""
        options = task_options(self.task)  # raises for an unknown task
        for key in self.task_args:
            if key not in options:
                raise ValueError(f"unknown option {key!r} for task {self.task!r}; allowed: {', '.join(options) or '(none)'}")
        cfg = self.resolved()
        build(cfg.recipe)
        parse_staleness(cfg.delay)
        parse_frictions(cfg.frictions)
        checks = [
            (isinstance(cfg.steps, int) and cfg.steps >= 1, f"steps must be an integer >= 1, got {cfg.steps!r}"),
            (isinstance(cfg.seed, int) and cfg.seed >= 0, f"seed must be an integer >= 0, got {cfg.seed!r}"),
            (isinstance(cfg.batch_size, int) and cfg.batch_size >= 1, f"batch_size must be an integer >= 1, got {cfg.batch_size!r}"),
            (isinstance(cfg.n_actors, int) and cfg.n_actors >= 1, f"n_actors must be an integer >= 1, got {cfg.n_actors!r}"),
            (isinstance(cfg.group_size, int) and cfg.group_size >= 1, f"group_size must be an integer >= 1, got {cfg.group_size!r}"),
            (isinstance(cfg.log_every, int) and cfg.log_every >= 1, f"log_every must be an integer >= 1, got {cfg.log_every!r}"),
            (isinstance(cfg.lr, int | float) and cfg.lr > 0, f"lr must be a number > 0, got {cfg.lr!r}"),
            (cfg.agg in AGG_MODES, f"agg must be one of {', '.join(AGG_MODES)}, got {cfg.agg!r}"),
            (cfg.optimizer in OPTIMIZERS, f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}"),
            (cfg.proximal in ("current", "none"), f"proximal must be 'current' or 'none', got {cfg.proximal!r}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if cfg.batch_size < cfg.n_actors:
            raise ValueError(f"batch_size ({cfg.batch_size}) must be >= n_actors ({cfg.n_actors})")
        for size in chunk_sizes(cfg.batch_size, cfg.n_actors):
            if size % cfg.group_size:
                raise ValueError(
                    f"group_size {cfg.group_size} must divide every actor's share of the batch "
                    f"({chunk_sizes(cfg.batch_size, cfg.n_actors)})"
                )
        return cfg


def chunk_sizes(batch_size: int, n_actors: int) -> list[int]:
    """How a batch is split among actors: as evenly as possible, the first ones one larger."""
    base, extra = divmod(batch_size, n_actors)
    return [base + (1 if a < extra else 0) for a in range(n_actors)]


def derive_seed(seed: int, *parts: int | str) -> int:
    """A 63-bit seed from (seed, parts...) by SplitMix64 mixing (strings via crc32)."""
    x = seed & 0xFFFFFFFFFFFFFFFF
    for part in parts:
        value = zlib.crc32(part.encode()) if isinstance(part, str) else int(part)
        x = (x ^ (value & 0xFFFFFFFFFFFFFFFF)) + 0x9E3779B97F4A7C15
        x &= 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
    return x & 0x7FFFFFFFFFFFFFFF


def slot_generator(seed: int, step: int, actor: int) -> torch.Generator:
    """The generator of the chunk consumed at ``step`` from ``actor`` (see the module docstring)."""
    return torch.Generator().manual_seed(derive_seed(seed, "slot", step, actor))


class _Call(nn.Module):
    """Holds the policy so that ``functional_call(self, params, (fn, *args))`` runs ``fn(policy, *args)``
    with the policy's parameters replaced by ``params`` (keys prefixed ``policy.``)."""

    def __init__(self, policy: nn.Module) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, fn: Callable, *args: Any) -> Any:
        return fn(self.policy, *args)


@dataclass
class Chunk:
    """The samples of one actor for one learner step (filled in at its generation events)."""

    step: int
    actor: int
    size: int
    gen: torch.Generator | None = None
    contexts: Tensor | None = None
    group_ids: Tensor | None = None
    actions: Tensor | None = None
    behavior_logp: Tensor | None = None
    versions: Tensor | None = None  # [b, T] long
    buggy: bool = False
    rewards: Tensor | None = None  # as shown to the learner
    true_rewards: Tensor | None = None

    def nbytes(self) -> int:
        tensors = (self.contexts, self.group_ids, self.actions, self.behavior_logp, self.versions, self.rewards,
                   self.true_rewards)
        return sum(t.element_size() * t.numel() for t in tensors if t is not None)


@dataclass
class RunResult:
    config: RunConfig  # resolved
    rows: list[dict[str, Any]]
    status: str  # "ok" or "diverged"
    info: dict[str, Any]


class Diverged(Exception):
    pass


class Runner:
    """Runs one config. ``on_version(v, params)`` is called for every new version (0 first) and
    ``on_batch(step, batch)`` with every consumed batch before the update (tests use both)."""

    def __init__(self, config: RunConfig, task: Any = None) -> None:
        self.cfg = cfg = config.validate()
        self.task = task if task is not None else make_task(cfg.task, **cfg.task_args)
        self.recipe = build(cfg.recipe)
        self.staleness = parse_staleness(cfg.delay)
        self.frictions = parse_frictions(cfg.frictions)
        self.horizon = int(self.task.horizon)
        init_gen = torch.Generator().manual_seed(derive_seed(cfg.seed, "init"))
        policy = self.task.make_policy(init_gen)
        self.call_module = _Call(policy)
        self.params: dict[str, Tensor] = {
            f"policy.{k}": v.detach().clone().requires_grad_(True) for k, v in policy.named_parameters()
        }
        self.buffers = {f"policy.{k}": v for k, v in policy.named_buffers()}
        trainable = list(self.params.values())
        if cfg.optimizer == "adam":
            self.optimizer: torch.optim.Optimizer = torch.optim.Adam(trainable, lr=cfg.lr, foreach=True)
        else:
            self.optimizer = torch.optim.SGD(trainable, lr=cfg.lr)
        self.sizes = chunk_sizes(cfg.batch_size, cfg.n_actors)
        rng = np.random.default_rng(derive_seed(cfg.seed, "lags"))
        self.lags = self.staleness.lags(cfg.steps, cfg.n_actors, rng)
        self.sticky = self.frictions.buggy_actors(cfg.n_actors, torch.Generator().manual_seed(derive_seed(cfg.seed, "bugs")))
        self.oracle = self.horizon == 1 and hasattr(self.task, "expected_reward") and hasattr(self.task, "supervised_loss")
        self.on_version: Callable[[int, dict[str, Tensor]], None] | None = None
        self.on_batch: Callable[[int, dict[str, Tensor]], None] | None = None

    # -- functional evaluation ------------------------------------------------------------------
    def apply(self, params: dict[str, Tensor], fn: Callable, *args: Any) -> Any:
        """``fn(policy, *args)`` with the policy's parameters set to ``params``."""
        return functional_call(self.call_module, {**params, **self.buffers}, (fn, *args))

    def logits(self, params: dict[str, Tensor], contexts: Tensor, actions: Tensor) -> Tensor:
        return self.apply(params, self.task.logits, contexts, actions)

    def token_logp(self, params: dict[str, Tensor], contexts: Tensor, actions: Tensor) -> Tensor:
        """log pi(a_t | x, a_<t) for every token: [B, T]."""
        logits = self.logits(params, contexts, actions)
        return torch.log_softmax(logits.float(), dim=-1).gather(-1, actions[..., None]).squeeze(-1)

    # -- actors -----------------------------------------------------------------------------------
    def _generate(self, chunk: Chunk, version: int) -> int | None:
        """Sample the tokens of ``chunk`` due at ``version``; return the next version it is due at."""
        horizon = self.horizon
        if chunk.gen is None:  # first event of this chunk
            gen = chunk.gen = slot_generator(self.cfg.seed, chunk.step, chunk.actor)
            g = self.cfg.group_size
            contexts = self.task.sample_contexts(chunk.size // g, gen, "train")
            if g > 1:
                contexts = contexts.repeat_interleave(g, dim=0)
                chunk.group_ids = torch.arange(chunk.size // g).repeat_interleave(g)
            chunk.contexts = contexts
            chunk.buggy = self.frictions.is_buggy(chunk.actor, self.sticky, gen)
            mixed = self.staleness.token_versions(version, chunk.step, (chunk.size, horizon), gen)
            chunk.versions = (
                torch.full((chunk.size, horizon), version, dtype=torch.long) if mixed is None else torch.from_numpy(mixed)
            )
            chunk.actions = torch.zeros((chunk.size, horizon), dtype=torch.long)
            chunk.behavior_logp = torch.zeros((chunk.size, horizon), dtype=torch.float32)
        gen = chunk.gen
        params = {k: v.detach() for k, v in self.params.items()}
        sample_params = None
        if chunk.buggy and self.frictions.bug.kind == "perturb":
            sample_params = self.frictions.perturbed(params, gen)
        due = chunk.versions == version
        with torch.no_grad():
            for k in range(horizon):
                rows = due[:, k]
                if not bool(rows.any()):
                    continue
                logits = self.logits(params, chunk.contexts, chunk.actions)[:, k].float()
                if not bool(torch.isfinite(logits).all()):
                    raise Diverged(max(version - 1, 0))  # the last update made the policy non-finite
                acting = logits if sample_params is None else self.logits(sample_params, chunk.contexts, chunk.actions)[:, k].float()
                actions = self.frictions.sample(acting, chunk.buggy, gen)
                logp = torch.log_softmax(logits, dim=-1).gather(-1, actions[:, None]).squeeze(-1)
                chunk.actions[rows, k] = actions[rows]
                chunk.behavior_logp[rows, k] = logp[rows]
        later = chunk.versions[chunk.versions > version]
        if later.numel():
            return int(later.min())
        with torch.no_grad():
            chunk.true_rewards = self.task.reward(chunk.contexts, chunk.actions).to(torch.float32)
        chunk.rewards = self.frictions.corrupt_rewards(chunk.true_rewards, gen)
        chunk.gen = None
        return None

    # -- learner ----------------------------------------------------------------------------------
    def _batch(self, chunks: list[Chunk]) -> dict[str, Tensor]:
        cat = {name: torch.cat([getattr(c, name) for c in chunks]) for name in
               ("contexts", "actions", "behavior_logp", "versions", "rewards", "true_rewards")}
        if self.cfg.group_size > 1:
            offsets, gids = 0, []
            for c in chunks:
                gids.append(c.group_ids + offsets)
                offsets += c.size // self.cfg.group_size
            cat["group_ids"] = torch.cat(gids)
        cat["buggy"] = torch.cat([torch.full((c.size,), c.buggy) for c in chunks])
        return cat

    def _score_sq_norms(self, contexts: Tensor, actions: Tensor) -> Tensor:
        """||grad_theta log pi(tau_i)||^2 per sequence (OPOB needs it): exact, by `diag.linear_score_sq_norms`
        when every parameter belongs to an nn.Linear, else by vmap over per-sample gradients."""
        fast = diag.linear_score_sq_norms(self.call_module.policy, lambda: self.token_logp(self.params, contexts, actions))
        if fast is not None:
            return fast
        params = {k: v.detach() for k, v in self.params.items()}

        def seq_logp(p: dict[str, Tensor], x: Tensor, a: Tensor) -> Tensor:
            return self.token_logp(p, x[None], a[None]).sum()

        try:
            grads = torch.func.vmap(torch.func.grad(seq_logp), in_dims=(None, 0, 0))(params, contexts, actions)
            return sum(g.reshape(g.shape[0], -1).pow(2).sum(1) for g in grads.values())
        except (RuntimeError, NotImplementedError):  # a task op without a vmap rule: loop
            out = []
            for x, a in zip(contexts, actions, strict=True):
                g = torch.func.grad(seq_logp)(params, x, a)
                out.append(sum(v.pow(2).sum() for v in g.values()))
            return torch.stack(out)

    def run(self, progress: bool = False) -> RunResult:
        cfg = self.cfg
        starts: dict[int, list[Chunk]] = defaultdict(list)
        due: dict[int, list[Chunk]] = defaultdict(list)
        consume: dict[int, list[Chunk]] = {}
        for t in range(cfg.steps):
            consume[t] = [Chunk(t, a, self.sizes[a]) for a in range(cfg.n_actors)]
            for a, chunk in enumerate(consume[t]):
                starts[t - int(self.lags[t, a])].append(chunk)
        rows: list[dict[str, Any]] = []
        status, prev_grad = "ok", None
        window: list[float] = []
        peak_queue = 0
        eval_gen = torch.Generator()
        t0 = time.perf_counter()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg.steps, desc=f"{cfg.recipe} {cfg.delay} seed {cfg.seed}", leave=False)
        if self.on_version is not None:
            self.on_version(0, self.params)
        try:
            for t in range(cfg.steps):
                for chunk in starts.pop(t, []) + due.pop(t, []):
                    nxt = self._generate(chunk, t)
                    if nxt is not None:
                        due[nxt].append(chunk)
                batch = self._batch(consume.pop(t))
                log_now = (t + 1) % cfg.log_every == 0 or t + 1 == cfg.steps
                if log_now:
                    peak_queue = max(peak_queue, self.queue_bytes(consume))
                if self.on_batch is not None:
                    self.on_batch(t, batch)
                row, grad = self._update(t, batch, prev_grad, log_now)
                window.append(float(batch["true_rewards"].mean()))
                if self.on_version is not None:
                    self.on_version(t + 1, self.params)
                if log_now:
                    eval_gen.manual_seed(derive_seed(cfg.seed, "eval", t))
                    with torch.no_grad():
                        row.update(self.apply(self.params, self.task.evaluate, eval_gen))
                    row["reward_avg"] = float(np.mean(window))
                    window.clear()
                    rows.append(row)
                prev_grad = grad
                if bar is not None:
                    bar.update(1)
        except Diverged as exc:
            status = "diverged"
            rows.append({"step": int(exc.args[0]) + 1, "diverged_at": int(exc.args[0]) + 1})
        finally:
            if bar is not None:
                bar.close()
        info = {"wall_s": time.perf_counter() - t0, "queue_peak_bytes": peak_queue,
                "param_bytes": sum(p.numel() * p.element_size() for p in self.params.values())}
        return RunResult(cfg, rows, status, info)

    @staticmethod
    def queue_bytes(pending: dict[int, list[Chunk]]) -> int:
        return sum(c.nbytes() for chunks in pending.values() for c in chunks)

    def _update(self, t: int, batch: dict[str, Tensor], prev_grad: Tensor | None, log_now: bool) -> tuple[dict, Tensor]:
        cfg, recipe = self.cfg, self.recipe
        contexts, actions, blogp = batch["contexts"], batch["actions"], batch["behavior_logp"]
        logp = self.token_logp(self.params, contexts, actions)
        mask = torch.ones_like(logp, dtype=torch.bool)
        group_ids = batch.get("group_ids")
        score = self._score_sq_norms(contexts, actions) if recipe.needs_score_norms else None
        adv = recipe.advantages(batch["rewards"], group_ids=group_ids, logp=logp.detach(), behavior_logp=blogp,
                                mask=mask, score_sq_norms=score)
        terms = PolicyTerms(logp, blogp, adv, mask, proximal_logp=logp.detach() if cfg.proximal == "current" else None,
                            versions=batch["versions"], group_ids=group_ids, rewards=batch["rewards"])
        try:
            out = recipe.loss(terms, cfg.agg)
        except ValueError as exc:
            if "non-finite" in str(exc):
                raise Diverged(t) from exc
            raise
        if not bool(torch.isfinite(out.loss)):
            raise Diverged(t)
        params = list(self.params.values())
        for p in params:
            p.grad = None
        out.loss.backward()
        grad = diag.flat_grad(params)
        row: dict[str, Any] = {}
        if log_now:
            row = self._diagnostics(t, batch, logp.detach(), blogp, out, grad, prev_grad)
        try:
            metrics = recipe.step(params, self.optimizer, terms)
        except RuntimeError as exc:  # e.g. a step size that no longer fits in float32
            if "overflow" in str(exc):
                raise Diverged(t) from exc
            raise
        if not bool(torch.stack(torch._foreach_norm(params)).isfinite().all()):
            raise Diverged(t)
        if log_now:
            row = {**{k: float(v) for k, v in metrics.items()}, **row}
        return row, grad

    def _diagnostics(self, t: int, batch: dict, logp: Tensor, blogp: Tensor, out: Any, grad: Tensor,
                     prev_grad: Tensor | None) -> dict[str, Any]:
        lags = (t - batch["versions"]).float()
        seq_lr = sequence_log_ratio(logp, blogp, torch.ones_like(logp, dtype=torch.bool))
        row: dict[str, Any] = {
            "step": t + 1,
            "loss": float(out.loss.detach()),
            "reward": float(batch["rewards"].mean()),
            "true_reward": float(batch["true_rewards"].mean()),
            "lag_mean": float(lags.mean()),
            "lag_max": int(lags.max()),
            "buggy_frac": float(batch["buggy"].float().mean()),
            "grad_norm": float(grad.norm()),
            "grad_cos_prev": diag.cosine(grad, prev_grad) if prev_grad is not None else float("nan"),
            **{k: float(v) for k, v in out.metrics.items()},
            **diag.ratio_stats(logp - blogp, seq_lr),
        }
        if self.oracle:
            true_pg, ce = diag.oracle_gradients(self, batch["contexts"])
            row["cos_true_pg"] = diag.cosine(grad, true_pg)
            row["cos_ce"] = diag.cosine(grad, ce)
        return row


def run(config: RunConfig, progress: bool = False, task: Any = None) -> RunResult:
    """Run one config (see `Runner`)."""
    return Runner(config, task=task).run(progress=progress)
