"""The contract between a task and the runner.

An episode is a context x (an image, a prompt, or nothing) followed by T actions a_1..a_T sampled
autoregressively from pi(a_t | x, a_<t); a bandit has T = 1. The runner (testbed/runner.py) owns
sampling, staleness, frictions and the update; a task only says how to compute logits, rewards and
its evaluation metrics. Keeping logits the single point of contact is what lets the runner apply
the same frictions (temperature, random actions, inference mismatch, perturbed weights) and the
same per-token version mixing to every task.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch
from torch import Tensor, nn


@runtime_checkable
class Task(Protocol):
    """A policy-learning task driven by the runner."""

    name: str
    horizon: int  # T, actions per episode (1 for bandits)
    n_actions: int  # size of the action set / vocabulary

    def make_policy(self, generator: torch.Generator) -> nn.Module:
        """A freshly initialised policy network (initialised from ``generator`` only)."""
        ...

    def sample_contexts(self, n: int, generator: torch.Generator, split: str = "train") -> Tensor:
        """``n`` contexts as a tensor whose first dimension is n (split: "train" or "test")."""
        ...

    def logits(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        """Teacher-forced logits [B, T', A] for steps 1..T' given ``actions`` [B, T'] (T' <= T).

        Position t depends only on the context and actions[:, :t] (causal), so the runner samples
        step t from ``logits(policy, x, prefix_padded)[:, t]`` and the learner recomputes all
        log-probs in one call.
        """
        ...

    def reward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        """Reward per episode [B] (float32). Friction-free: reward corruption is a runner friction."""
        ...

    def evaluate(self, policy: nn.Module, generator: torch.Generator) -> dict[str, float]:
        """Held-out metrics, e.g. {"test_error": ..., "test_reward": ...}."""
        ...


class ExactOracle(Protocol):
    """Optional, for single-step tasks: exact expectations by enumerating every action."""

    def expected_reward(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        """sum_a pi(a|x) r(x, a) per context [B], differentiable in the policy's parameters."""
        ...

    def supervised_loss(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        """Mean cross-entropy to the rewarded action (the supervised oracle), differentiable."""
        ...
