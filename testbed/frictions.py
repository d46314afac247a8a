"""Frictions of distributed RL other than staleness, applied by the runner on the actor side.

A friction spec uses the project's one grammar (testbed/stabilizers/spec.py): ``name(key=value, ...)``
terms joined by ``+``, or ``none``. Frictions combine freely (each kind at most once)::

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

Rare discovery (reward only on rare paths) is a property of a task's reward, not of the runner (token
reversal: ``min_correct``). The token-reversal panel (each friction alone and all four) is defined at the
end of this module as candidate levels and one frozen preset, calibrated on the baselines
(`token_reversal_preset`; sweeps/calibration/RULE.md and TABLE.md).

Randomness. Everything an actor draws for a chunk comes from the chunk's own stream, drawn when the
chunk starts (`Frictions.draws`: the sampling uniforms, the mismatch noise, the random-action draws),
except the perturbed weights (drawn at each sampling event) and the reward corruption (drawn when the
chunk is complete). Actions are sampled by inverse CDF from the pre-drawn uniforms (`sample_actions`),
so all the chunks sampled at one event go through one vectorised computation, and a chunk's samples
do not depend on which other chunks share its event.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from testbed.stabilizers.numerics import log_softmax
from testbed.stabilizers.spec import SpecError, bind, parse

BUG_KINDS = ("temperature", "random", "perturb")
REWARD_KINDS = ("flip", "noise")
FORMS = (
    "none",
    "bug(frac, kind=temperature|random|perturb, temp, eps, sigma, sticky)",
    "reward(p, kind=flip|noise, sigma)",
    "mismatch(sigma)",
)


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SpecError(message)


@dataclass(frozen=True)
class Bug:
    frac: float = 0.1
    kind: str = "temperature"
    temp: float = 3.0
    eps: float = 1.0
    sigma: float = 0.1
    sticky: bool = False

    def __post_init__(self) -> None:
        _check(0.0 <= self.frac <= 1.0, f"bug.frac must be in [0, 1], got {self.frac}")
        _check(self.kind in BUG_KINDS, f"bug.kind must be one of {', '.join(BUG_KINDS)}, got {self.kind!r}")
        _check(0.0 < self.temp < float("inf"), f"bug.temp must be a finite number > 0, got {self.temp}")
        _check(0.0 <= self.eps <= 1.0, f"bug.eps must be in [0, 1], got {self.eps}")
        _check(0.0 <= self.sigma < float("inf"), f"bug.sigma must be a finite number >= 0, got {self.sigma}")


@dataclass(frozen=True)
class RewardCorruption:
    p: float = 0.1
    kind: str = "flip"
    sigma: float = 1.0

    def __post_init__(self) -> None:
        _check(0.0 <= self.p <= 1.0, f"reward.p must be in [0, 1], got {self.p}")
        _check(self.kind in REWARD_KINDS, f"reward.kind must be one of {', '.join(REWARD_KINDS)}, got {self.kind!r}")
        _check(0.0 <= self.sigma < float("inf"), f"reward.sigma must be a finite number >= 0, got {self.sigma}")


@dataclass(frozen=True)
class Mismatch:
    sigma: float = 0.1

    def __post_init__(self) -> None:
        _check(0.0 <= self.sigma < float("inf"), f"mismatch.sigma must be a finite number >= 0, got {self.sigma}")


_COMPONENTS = {"bug": Bug, "reward": RewardCorruption, "mismatch": Mismatch}


def sample_actions(probs: Tensor, u: Tensor) -> Tensor:
    """Inverse-CDF sampling: the action a with C(a - 1) <= u < C(a), C the cumulative sum of ``probs``
    over the last dimension; ``u`` uniform in [0, 1) with the shape of ``probs`` minus its last dimension.
    (A ``u`` at or above the rounded total C(A) picks the last action.)"""
    cdf = probs.cumsum(-1)
    return (cdf <= u.unsqueeze(-1)).sum(-1).clamp_max(probs.shape[-1] - 1)


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

    def draws(self, size: int, horizon: int, n_actions: int, buggy: bool, gen: torch.Generator) -> dict[str, Tensor]:
        """The randomness a chunk's sampling needs, drawn at its start, in this order: ``u`` [size, T]
        (the inverse-CDF uniforms), ``noise`` [size, T, A] (mismatch), ``flip`` [size, T] bool and
        ``random`` [size, T] long (the random-action bug)."""
        out = {"u": torch.rand((size, horizon), generator=gen)}
        if self.mismatch is not None:
            out["noise"] = self.mismatch.sigma * torch.randn((size, horizon, n_actions), generator=gen)
        if buggy and self.bug.kind == "random":
            out["flip"] = torch.rand((size, horizon), generator=gen) < self.bug.eps
            out["random"] = torch.randint(n_actions, (size, horizon), generator=gen)
        return out

    def sample(self, logits: Tensor, buggy: bool, gen: torch.Generator) -> Tensor:
        """One action per row of ``logits`` [b, A] by this actor's frictions (a chunk of horizon 1)."""
        d = self.draws(logits.shape[0], 1, logits.shape[-1], buggy, gen)
        temp = self.temperature(buggy)
        return act(logits, d["u"][:, 0], None if temp == 1.0 else torch.tensor(temp),
                   d["noise"][:, 0] if "noise" in d else None,
                   d["flip"][:, 0] if "flip" in d else None, d["random"][:, 0] if "random" in d else None)

    def temperature(self, buggy: bool) -> float:
        """The sampling temperature of a chunk (1 unless a temperature bug hit it)."""
        return self.bug.temp if buggy and self.bug.kind == "temperature" else 1.0

    def perturbed(self, params: dict[str, Tensor], gen: torch.Generator) -> dict[str, Tensor]:
        """theta + sigma * N(0, I), the weights a ``perturb`` bug samples with (drawn at every event)."""
        sigma = self.bug.sigma
        return {k: v.detach() + sigma * torch.randn(v.shape, generator=gen, dtype=v.dtype) for k, v in params.items()}

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


