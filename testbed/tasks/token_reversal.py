"""Token reversal, copy and flip: length-H sequences over a vocabulary of M, written by a transformer.

The toy sequence task of the Delightful distributed policy-gradient paper (arXiv 2603.20521; what
is known of it comes from a secondary summary: M = 2, H = 10, a decoder-only transformer with
d_model 64, 2 layers, 2 heads, metric = fraction of sampled sequences not exactly right).

An episode: a context x in {0..M-1}^H is drawn uniformly (from the train or test split, below);
the policy writes y_1..y_H autoregressively, one token per step (horizon T = H, n_actions = M).
The target y* depends on ``variant``:

* ``reverse``: y*_t = x_{H+1-t}
* ``copy``:    y*_t = x_t
* ``flip``:    y*_t = M - 1 - x_t (each token mirrored in the vocabulary; for M = 2 the bit complement)

Reward (friction-free; reward corruption is the runner's friction): 1 for an exactly correct
sequence, else 0. With ``partial_credit=True`` the reward is the fraction of correct tokens
(so an exact sequence still earns 1). With ``min_correct=k`` nothing is paid unless at least k of the
H tokens are right; above that the reward is 1 (binary) or, with ``partial_credit=True``, the fraction
of correct tokens (graded: the reward still grows up to the exact sequence). The binary default is
k = H (exact only). Metrics are always about exact sequences.

Rare discovery (how the paper simulated it is not known; this is our choice)
---------------------------------------------------------------------------
The rewarded behaviour must be exponentially rare under the initial policy. We obtain that with
two documented mechanisms, and nothing else:

1. *Exact-only reward* (the default, ``partial_credit=False``). The policy's output head is
   zero-initialised (transformer.py), so the initial policy is exactly uniform and a sampled
   sequence is rewarded with probability exactly M^-H (1/1024 at H = 10, M = 2; 1/8192 at H = 13),
   in every context. With 100 episodes per step that is about one rewarded episode every ten steps
   at H = 10, and learning cannot start before one is found. "Rare discovery off" means
   ``partial_credit=True``: every correct token is rewarded and the signal is dense. We chose this
   because it is the mechanism of rare discovery itself ("only exact sequences count and M^H is large"),
   because its discovery rate is known in closed form, and because it leaves the policy class and
   the initialisation untouched (no hidden prior that a method could exploit).
2. *A wrong habit* (optional, ``rare_p0=p0`` with 0 < p0 < 1/M). Averaged over uniform contexts,
   no context-independent bias of the initial policy changes the discovery rate (each position is
   right with probability 1/M whatever the bias), so making discovery rarer than M^-H needs an
   initial policy that is systematically wrong, as a pretrained model with a bad habit is. We warm
   start the fresh network by supervised cross-entropy toward a decoy answer, the target shifted
   by one in the vocabulary ((y*_t + 1) mod M; for M = 2 the complement), teacher-forced on the
   correct prefix, until the geometric-mean probability of the correct next token over a training
   batch is at most p0. The exact sequence then has probability about p0^H (the measured value is
   ``initial_success`` after ``make_policy``). The decoy is learned from the context by the network
   itself; nothing about the target is stored outside its weights. Off by default.
3. *A graded rarity* (optional, ``min_correct=k``). The reward pays only when at least k of the H
   tokens are right (1, or the fraction right with ``partial_credit``), so the rewarded event has probability `discovery_probability` (H, M, k) =
   sum_{j >= k} C(H, j) (M - 1)^(H - j) / M^H under the uniform initial policy (M = 2, H = 10: k = 10
   gives 1/1024, k = 9 gives 11/1024, k = 8 gives 56/1024). This makes the strength of rare
   discovery a number that can be calibrated (testbed/frictions.py, presets).

Train / test split
------------------
The context space is split by a fixed hash of the sequence (independent of every seed): a fraction
``holdout`` (default 0.2) of contexts is reserved for evaluation and never drawn for training, so
the test error measures generalisation to unseen contexts. When the whole space has fewer than
``min_holdout_space`` (128) contexts (e.g. H = 4, M = 2 has 16) there is no room for a split and
both splits are the whole space; "held out" then means fresh samples, not unseen contexts.

Evaluation reports, on the test split, the *sampled* sequence error (one sampled sequence per
context at temperature 1: the paper's metric), the *greedy* sequence error (argmax decoding),
token error and mean reward. When the test split has at most ``n_eval`` contexts it is enumerated
(each context sampled max(1, n_eval // size) times, and decoded greedily once: greedy decoding is
deterministic and every context appears equally often, so the greedy errors are the same numbers),
otherwise ``n_eval`` contexts are drawn.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from testbed.frictions import sample_actions
from testbed.stabilizers.numerics import log_softmax

from . import register_task, stacked
from .base import Task, token_logp
from .transformer import DecoderTransformer

VARIANTS = ("reverse", "copy", "flip")
_HASH_PRIME = 1_000_003
_ENUMERATE_MAX = 1 << 16  # enumerate the context space up to this size


def discovery_probability(H: int, M: int, k: int | None = None) -> float:
    """Probability that a uniformly random sequence gets at least k of H tokens right (vocabulary M):
    sum_{j >= k} C(H, j) (M - 1)^(H - j) / M^H; k None means H (exact sequences: M^-H)."""
    k = H if k is None else k
    return sum(math.comb(H, j) * (M - 1) ** (H - j) for j in range(k, H + 1)) / M**H


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)


@register_task
@dataclass
class TokenReversal(Task):
    """The sequence task (see the module docstring). Parameters are settable by name from the CLI."""

    H: int = 10
    M: int = 2
    variant: str = "reverse"
    partial_credit: bool = False
    rare_p0: float | None = None
    min_correct: int | None = None
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 2
    holdout: float = 0.2
    n_eval: int = 512
    min_holdout_space: int = 128
    initial_success: float | None = field(default=None, init=False)

    name = "token_reversal"
    # The paper's setting (secondary summary): 10 actors, 100 episodes per learner step, Adam.
    runner_defaults: ClassVar[dict] = {"n_actors": 10, "batch_size": 100, "lr": 1e-3}

    def __post_init__(self) -> None:
        _check(isinstance(self.H, int) and self.H >= 1, f"token_reversal: H must be an integer >= 1, got {self.H!r}")
        _check(isinstance(self.M, int) and self.M >= 2, f"token_reversal: M must be an integer >= 2, got {self.M!r}")
        _check(self.variant in VARIANTS, f"token_reversal: unknown variant {self.variant!r}; allowed: {', '.join(VARIANTS)}")
        _check(0.0 <= self.holdout < 1.0, f"token_reversal: holdout must be in [0, 1), got {self.holdout!r}")
        _check(self.n_eval >= 1, f"token_reversal: n_eval must be >= 1, got {self.n_eval!r}")
        if self.rare_p0 is not None:
            _check(0.0 < self.rare_p0 < 1.0 / self.M,
                   f"token_reversal: rare_p0 must be in (0, 1/M) = (0, {1.0 / self.M:.3g}), got {self.rare_p0!r}")
        if self.min_correct is not None:
            _check(isinstance(self.min_correct, int) and 1 <= self.min_correct <= self.H,
                   f"token_reversal: min_correct must be an integer in [1, H] = [1, {self.H}], got {self.min_correct!r}")
        _check(self.d_model % self.n_heads == 0,
               f"token_reversal: d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        self.partial_credit = bool(self.partial_credit)
        g = torch.Generator().manual_seed(20260321)  # fixes the split; part of the task, not of a run
        self._hash_w = torch.randint(1, _HASH_PRIME, (self.H,), generator=g, dtype=torch.long)
        self.space = self.M**self.H
        self.split_enabled = self.holdout > 0 and self.space >= self.min_holdout_space

    # -- the task contract (testbed/tasks/base.py) --------------------------------------------------
    @property
    def horizon(self) -> int:
        return self.H

    @property
    def n_actions(self) -> int:
        return self.M

    def make_policy(self, generators: Sequence[torch.Generator]) -> nn.Module:
        """One transformer per generator (each warm-started alone when ``rare_p0`` is set), stacked."""
        slots = []
        for gen in generators:
            policy = DecoderTransformer(self.H, self.M, self.d_model, self.n_layers, self.n_heads, generators=[gen])
            if self.rare_p0 is not None:
                self._warm_start_decoy(policy, gen)
            slots.append(policy)
        return slots[0] if len(slots) == 1 else stacked.concat(slots)

    def sample_contexts(self, n: int, generator: torch.Generator, split: str = "train") -> Tensor:
        _check(split in ("train", "test"), f"token_reversal: split must be 'train' or 'test', got {split!r}")
        if not self.split_enabled:
            return torch.randint(0, self.M, (n, self.H), generator=generator)
        out, have = [], 0
        while have < n:
            x = torch.randint(0, self.M, (2 * (n - have) + 8, self.H), generator=generator)
            x = x[self.in_test(x) == (split == "test")]
            out.append(x)
            have += x.shape[0]
        return torch.cat(out)[:n]

    def logits(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        return policy(contexts, actions)

    def decode_state(self, policy: nn.Module, contexts: Tensor, actions: Tensor, start: int) -> Any:
        return {"contexts": contexts, "start": start, "cache": None}

    def decode(self, policy: nn.Module, state: Any, actions: Tensor, k: int) -> tuple[Tensor, Any]:
        """Key/value-cached decoding: a prefill at the first position, then one token at a time."""
        if state["cache"] is None:
            _check(k == state["start"], "token_reversal: decoding must start at the state's start position")
            logits, state["cache"] = policy(state["contexts"], actions, start=k)
        else:
            _check(k == state["cache"].length - self.H, "token_reversal: positions must be decoded in order")
            logits = policy(None, actions[..., k - 1], cache=state["cache"])
        return logits.float(), state

    def reward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        correct = actions.long() == self.target(contexts)
        n_right = correct.sum(dim=-1)
        paid = n_right >= (self.H if self.min_correct is None else self.min_correct)
        if self.partial_credit:
            frac = n_right.to(torch.float32) / self.H
            return frac if self.min_correct is None else torch.where(paid, frac, torch.zeros_like(frac))
        return paid.to(torch.float32)

    @torch.no_grad()
    def evaluate(self, policy: nn.Module, generators: Sequence[torch.Generator]) -> list[dict[str, float]]:
        """Per slot, on the test split: sampled and greedy sequence and token error, sampled reward."""
        sampled = torch.stack([self.eval_contexts(g) for g in generators])
        u = torch.stack([torch.rand(sampled.shape[1:], generator=g) for g in generators])
        # greedy decoding is deterministic: where the evaluation repeats the enumerated test split, each context
        # is decoded once (every context appears equally often, so the means are the same numbers)
        split = self.enumerated_split
        greedy = sampled if split is None else split.expand(len(generators), -1, -1)
        out: list[dict[str, float]] = [{} for _ in generators]
        for mode, contexts in (("sampled", sampled), ("greedy", greedy)):
            target = self.target(contexts)
            actions, _ = self.rollout(policy, contexts, None if mode == "greedy" else u)
            correct = actions == target
            seq_err = 1.0 - correct.all(dim=-1).float().mean(-1)
            tok_err = 1.0 - correct.float().mean((-1, -2))
            suffix = "" if mode == "sampled" else "_greedy"
            reward = self.reward(contexts, actions).mean(-1)
            for i, row in enumerate(out):
                row[f"test_error{suffix}"] = float(seq_err[i])
                row[f"test_token_error{suffix}"] = float(tok_err[i])
                if mode == "sampled":
                    row["test_reward"] = float(reward[i])
        return out

    # -- helpers -------------------------------------------------------------------------------
    def target(self, contexts: Tensor) -> Tensor:
        """The correct sequence y* for each context. [..., H] long"""
        x = contexts.long()
        if self.variant == "reverse":
            return x.flip(-1)
        if self.variant == "copy":
            return x.clone()
        return self.M - 1 - x

    def in_test(self, contexts: Tensor) -> Tensor:
        """Whether each context belongs to the held-out test split (a fixed hash). [B] bool"""
        if not self.split_enabled:
            return torch.ones(contexts.shape[:-1], dtype=torch.bool)
        key = (contexts.long() * self._hash_w).sum(dim=-1) % _HASH_PRIME
        return key < int(self.holdout * _HASH_PRIME)

    def all_contexts(self) -> Tensor:
        """Every context of the space in lexicographic order (only for spaces up to 2^16). [M^H, H]"""
        _check(self.space <= _ENUMERATE_MAX, f"token_reversal: M^H = {self.space} is too large to enumerate")
        idx = torch.arange(self.space)
        powers = self.M ** torch.arange(self.H - 1, -1, -1)
        return (idx[:, None] // powers) % self.M

    def eval_contexts(self, generator: torch.Generator) -> Tensor:
        """The contexts evaluate() uses: the whole test split if small enough (`enumerated_split`, repeated
        n_eval // its size times), else n_eval draws."""
        split = self.enumerated_split
        if split is not None:
            return split.repeat(max(1, self.n_eval // split.shape[0]), 1)
        return self.sample_contexts(self.n_eval, generator, split="test")

    @cached_property
    def enumerated_split(self) -> Tensor | None:
        """The whole test split, in lexicographic order, when evaluation enumerates it (a space of at most 2^16
        contexts whose test split has at most n_eval of them); None when evaluation draws contexts. [n, H]
        Built on first use and kept: it depends only on the task's settings, and every evaluation reads it."""
        if self.space > _ENUMERATE_MAX:
            return None
        x = self.all_contexts()
        x = x[self.in_test(x)]
        return x if x.shape[0] <= self.n_eval else None

    @torch.no_grad()
    def rollout(self, policy: nn.Module, contexts: Tensor, u: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Sample (``u`` [S, B, H] uniforms: inverse-CDF draws) or decode greedily (``u`` None) a sequence per
        context [S, B, H] with the key/value cache: (actions [S, B, H] long, log-probs [S, B, H]).

        The log-probs are those of the policy that decoded, at the tokens it chose. The runner has its own
        sampler (with versions and frictions); this one serves evaluation and tests.
        """
        actions = torch.zeros(contexts.shape, dtype=torch.long)
        logp = torch.zeros(contexts.shape)
        state = self.decode_state(policy, contexts, actions, 0)
        for t in range(self.H):
            logits, state = self.decode(policy, state, actions, t)
            logprobs = log_softmax(logits)
            a = logprobs.argmax(dim=-1) if u is None else sample_actions(logprobs.exp(), u[..., t])
            actions[..., t] = a
            logp[..., t] = logprobs.gather(-1, a.unsqueeze(-1)).squeeze(-1)
        return actions, logp

    def sequence_logp(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        """log pi(actions | context) per token, teacher-forced in one call. [S, B, H]"""
        return token_logp(self.logits(policy, contexts, actions), actions.long())

    def _warm_start_decoy(self, policy: nn.Module, generator: torch.Generator, max_steps: int = 2000) -> None:
        """Supervised warm start of a one-slot policy toward the decoy (y* + 1) mod M until
        exp(mean log pi(y*_t)) <= rare_p0."""
        opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
        log_p0 = math.log(self.rare_p0)
        for _ in range(max_steps):
            x = self.sample_contexts(128, generator)[None]
            y = self.target(x)
            logprobs = log_softmax(self.logits(policy, x, y))
            mean_logp_target = logprobs.gather(-1, y[..., None]).mean()
            if float(mean_logp_target.detach()) <= log_p0:
                break
            loss = -logprobs.gather(-1, ((y + 1) % self.M)[..., None]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        else:
            raise RuntimeError(f"token_reversal: decoy warm start did not reach rare_p0={self.rare_p0} in {max_steps} steps")
        with torch.no_grad():
            x = self.sample_contexts(1024, generator)[None]
            self.initial_success = float(self.sequence_logp(policy, x, self.target(x)).sum(-1).exp().mean())
        policy.zero_grad(set_to_none=True)


class TokenReversalEnv(gym.Env):
    """The task as a stepwise gymnasium environment (registered as ``testbed/TokenReversal-v0``).

    ``reset`` draws a context from the train split; each ``step`` writes one token; the episode
    terminates after H tokens with the task's reward (0 before). Observation: ``{"context": [H] in
    0..M-1, "prefix": [H] with the tokens written so far and M for "not yet"}``. Keyword arguments
    are those of `TokenReversal` (H, M, variant, partial_credit, ...).
    """

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, **task_options: Any) -> None:
        self.task = TokenReversal(**task_options)
        h, m = self.task.H, self.task.M
        self.observation_space = gym.spaces.Dict(
            {"context": gym.spaces.MultiDiscrete([m] * h), "prefix": gym.spaces.MultiDiscrete([m + 1] * h)}
        )
        self.action_space = gym.spaces.Discrete(m)
        self._context = torch.zeros((1, h), dtype=torch.long)
        self._prefix: list[int] = []

    def _obs(self) -> dict[str, np.ndarray]:
        prefix = self._prefix + [self.task.M] * (self.task.H - len(self._prefix))
        return {"context": self._context[0].numpy().astype(np.int64), "prefix": np.asarray(prefix, dtype=np.int64)}

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        gen = torch.Generator().manual_seed(int(self.np_random.integers(2**62)))
        self._context = self.task.sample_contexts(1, gen, "train")
        self._prefix = []
        return self._obs(), {}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        if len(self._prefix) >= self.task.H:
            raise RuntimeError("step() called after the episode terminated; call reset()")
        self._prefix.append(int(action))
        if len(self._prefix) < self.task.H:
            return self._obs(), 0.0, False, False, {}
        reward = float(self.task.reward(self._context, torch.tensor([self._prefix]))[0])
        return self._obs(), reward, True, False, {"target": self.task.target(self._context)[0].tolist()}
