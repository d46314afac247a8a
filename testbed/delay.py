"""Staleness models: which policy version produced each sample the learner consumes.

Versions. The learner's parameters after ``t`` updates are *version t*. Learner step ``t`` starts
from version ``t`` and produces version ``t + 1``. A batch consumed at step ``t`` with lag ``L``
was sampled by version ``t - L`` (lag 0 is on-policy). Lags are clamped to ``t`` (there is no
version before 0), so the *realised* lag at step ``t`` is ``min(L, t)``.

Each learner batch is split among ``n_actors`` actors; every actor chunk has its own lag. A model
turns ``(n_steps, n_actors, rng)`` into the lag table ``[n_steps, n_actors]`` (already clamped).

Spec (the project's one grammar, testbed/stabilizers/spec.py: ``fixed:10`` is shorthand for ``fixed(10)``
and for ``fixed(D=10)``; one base model, optionally ``+mixed:q``)::

    sync                 lag 0
    fixed:D              lag D
    uniform:D            lag ~ Uniform{0, ..., D}
    geometric:p,max      P(L = k) proportional to p (1 - p)^k on k = 0..max (truncated, renormalised)
    pareto:alpha,max     heavy tail: P(L >= k) proportional to (k + 1)^-alpha on k = 0..max (discrete
                         Pareto, truncated, renormalised)
    bounded:eta[,speed]  AReaL's admission rule (arXiv 2505.24298): a rollout with 1-based index N_r is
                         admitted only while floor((N_r - 1) / B) <= i + eta, i the learner's version.
                         ``speed`` = actor throughput / learner throughput (batches per learner-step
                         time; default 2). Deterministic; the lag never exceeds eta.
    SPEC+mixed:q         per-token mixed versions (partial rollouts): a sequence starts at version
                         t - L and, between consecutive tokens, the actor picks up the next version with
                         probability q (never beyond t). Only matters for tasks with horizon T > 1.

The version/delay queue (`Schedule`): no old parameters are ever stored. Each actor chunk (the
samples one actor hands the learner at one step) is *sampled* at the moment its version is current
(right after update ``t - L``) and waits in the queue until its consumption step, so the queue holds
the pending chunks (contexts, actions, behaviour log-probs, versions, rewards: a few KB each)
instead of up to ``max_lag + 1`` parameter copies.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from testbed.stabilizers.spec import SpecError, Term, bind, parse

FORMS = (
    "sync",
    "fixed:D",
    "uniform:D",
    "geometric:p,max",
    "pareto:alpha,max",
    "bounded:eta[,speed]",
    "<any of these>+mixed:q",
)


def _err(spec: object, why: str) -> SpecError:
    return SpecError(f"bad staleness spec {spec!r}: {why}; allowed forms: {', '.join(FORMS)}")


@dataclass(frozen=True)
class Staleness:
    """A parsed staleness model. ``kind`` in {sync, fixed, uniform, geometric, pareto, bounded}."""

    spec: str
    kind: str
    params: tuple[float, ...] = ()
    mix: float = 0.0  # per-token probability of advancing one version (partial rollouts)

    # -- distribution ------------------------------------------------------------------------
    @property
    def max_lag(self) -> int:
        """The largest lag this model can produce (before clamping to t)."""
        if self.kind == "sync":
            return 0
        if self.kind in ("fixed", "uniform", "bounded"):
            return int(self.params[0])
        return int(self.params[1])  # geometric, pareto

    def pmf(self) -> np.ndarray | None:
        """P(L = k) for k = 0..max_lag for the i.i.d. models; None for ``bounded`` (a queue process)."""
        m = self.max_lag
        k = np.arange(m + 1, dtype=np.float64)
        if self.kind == "sync":
            return np.ones(1)
        if self.kind == "fixed":
            p = np.zeros(m + 1)
            p[m] = 1.0
            return p
        if self.kind == "uniform":
            return np.full(m + 1, 1.0 / (m + 1))
        if self.kind == "geometric":
            q = self.params[0]
            w = q * (1.0 - q) ** k
            return w / w.sum()
        if self.kind == "pareto":
            a = self.params[0]
            w = (k + 1.0) ** -a - (k + 2.0) ** -a
            return w / w.sum()
        return None

    # -- the lag table ------------------------------------------------------------------------
    def lags(self, n_steps: int, n_actors: int, rng: np.random.Generator) -> np.ndarray:
        """Realised lags ``[n_steps, n_actors]`` (int64), clamped so that t - lag >= 0."""
        if self.kind == "bounded":
            raw = bounded_lags(n_steps, n_actors, int(self.params[0]), self.params[1])
        elif self.kind == "sync":
            raw = np.zeros((n_steps, n_actors), dtype=np.int64)
        elif self.kind == "fixed":
            raw = np.full((n_steps, n_actors), self.max_lag, dtype=np.int64)
        else:
            pmf = self.pmf()
            raw = rng.choice(len(pmf), size=(n_steps, n_actors), p=pmf).astype(np.int64)
        t = np.arange(n_steps, dtype=np.int64)[:, None]
        return np.minimum(raw, t)

    def token_versions(self, start: int, step: int, shape: tuple[int, int], gen: torch.Generator) -> np.ndarray | None:
        """Per-token versions ``[b, T]`` for a chunk that starts at version ``start`` and is consumed at
        ``step``; None when every token has version ``start`` (no mixing, or T = 1)."""
        b, horizon = shape
        if self.mix <= 0.0 or horizon == 1 or start >= step:
            return None
        adv = (torch.rand((b, horizon - 1), generator=gen) < self.mix).to(torch.int64)
        steps_taken = torch.cat([torch.zeros((b, 1), dtype=torch.int64), adv.cumsum(1)], dim=1)
        return np.minimum(start + steps_taken.numpy(), step)


def bounded_lags(n_steps: int, n_actors: int, eta: int, speed: float) -> np.ndarray:
    """Lags under AReaL's admission rule, by simulating actors and learner in continuous time.

    Units: one learner step takes time 1. The actors together produce ``speed`` batches per unit
    time, one chunk (1/n_actors of a batch) at a time, FIFO. Chunk n (0-based; rollout index
    N_r = n + 1 in chunk units) is admitted once the learner's version i satisfies
    floor(n / n_actors) <= i + eta; it is sampled by the version current when its generation starts.
    Learner step k begins when step k - 1 has ended and all its chunks are ready.
    """
    rate = speed * n_actors  # chunks per unit time
    dt = 1.0 / rate
    ends: list[float] = []  # ends[k] = time learner step k ended (version k + 1 available)
    lags = np.zeros((n_steps, n_actors), dtype=np.int64)
    actor_free = 0.0
    for k in range(n_steps):
        ready = 0.0
        for a in range(n_actors):
            need = k - eta  # version required for admission
            admit = 0.0 if need <= 0 else ends[need - 1]
            start = max(actor_free, admit)
            version = bisect.bisect_right(ends, start)  # updates finished by `start`
            actor_free = start + dt
            ready = actor_free
            lags[k, a] = k - version
        begin = max(ends[-1] if ends else 0.0, ready)
        ends.append(begin + 1.0)
    return lags


@dataclass(frozen=True)
class _D:
    D: int


@dataclass(frozen=True)
class _Geometric:
    p: float
    max: int


@dataclass(frozen=True)
class _Pareto:
    alpha: float
    max: int


@dataclass(frozen=True)
class _Bounded:
    eta: int
    speed: float = 2.0


@dataclass(frozen=True)
class _NoArgs:
    pass


@dataclass(frozen=True)
class _Mixed:
    q: float


_MODELS: dict[str, type] = {"sync": _NoArgs, "none": _NoArgs, "fixed": _D, "uniform": _D, "geometric": _Geometric,
                            "pareto": _Pareto, "bounded": _Bounded}


def _model(spec: object, term: Term) -> tuple[str, tuple[float, ...]]:
    if term.name not in _MODELS:
        raise _err(spec, f"unknown model {term.name!r}")
    try:
        values = bind(term, _MODELS[term.name])
    except SpecError as exc:
        raise _err(spec, str(exc)) from None
    args = tuple(getattr(values, f.name) for f in fields(values))
    for f in fields(values):
        value = getattr(values, f.name)
        if not math.isfinite(value):
            raise _err(spec, f"{f.name} must be finite, got {value}")
        if f.type in ("int", int) and value < 0:
            raise _err(spec, f"{f.name} must be a non-negative integer, got {value}")
    if term.name == "geometric" and not 0.0 < args[0] <= 1.0:
        raise _err(spec, f"p must be in (0, 1], got {args[0]}")
    if term.name == "pareto" and args[0] <= 0:
        raise _err(spec, f"alpha must be > 0, got {args[0]}")
    if term.name == "bounded" and args[1] <= 0:
        raise _err(spec, f"speed must be > 0, got {args[1]}")
    kind = "sync" if term.name == "none" else term.name
    return kind, args


def parse_staleness(spec: str | Staleness) -> Staleness:
    """Parse a staleness spec (see the module docstring). Raises ValueError listing the allowed forms."""
    if isinstance(spec, Staleness):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise _err(spec, "expected a non-empty string")
    try:
        base, *mods = parse(spec)
    except SpecError as exc:
        raise _err(spec, str(exc)) from None
    kind, args = _model(spec, base)
    mix = 0.0
    for mod in mods:
        if mod.name != "mixed":
            raise _err(spec, f"unknown modifier {mod.name!r} (only mixed:q)")
        try:
            mix = bind(mod, _Mixed).q
        except SpecError as exc:
            raise _err(spec, str(exc)) from None
        if not 0.0 <= mix <= 1.0:
            raise _err(spec, f"mixed q must be in [0, 1], got {mix}")
    return Staleness(spec, kind, args, mix)


# -- the version/delay queue ------------------------------------------------------------------------


@dataclass
class Chunk:
    """The samples one actor hands the learner at one step, filled in by the actor at its events.

    ``start`` is the version that starts sampling it (step - lag); with per-token mixed versions its
    later tokens are sampled at later versions (``versions`` [size, T]). ``state`` holds what the
    actor needs between events (its random stream and pre-drawn randomness).
    """

    step: int
    actor: int
    size: int
    start: int
    contexts: Tensor | None = None
    group_ids: Tensor | None = None
    actions: Tensor | None = None
    behavior_logp: Tensor | None = None
    versions: Tensor | None = None
    buggy: bool = False
    rewards: Tensor | None = None  # as shown to the learner
    true_rewards: Tensor | None = None
    state: dict[str, Any] = field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.rewards is not None

    def nbytes(self) -> int:
        tensors = (self.contexts, self.group_ids, self.actions, self.behavior_logp, self.versions, self.rewards,
                   self.true_rewards)
        return sum(t.element_size() * t.numel() for t in tensors if t is not None)

    def state_dict(self) -> dict[str, Any]:
        """The chunk as tensors and plain values (its random stream as the generator's state tensor)."""
        state = {k: (v.get_state() if isinstance(v, torch.Generator) else v) for k, v in self.state.items()}
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name != "state"}, "state": state}

    @classmethod
    def from_state_dict(cls, saved: dict[str, Any]) -> Chunk:
        """The inverse of `state_dict`."""
        state = dict(saved["state"])
        if "gen" in state:
            gen = torch.Generator()
            gen.set_state(state["gen"])
            state["gen"] = gen
        return cls(**{k: v for k, v in saved.items() if k != "state"}, state=state)