def acting_probs(logits: Tensor, temperature: Tensor | None, noise: Tensor | None) -> Tensor:
    """The distribution an actor actually samples from: softmax(logits / temperature + noise).

    ``logits`` [..., A] are the clean logits of the version that samples (whose log-probs are recorded);
    ``temperature`` broadcasts against ``logits[..., :1]`` (None: 1), ``noise`` has the shape of ``logits``."""
    out = logits
    if temperature is not None:
        out = out / temperature
    if noise is not None:
        out = out + noise
    return log_softmax(out).exp()


def act(logits: Tensor, u: Tensor, temperature: Tensor | None = None, noise: Tensor | None = None,
        flip: Tensor | None = None, random: Tensor | None = None) -> Tensor:
    """Actions [...] from clean ``logits`` [..., A] with the actor's frictions: inverse-CDF samples of
    `acting_probs` at the uniforms ``u``, replaced by ``random`` where ``flip`` holds (random-action bug)."""
    actions = sample_actions(acting_probs(logits, temperature, noise), u)
    if flip is not None:
        actions = torch.where(flip, random, actions)
    return actions


def flipped_reward_share(success: float, p: float) -> float:
    """Among the episodes a binary reward shows as rewarded, the share that are corruption flips, when a
    fraction ``success`` of episodes truly succeed and each reward is flipped with probability ``p``:
    (1 - s) p / ((1 - s) p + s (1 - p)). (M = 2, H = 10, exact-only reward, p = 0.1: 99.1% at the start.)"""
    false_pos, true_pos = (1.0 - success) * p, success * (1.0 - p)
    return false_pos / (false_pos + true_pos) if false_pos + true_pos > 0 else float("nan")


def parse_frictions(spec: str | Frictions | None) -> Frictions:
    """Parse a friction spec (module docstring). Raises a one-line ValueError naming the bad part."""
    if isinstance(spec, Frictions):
        return spec
    if spec is None or (isinstance(spec, str) and spec.strip().lower() in ("", "none")):
        return Frictions()
    if not isinstance(spec, str):
        raise _err(spec, "expected a string")
    try:
        terms = parse(spec)
        found: dict[str, object] = {}
        for term in terms:
            if term.name not in _COMPONENTS:
                raise SpecError(f"unknown friction {term.name!r}")
            if term.name in found:
                raise SpecError(f"{term.name} appears twice")
            found[term.name] = bind(term, _COMPONENTS[term.name], positional=("frac",) if term.name == "bug" else
                                    ("p",) if term.name == "reward" else ("sigma",))
    except SpecError as exc:
        raise _err(spec, str(exc)) from None
    return Frictions(spec.strip(), **found)


def _err(spec: object, why: str) -> SpecError:
    return SpecError(f"bad friction spec {spec!r}: {why}; allowed: {' + '.join(FORMS)}")


# -- token reversal: candidate friction levels and the frozen preset ---------------------------------------
#
# The four frictions of the token-reversal panel (DDG-2, arXiv 2603.20521) as run settings: staleness
# (a delay spec), actor bugs and reward corruption (friction specs) and rare discovery (the task's binary
# reward for at least ``min_correct`` of H tokens right; None = exact sequences only). How the paper
# simulates them is not known; the levels below are candidates, calibrated on the baselines (PG, PPO,
# PMPO) by the rule in sweeps/calibration/RULE.md, with the method under test never run.

PANEL = ("none", "staleness", "bugs", "corruption", "rare", "all")

