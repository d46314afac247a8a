"""Staleness models: which policy version produced each sample the learner consumes.

Versions. The learner's parameters after ``t`` updates are *version t*. Learner step ``t`` starts
from version ``t`` and produces version ``t + 1``. A batch consumed at step ``t`` with lag ``L``
was sampled by version ``t - L`` (lag 0 is on-policy). Lags are clamped to ``t`` (there is no
version before 0), so the *realised* lag at step ``t`` is ``min(L, t)``.

Each learner batch is split among ``n_actors`` actors; every actor chunk has its own lag. A model
turns ``(n_steps, n_actors, rng)`` into the lag table ``[n_steps, n_actors]`` (already clamped).

Spec grammar (one base model, optionally ``+mixed:q``)::

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

How versions are stored (see runner.py): the runner never keeps old parameters. Each actor chunk is
*generated* at the moment its version is current (right after update ``t - L``) and queued until
its consumption step, so the store holds the pending chunks (contexts, actions, behaviour log-probs,
versions, rewards: a few KB each) instead of up to ``max_lag + 1`` parameter copies.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np
import torch

FORMS = (
    "sync",
    "fixed:D",
    "uniform:D",
    "geometric:p,max",
    "pareto:alpha,max",
    "bounded:eta[,speed]",
    "<any of these>+mixed:q",
)


def _err(spec: object, why: str) -> ValueError:
    return ValueError(f"bad staleness spec {spec!r}: {why}; allowed forms: {', '.join(FORMS)}")


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


def _num(spec: str, text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise _err(spec, f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise _err(spec, f"{what} must be finite, got {text!r}")
    return value


def _int(spec: str, text: str, what: str) -> int:
    value = _num(spec, text, what)
    if value != int(value) or value < 0:
        raise _err(spec, f"{what} must be a non-negative integer, got {text!r}")
    return int(value)


def parse_staleness(spec: str | Staleness) -> Staleness:
    """Parse a staleness spec (see the module docstring). Raises ValueError listing allowed forms."""
    if isinstance(spec, Staleness):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise _err(spec, "expected a non-empty string")
    text = spec.strip().replace(" ", "")
    base, *mods = text.split("+")
    mix = 0.0
    for mod in mods:
        name, _, arg = mod.partition(":")
        if name != "mixed" or not arg:
            raise _err(spec, f"unknown modifier {mod!r} (only mixed:q)")
        mix = _num(spec, arg, "mixed q")
        if not 0.0 <= mix <= 1.0:
            raise _err(spec, f"mixed q must be in [0, 1], got {arg}")
    name, _, arg = base.partition(":")
    args = arg.split(",") if arg else []
    if name in ("sync", "0", "none") and not args:
        return Staleness(spec, "sync", (), mix)
    if name in ("fixed", "uniform"):
        if len(args) != 1:
            raise _err(spec, f"{name} takes one argument D")
        return Staleness(spec, name, (_int(spec, args[0], "D"),), mix)
    if name == "geometric":
        if len(args) != 2:
            raise _err(spec, "geometric takes p,max")
        p, m = _num(spec, args[0], "p"), _int(spec, args[1], "max")
        if not 0.0 < p <= 1.0:
            raise _err(spec, f"p must be in (0, 1], got {args[0]}")
        return Staleness(spec, name, (p, m), mix)
    if name == "pareto":
        if len(args) != 2:
            raise _err(spec, "pareto takes alpha,max")
        a, m = _num(spec, args[0], "alpha"), _int(spec, args[1], "max")
        if a <= 0:
            raise _err(spec, f"alpha must be > 0, got {args[0]}")
        return Staleness(spec, name, (a, m), mix)
    if name == "bounded":
        if len(args) not in (1, 2):
            raise _err(spec, "bounded takes eta or eta,speed")
        eta = _int(spec, args[0], "eta")
        speed = _num(spec, args[1], "speed") if len(args) == 2 else 2.0
        if speed <= 0:
            raise _err(spec, f"speed must be > 0, got {args[1]}")
        return Staleness(spec, name, (eta, speed), mix)
    raise _err(spec, f"unknown model {name!r}")