class Schedule:
    """The version/delay queue of one run: which chunks are sampled at each version, which wait, which
    the learner consumes at each step.

    ``lags`` [n_steps, n_actors] (a model's `Staleness.lags`) fixes, for the chunk of actor ``a``
    consumed at step ``t``, the version ``t - lags[t, a]`` at which sampling starts. At version ``v``
    the actor calls `due` for the chunks to (start or continue to) sample, `defer` for a chunk whose
    later tokens are due at a later version, and the learner calls `take` at step ``v``.
    """

    def __init__(self, lags: np.ndarray, sizes: list[int]) -> None:
        steps, n_actors = lags.shape
        if len(sizes) != n_actors:
            raise ValueError(f"{len(sizes)} chunk sizes for {n_actors} actors")
        self.lags, self.sizes = lags, sizes
        start = np.arange(steps)[:, None] - lags
        order = np.argsort(start, axis=None, kind="stable")  # by start version, then step, then actor
        flat = start.ravel()[order]
        cuts = np.flatnonzero(np.diff(flat)) + 1
        self._starts: dict[int, np.ndarray] = {int(flat[g[0]]): order[g] for g in np.split(np.arange(flat.size), cuts)
                                               if g.size}
        self._waiting: dict[int, list[Chunk]] = defaultdict(list)  # by consumption step
        self._deferred: dict[int, list[Chunk]] = defaultdict(list)  # by the version its next tokens are due at

    def due(self, version: int) -> list[Chunk]:
        """The chunks that start sampling at ``version`` (new) followed by those whose next tokens are due."""
        n_actors = self.lags.shape[1]
        new = []
        for flat in self._starts.pop(version, np.zeros(0, dtype=np.int64)).tolist():
            step, actor = divmod(flat, n_actors)
            chunk = Chunk(step, actor, self.sizes[actor], version)
            self._waiting[step].append(chunk)
            new.append(chunk)
        return new + self._deferred.pop(version, [])

    def defer(self, chunk: Chunk, version: int) -> None:
        """Queue ``chunk`` again for its tokens due at ``version``."""
        self._deferred[version].append(chunk)

    def take(self, step: int) -> list[Chunk]:
        """The chunks the learner consumes at ``step``, in actor order (every one complete)."""
        chunks = sorted(self._waiting.pop(step), key=lambda c: c.actor)
        if len(chunks) != self.lags.shape[1] or not all(c.done for c in chunks):
            raise RuntimeError(f"step {step}: the queue holds unfinished chunks (a sampling event was skipped)")
        return chunks

    def pending_bytes(self) -> int:
        """Bytes of the chunks sampled (wholly or partly) but not yet consumed."""
        return sum(c.nbytes() for chunks in self._waiting.values() for c in chunks)

    def state_dict(self) -> dict[str, Any]:
        """The queue as tensors and plain values: the lag table, the start versions not reached yet, the chunks
        waiting (by consumption step) and those deferred (by version, as (step, actor) of a waiting chunk)."""
        return {"lags": torch.from_numpy(self.lags), "sizes": list(self.sizes), "starts": sorted(self._starts),
                "waiting": {step: [c.state_dict() for c in chunks] for step, chunks in self._waiting.items()},
                "deferred": {v: [(c.step, c.actor) for c in chunks] for v, chunks in self._deferred.items()}}

    @classmethod
    def from_state_dict(cls, saved: dict[str, Any]) -> Schedule:
        """The inverse of `state_dict`."""
        schedule = cls(saved["lags"].numpy(), list(saved["sizes"]))
        schedule._starts = {v: schedule._starts[v] for v in saved["starts"]}
        by_key = {}
        for step, chunks in saved["waiting"].items():
            schedule._waiting[step] = [Chunk.from_state_dict(c) for c in chunks]
            by_key.update({(c.step, c.actor): c for c in schedule._waiting[step]})
        for version, keys in saved["deferred"].items():
            schedule._deferred[version] = [by_key[tuple(key)] for key in keys]
        return schedule