TOKEN_REVERSAL_LEVELS: dict[str, dict[str, object]] = {
    "L1": {"staleness": "uniform:2", "bugs": "bug(frac=0.2, kind=temperature, temp=2, sticky=true)",
           "corruption": "reward(p=0.01, kind=flip)", "min_correct": 8},
    "L2": {"staleness": "uniform:4", "bugs": "bug(frac=0.2, kind=random, eps=0.25, sticky=true)",
           "corruption": "reward(p=0.03, kind=flip)", "min_correct": 9},
    "L3": {"staleness": "uniform:8", "bugs": "bug(frac=0.2, kind=random, sticky=true)",
           "corruption": "reward(p=0.1, kind=flip)", "min_correct": None},
}
# G1 / G2: L1 / L2 with rare discovery graded above its threshold (nothing below k tokens right, the
# fraction right above), added after the screen showed the binary threshold pays near misses in full.
TOKEN_REVERSAL_LEVELS["G1"] = {**TOKEN_REVERSAL_LEVELS["L1"], "graded": True}
TOKEN_REVERSAL_LEVELS["G2"] = {**TOKEN_REVERSAL_LEVELS["L2"], "graded": True}
# G0: weaker than G1 in staleness (lag 0 or 1) and rare discovery (7 of 10 right: 176/1024), added after
# G1's all-four panel left every baseline at 96-100%.
TOKEN_REVERSAL_LEVELS["G0"] = {**TOKEN_REVERSAL_LEVELS["G1"], "staleness": "uniform:1", "min_correct": 7}
# F1: staleness as a *fraction* of lagged chunks instead of a larger lag (geometric:0.9,1: lag 1 with probability
# 1/11, else 0) and rare discovery graded above 6 of 10 right (386/1024), L1's bugs and corruption; added after the
# lag-1 finding (results/findings/token_lag.md): every uniform:D with D >= 1 lags half or more of the batch, and one
# version of lag on half the batch already sends PG to its collapsed basin, so the lag's size cannot be the knob.
TOKEN_REVERSAL_LEVELS["F1"] = {**TOKEN_REVERSAL_LEVELS["G0"], "staleness": "geometric:0.9,1", "min_correct": 6}


def token_reversal_setting(level: dict[str, object], which: str) -> dict[str, object]:
    """Run settings (``delay``, ``frictions``, ``task_args``) of one panel entry for a level (a dict with
    ``staleness``, ``bugs``, ``corruption``, ``min_correct`` and optionally ``graded``). ``which`` in PANEL: ``none`` is sync with the
    partial-credit reward and no friction; each single friction is added alone to it (``rare``: the
    level's rare reward, nothing else: binary, or with ``graded`` the fraction right above the threshold);
    ``all`` combines the four on the level's rare reward."""
    _check(which in PANEL, f"panel entry must be one of {', '.join(PANEL)}, got {which!r}")
    delay = level["staleness"] if which in ("staleness", "all") else "sync"
    fr = [level[k] for k in ("bugs", "corruption") if which in (k, "all")]
    binary = which in ("rare", "all")
    task_args: dict[str, object] = {"partial_credit": not binary or bool(level.get("graded", False))}
    if binary and level["min_correct"] is not None:
        task_args["min_correct"] = level["min_correct"]
    return {"delay": delay, "frictions": "+".join(fr) or "none", "task_args": task_args}


# The frozen definitions: the level chosen by the calibration rule (sweeps/calibration/RULE.md, rule 3),
# with its table in sweeps/calibration/TABLE.md (baselines only; DG never run). Final sampled sequence
# error with all four frictions, 1,000 learner steps of 100 episodes (100k episodes), mean over seeds:
#   level  PG      PPO     PMPO    D     seeds  admissible
#   F1     84.3%   69.6%   90.8%   2.77  2      yes (each friction alone leaves some baseline below 50%)
#   G0     91.0%   87.8%   91.0%   3.38  2      no (its rare discovery alone leaves every baseline >= 90.8%)
#   G1     99.7%   98.5%   97.5%   5.72  3      no (its rare discovery alone leaves every baseline >= 97%)
#   L3     99.9%   99.9%   99.9%   8.13  3      no (the definitions used before calibration)
# Paper (secondary summary): PG ~60%, PPO ~10%, PMPO ~15%. Not reached: the nearest candidate, admissible, is frozen.
# F1 comes from stage 4 (RULE.md, third amendment, fixed after the lag-1 finding). G0 at 10,000 steps (1M episodes, the
# other reading of the paper's budget): PG 94.0%, PPO 99.1%, PMPO 95.4% (sweeps/calibration/budget_G0_all_1M.toml);
# F1 at that budget: sweeps/calibration/TABLE.md, "Budget readings" (no closer to the paper either).
TOKEN_REVERSAL_PRESET = "F1"


def token_reversal_preset(which: str = "all") -> dict[str, object]:
    """The frozen token-reversal frictions (`TOKEN_REVERSAL_PRESET`) as run settings for one panel entry:
    ``{"delay", "frictions", "task_args"}`` (see `token_reversal_setting`)."""
    return token_reversal_setting(TOKEN_REVERSAL_LEVELS[TOKEN_REVERSAL_PRESET], which)
