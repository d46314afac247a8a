"""Frictions of distributed RL other than staleness, applied by the runner on the actor side.

A friction spec uses the recipe grammar: ``name(key=value, ...)`` terms joined by ``+``, or
``none``. Frictions combine freely (each kind at most once)::

    bug(frac=0.2, kind=temperature, temp=3)+reward(p=0.1)+mismatch(sigma=0.1)

``bug``: actor bugs. Each (step, actor) chunk is sampled by a corrupted actor with probability
    ``frac`` (``sticky=true``: instead a fixed set of round(frac * n_actors) actors, chosen from the
    seed, is buggy for the whole run). A buggy actor *believes* it ran the clean policy of its
    version and records that policy's log-probs, while it actually samples from:
      kind=temperature  softmax(logits / temp)                       (temp, default 3.0)
      kind=random       a uniform action with probability eps, else the policy (eps, default 1.0)
      kind=perturb      the policy with weights theta + sigma * N(0, I) (sigma, default 0.1)
``reward``: reward corruption, per episode with probability ``p``:
      kind=flip   r -> 1 - r      (rewards in [0, 1], as in every task here)
      kind=noise  r -> r + sigma * N(0, 1)   (sigma, default 1.0)
    The learner sees corrupted rewards; diagnostics also log the true reward.
``mismatch``: inference mismatch (vLLM vs trainer). Every actor samples from
    logits + sigma * N(0, 1) (per token and action) and records the clean log-probs.

Rare discovery (reward only on rare paths) is a property of a task's reward, not of the runner.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from testbed.stabilizers import parse_spec

BUG_KINDS = ("temperature", "random", "perturb")
REWARD_KINDS = ("flip", "noise")
FORMS = (
    "none",
    "bug(frac, kind=temperature|random|perturb, temp, eps, sigma, sticky)",
    "reward(p, kind=flip|noise, sigma)",
    "mismatch(sigma)",
)


def _err(spec: object, why: str) -> ValueError:
    return ValueError(f"bad friction spec {spec!r}: {why}; allowed: {' + '.join(FORMS)}")


@dataclass(frozen=True)
class Bug:
    frac: float = 0.1
    kind: str = "temperature"
    temp: float = 3.0
    eps: float = 1.0
    sigma: float = 0.1
    sticky: bool = False


@dataclass(frozen=True)
class RewardCorruption:
    p: float = 0.1
    kind: str = "flip"
    sigma: float = 1.0


@dataclass(frozen=True)
class Mismatch:
    sigma: float = 0.1


_COMPONENTS = {"bug": Bug, "reward": RewardCorruption, "mismatch": Mismatch}


@dataclass(frozen=True)
class Frictions:
    """The parsed frictions of a run (each None when absent)."""

    spec: str = "none"
    bug: Bug | None = None
    reward: RewardCorruption | None = None
    mismatch: Mismatch | None = None

    @property
    def none(self) -> bool:
        return self.bug is None and self.reward is None and self.mismatch is None

    # -- actor side ---------------------------------------------------------------------------
    def buggy_actors(self, n_actors: int, gen: torch.Generator) -> Tensor | None:
        """For sticky bugs: the fixed boolean mask [n_actors] of buggy actors (else None)."""
        if self.bug is None or not self.bug.sticky:
            return None
        k = round(self.bug.frac * n_actors)
        mask = torch.zeros(n_actors, dtype=torch.bool)
        mask[torch.randperm(n_actors, generator=gen)[:k]] = True
        return mask

    def is_buggy(self, actor: int, sticky: Tensor | None, gen: torch.Generator) -> bool:
        """Whether this chunk is sampled by a buggy actor (draws one uniform when not sticky)."""
        if self.bug is None:
            return False
        if sticky is not None:
            return bool(sticky[actor])
        return bool(torch.rand((), generator=gen) < self.bug.frac)

    def perturbed(self, params: dict[str, Tensor], gen: torch.Generator) -> dict[str, Tensor]:
        """theta + sigma * N(0, I), the weights a ``perturb`` bug samples with."""
        sigma = self.bug.sigma
        return {k: v.detach() + sigma * torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}

    def sampling_logits(self, logits: Tensor, buggy: bool, gen: torch.Generator) -> Tensor:
        """Logits the actor actually samples from (before random actions); ``logits`` [b, A]."""
        out = logits
        if buggy and self.bug.kind == "temperature":
            out = out / self.bug.temp
        if self.mismatch is not None:
            out = out + self.mismatch.sigma * torch.randn(out.shape, generator=gen, dtype=out.dtype)
        return out

    def sample(self, logits: Tensor, buggy: bool, gen: torch.Generator) -> Tensor:
        """Sample one action per row from ``logits`` [b, A] with this actor's frictions: [b] long."""
        probs = torch.softmax(self.sampling_logits(logits, buggy, gen), dim=-1)
        actions = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        if buggy and self.bug.kind == "random":
            flip = torch.rand(actions.shape, generator=gen) < self.bug.eps
            rand = torch.randint(logits.shape[-1], actions.shape, generator=gen)
            actions = torch.where(flip, rand, actions)
        return actions

    def corrupt_rewards(self, rewards: Tensor, gen: torch.Generator) -> Tensor:
        """The rewards the learner is shown."""
        if self.reward is None:
            return rewards
        hit = torch.rand(rewards.shape, generator=gen) < self.reward.p
        if self.reward.kind == "flip":
            bad = 1.0 - rewards
        else:
            bad = rewards + self.reward.sigma * torch.randn(rewards.shape, generator=gen)
        return torch.where(hit, bad, rewards)


