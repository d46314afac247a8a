"""K-armed and multi-context bandits: gymnasium environments and the runner's Task adapters.

Both are single-step (horizon 1), with a tabular softmax policy (one logit per context and action),
so every expectation is a finite sum: the adapters implement `ExactOracle` (exact expected reward
and the supervised cross-entropy to the best action), which the diagnostics use for exact cosines.

Rewards. The environments draw Bernoulli rewards with the means table. The adapters give the
learner the mean reward by default (``bernoulli=False``: deterministic, so runs are exactly
reproducible whatever the sampling order); ``bernoulli=True`` draws Bernoulli rewards from the
task's own generator, seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from testbed.stabilizers.numerics import log_softmax

from . import register_task, stacked
from .base import ExactOracle, Task


def arm_means(k: int) -> np.ndarray:
    """Default K-armed means: evenly spaced in [0.1, 0.9], best arm last."""
    return np.linspace(0.1, 0.9, k) if k > 1 else np.array([0.9])


def one_hot_means(n: int, k: int, seed: int) -> np.ndarray:
    """Default multi-context table: in each context one rewarded action (reward 1), chosen from ``seed``."""
    rng = np.random.default_rng(seed)
    means = np.zeros((n, k))
    means[np.arange(n), rng.integers(0, k, size=n)] = 1.0
    return means


class KArmedBanditEnv(gym.Env):
    """One-step K-armed Bernoulli bandit. Observation: always 0. Reward ~ Bernoulli(means[a])."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, K: int = 10, means: list[float] | None = None) -> None:
        self.means = np.asarray(means if means is not None else arm_means(K), dtype=np.float64)
        self.observation_space = gym.spaces.Discrete(1)
        self.action_space = gym.spaces.Discrete(len(self.means))

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        mean = float(self.means[int(action)])
        return 0, float(self.np_random.random() < mean), True, False, {"mean": mean}


class ContextualBanditEnv(gym.Env):
    """One-step contextual bandit with N contexts and K actions; reward ~ Bernoulli(means[x, a])."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, N: int = 10, K: int = 10, means: list[list[float]] | None = None, table_seed: int = 0) -> None:
        self.means = np.asarray(means, dtype=np.float64) if means is not None else one_hot_means(N, K, table_seed)
        self.observation_space = gym.spaces.Discrete(self.means.shape[0])
        self.action_space = gym.spaces.Discrete(self.means.shape[1])
        self._x = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[int, dict]:
        super().reset(seed=seed)
        self._x = int(self.np_random.integers(self.means.shape[0]))
        return self._x, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict]:
        mean = float(self.means[self._x, int(action)])
        return self._x, float(self.np_random.random() < mean), True, False, {"mean": mean}


class _TabularBandit(Task, ExactOracle):
    """Shared adapter code: contexts are indices into the means table; the policy is a free logit per
    (context, action) for each slot (`testbed.tasks.stacked.Table`, initialised N(0, init_std^2))."""

    name = "tabular"
    horizon = 1
    means: Tensor
    bernoulli: bool
    init_std: float
    runner_defaults: ClassVar[dict] = {"batch_size": 32, "lr": 0.1}

    def _setup(self, means: np.ndarray, seed: int) -> None:
        if means.ndim != 2 or means.size == 0:
            raise ValueError(f"{self.name}: means must be a non-empty [N, K] table")
        if (means < 0).any() or (means > 1).any():
            raise ValueError(f"{self.name}: means must lie in [0, 1]")
        if self.init_std < 0:
            raise ValueError(f"{self.name}: init_std must be >= 0, got {self.init_std}")
        self.means = torch.as_tensor(means, dtype=torch.float32)
        self.n_contexts, self.n_actions = self.means.shape
        self.best = self.means.argmax(dim=1)
        self._reward_gen = torch.Generator().manual_seed(seed)

    def make_policy(self, generators: Sequence[torch.Generator]) -> nn.Module:
        return stacked.Table(self.n_contexts, self.n_actions, generators, self.init_std)

    def sample_contexts(self, n: int, generator: torch.Generator, split: str = "train") -> Tensor:
        return torch.randint(self.n_contexts, (n,), generator=generator)

    def logits(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        return policy(contexts).unsqueeze(2)

    def reward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        mean = self.means[contexts, actions[..., 0]]
        if self.bernoulli:
            return (torch.rand(mean.shape, generator=self._reward_gen) < mean).to(torch.float32)
        return mean

    # -- exact oracles --------------------------------------------------------------------------
    def expected_reward(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        probs = log_softmax(policy(contexts)).exp()
        return (probs * self.means[contexts]).sum(-1)

    def supervised_loss(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        logp = log_softmax(policy(contexts))
        return -logp.gather(-1, self.best[contexts].unsqueeze(-1)).squeeze(-1).mean(-1)

    @torch.no_grad()
    def evaluate(self, policy: nn.Module, generators: Sequence[torch.Generator]) -> list[dict[str, float]]:
        """Exact, over all contexts (uniformly weighted), per slot: expected reward, regret, greedy error."""
        x = torch.arange(self.n_contexts).expand(len(generators), -1)
        exp_r = self.expected_reward(policy, x)
        best_r = self.means.max(dim=1).values
        greedy = policy(x).argmax(-1)
        wrong = (self.means[x, greedy] < best_r).float().mean(1)
        return [{"test_reward": float(r), "test_regret": float((best_r - e).mean()), "test_error": float(w)}
                for r, e, w in zip(exp_r.mean(1), exp_r, wrong, strict=True)]


@register_task
class BanditTask(_TabularBandit):
    """K-armed bandit (one context). Options: K, means (default: evenly spaced in [0.1, 0.9])."""

    name = "bandit"

    def __init__(self, K: int = 10, means: list | None = None, bernoulli: bool = False, init_std: float = 0.0,
                 seed: int = 0) -> None:
        if K < 1:
            raise ValueError(f"bandit: K must be >= 1, got {K}")
        self.bernoulli, self.init_std = bernoulli, init_std
        self._setup(np.asarray(means if means is not None else arm_means(K), dtype=np.float64)[None, :], seed)


@register_task
class ContextualBanditTask(_TabularBandit):
    """Multi-context bandit: N contexts x K actions (default: one rewarded action per context)."""

    name = "contextual_bandit"

    def __init__(self, N: int = 10, K: int = 10, means: list | None = None, bernoulli: bool = False,
                 init_std: float = 0.0, table_seed: int = 0, seed: int = 0) -> None:
        if N < 1 or K < 1:
            raise ValueError(f"contextual_bandit: N and K must be >= 1, got N={N}, K={K}")
        self.bernoulli, self.init_std = bernoulli, init_std
        table = np.asarray(means, dtype=np.float64) if means is not None else one_hot_means(N, K, table_seed)
        self._setup(table, seed)
