"""The contract between a task and the runner.

An episode is a context x (an image, a prompt, or nothing) followed by T actions a_1..a_T sampled
autoregressively from pi(a_t | x, a_<t); a bandit has T = 1. The runner (testbed/runner.py) owns
sampling, staleness, frictions and the update; a task only says how to build its policy, compute
logits, rewards and its evaluation metrics. Keeping logits the single point of contact is what lets
the runner apply the same frictions and the same per-token version mixing to every task.

Slots. The runner trains S >= 1 runs at once, so a policy is built for S slots
(`testbed.tasks.stacked`): its parameters are ``[S, ...]`` and the tensors it reads and returns carry
a leading slot dimension. Slot s must depend only on slot s (that is what makes a batched run equal
to the same run alone).

Sampling goes through `Task.decode` (one position at a time). The default recomputes the whole
prefix at every position; a sequence task with a key/value cache overrides `decode_state` and
`decode` so that sampling H tokens costs about one forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from testbed.stabilizers.numerics import log_softmax


class Task:
    """Base class of the runner's tasks (see the module docstring). Subclasses set ``name``,
    ``horizon`` (T) and ``n_actions`` (A) and implement the methods that raise here."""

    name: str = "task"
    horizon: int = 1
    n_actions: int = 2

    def make_policy(self, generators: Sequence[torch.Generator]) -> nn.Module:
        """A policy of ``len(generators)`` slots; slot s is initialised from ``generators[s]`` only."""
        raise NotImplementedError

    def sample_contexts(self, n: int, generator: torch.Generator, split: str = "train") -> Tensor:
        """``n`` contexts as a tensor whose first dimension is n (split: "train" or "test")."""
        raise NotImplementedError

    def logits(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        """Teacher-forced logits [S, B, T', A] for steps 1..T' given ``actions`` [S, B, T'] (T' <= T)
        and ``contexts`` [S, B, ...]. Position t depends only on the context and actions[..., :t]."""
        raise NotImplementedError

    def reward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        """Reward per episode [B] (float32) of one slot's ``contexts`` [B, ...] and ``actions`` [B, T].
        Friction-free: reward corruption is a runner friction."""
        raise NotImplementedError

    def evaluate(self, policy: nn.Module, generators: Sequence[torch.Generator]) -> list[dict[str, float]]:
        """Held-out metrics per slot, e.g. [{"test_error": ..., "test_reward": ...}, ...]."""
        raise NotImplementedError

    # -- sampling, one position at a time ------------------------------------------------------
    def decode_state(self, policy: nn.Module, contexts: Tensor, actions: Tensor, start: int) -> Any:
        """Whatever `decode` needs to produce the logits of positions ``start``, ``start + 1``, ...:
        the actions before ``start`` are final (``actions`` [S, B, T])."""
        del policy, actions, start
        return contexts

    def decode(self, policy: nn.Module, state: Any, actions: Tensor, k: int) -> tuple[Tensor, Any]:
        """(logits [S, B, A] of position ``k``, the state for position k + 1); the actions before ``k``
        are final. Default: the whole prefix recomputed."""
        return self.logits(policy, state, actions[..., : k + 1])[:, :, k], state


def grouped_logits(task: Task, policy: nn.Module, contexts: Tensor, actions: Tensor, group_size: int) -> Tensor:
    """``task.logits(policy, contexts, actions)`` [S, B, T', A] of a batch whose rows come in runs of ``group_size``
    equal contexts (a group: one context sampled ``group_size`` times, as GRPO draws them), computed once per group
    where that is the same function: for a task of horizon 1, whose logits depend on the context alone.

    Each group's logits are repeated to its rows (``repeat_interleave``), so gradients reach the shared
    computation as the sum over the group's rows, as they would through separate rows: the same values up to
    floating-point rounding, at 1 / group_size of the policy's work. Rows that are not such runs (a batch cut
    at random, ``group_size`` 1, a sequence task) get ``task.logits`` on every row. [S, B, T', A]
    """
    rows = contexts.shape[1]
    if task.horizon != 1 or group_size <= 1 or rows % group_size:
        return task.logits(policy, contexts, actions)
    firsts = contexts[:, ::group_size]
    runs = contexts.reshape(contexts.shape[0], rows // group_size, group_size, *contexts.shape[2:])
    if not torch.equal(runs, firsts.unsqueeze(2).expand_as(runs)):
        return task.logits(policy, contexts, actions)
    return task.logits(policy, firsts, actions[:, ::group_size]).repeat_interleave(group_size, dim=1)


def token_logp(logits: Tensor, actions: Tensor) -> Tensor:
    """log pi(a_t | ...) [..., T] of ``actions`` [..., T] under ``logits`` [..., T, A] (computed in float32)."""
    return log_softmax(logits).gather(-1, actions.unsqueeze(-1)).squeeze(-1)


class ExactOracle:
    """Optional, for single-step tasks: exact expectations by enumerating every action, per slot."""

    def expected_reward(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        """sum_a pi(a|x) r(x, a) per slot and context [S, B], differentiable in the policy's parameters."""
        raise NotImplementedError

    def supervised_loss(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        """Mean cross-entropy to the rewarded action (the supervised oracle) per slot [S], differentiable."""
        raise NotImplementedError