def _coerce(spec: str, comp: str, cls: type, params: dict) -> object:
    allowed = {f.name: f for f in fields(cls)}
    kwargs = {}
    for key, value in params.items():
        if key not in allowed:
            raise _err(spec, f"unknown parameter {key!r} for {comp}; allowed: {', '.join(allowed)}")
        default = allowed[key].default
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise _err(spec, f"{comp}.{key} must be true or false, got {value!r}")
        elif isinstance(default, float):
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise _err(spec, f"{comp}.{key} must be a number, got {value!r}")
            value = float(value)
        elif isinstance(default, str) and not isinstance(value, str):
            raise _err(spec, f"{comp}.{key} must be a word, got {value!r}")
        kwargs[key] = value
    obj = cls(**kwargs)
    if isinstance(obj, Bug):
        if not 0.0 <= obj.frac <= 1.0:
            raise _err(spec, f"bug.frac must be in [0, 1], got {obj.frac}")
        if obj.kind not in BUG_KINDS:
            raise _err(spec, f"bug.kind must be one of {', '.join(BUG_KINDS)}, got {obj.kind!r}")
        if obj.temp <= 0 or not 0.0 <= obj.eps <= 1.0 or obj.sigma < 0:
            raise _err(spec, "bug needs temp > 0, eps in [0, 1], sigma >= 0")
    if isinstance(obj, RewardCorruption):
        if not 0.0 <= obj.p <= 1.0:
            raise _err(spec, f"reward.p must be in [0, 1], got {obj.p}")
        if obj.kind not in REWARD_KINDS:
            raise _err(spec, f"reward.kind must be one of {', '.join(REWARD_KINDS)}, got {obj.kind!r}")
        if obj.sigma < 0:
            raise _err(spec, "reward.sigma must be >= 0")
    if isinstance(obj, Mismatch) and obj.sigma < 0:
        raise _err(spec, f"mismatch.sigma must be >= 0, got {obj.sigma}")
    return obj


def parse_frictions(spec: str | Frictions | None) -> Frictions:
    """Parse a friction spec (module docstring). Raises ValueError naming the bad part."""
    if isinstance(spec, Frictions):
        return spec
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "none")):
        return Frictions()
    if not isinstance(spec, str):
        raise _err(spec, "expected a string")
    try:
        terms = parse_spec(spec)
    except ValueError as exc:
        raise _err(spec, str(exc)) from None
    found: dict[str, object] = {}
    for name, params in terms:
        if name not in _COMPONENTS:
            raise _err(spec, f"unknown friction {name!r}")
        if name in found:
            raise _err(spec, f"{name} appears twice")
        found[name] = _coerce(spec, name, _COMPONENTS[name], params)
    return Frictions(spec.strip(), **found)
