"""How a run ended: its status in the results (``status`` column and the run's record).

* ``ok``: trained to its last step.
* ``diverged``: its loss, gradient or parameters became non-finite (the runner's check); it keeps the
  rows logged before and ends with a row marking ``diverged_at``.
* ``collapsed``: it did not diverge, but its policy collapsed onto actions no better than chance. Rule:
  at its last logged step (1) its held-out reward ``test_reward`` is at most
  ``chance + COLLAPSE_TOL x (1 - chance)`` (rewards lie in [0, 1] in every task here), and (2) its
  final policy is (near-)deterministic: the mean per-token entropy of its greedy rollouts on
  `N_CONTEXTS` held-out contexts is at most ``ENTROPY_TOL x log A`` (A actions). Such a policy puts
  probability ~1 on its choices, so its policy gradient is ~0 and it cannot recover (a learning rate
  of 1e3 or 1e6 on MNIST does this within a few steps). Condition (2) keeps runs that merely have not
  learned yet (a short run, a sparse reward not yet found; their policy is still spread out) ``ok``.
  *Chance* is the held-out reward of the uniform policy, measured by the task's own ``evaluate()`` on
  its policy with every parameter set to zero (all logits equal): 0.1 on MNIST, the mean of the
  reward table on the bandits, about M^-H on token reversal (sampled, so within noise).
* ``failed``: the run raised an exception (a bug, or memory ran out); nothing of it is kept but its
  record and the traceback in ``runs/<run id>.log``. Rerunning the same command retries it.

Collapsed runs keep their (finite) metrics: they are real outcomes, and `testbed report` averages them
with the ok runs of their setting and counts them; diverged and failed runs have no final value.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import torch
from torch.func import functional_call

from testbed.util.seeding import generator

STATUSES = ("ok", "collapsed", "diverged", "failed")
COLLAPSE_TOL = 0.1
ENTROPY_TOL = 0.05
N_CONTEXTS = 256


def _zero_policy(task: Any) -> torch.nn.Module:
    policy = task.make_policy([generator(0, "chance")])
    with torch.no_grad():
        for p in policy.parameters():
            p.zero_()
    return policy


def chance_reward(task: Any) -> float | None:
    """The held-out reward (``test_reward``) of the uniform policy on ``task`` (module docstring); None when
    the task does not report one."""
    policy = _zero_policy(task)
    with torch.no_grad():
        metrics = task.evaluate(policy, [generator(0, "chance", "eval")])[0]
    value = metrics.get("test_reward")
    return None if value is None else float(value)


def _call(module: torch.nn.Module, params: dict[str, torch.Tensor], *args: Any, **kwargs: Any) -> Any:
    return functional_call(module, params, args, kwargs)


def greedy_entropy(task: Any, policy: Any, contexts: torch.Tensor) -> float:
    """Mean per-token entropy of ``policy``'s greedy rollouts from ``contexts`` [1, n, ...], divided by
    log(number of actions): 0 for a deterministic policy, 1 for the uniform one."""
    horizon, n_actions = int(task.horizon), int(task.n_actions)
    if n_actions < 2:
        return 0.0
    actions = torch.zeros((*contexts.shape[:2], horizon), dtype=torch.long)
    with torch.no_grad():
        for k in range(horizon):
            logits = task.logits(policy, contexts, actions)
            actions[..., k] = logits[..., k, :].argmax(-1)
        logp = torch.log_softmax(task.logits(policy, contexts, actions).to(torch.float64), dim=-1)
        entropy = -(logp.exp() * logp).nan_to_num(0.0).sum(-1)
    return float(entropy.mean() / math.log(n_actions))


def final_entropies(runner: Any, statuses: list[str]) -> dict[int, float]:
    """`greedy_entropy` of the final policy of every run of a finished `testbed.runner.Runner` whose status
    is ``ok``, on `N_CONTEXTS` held-out contexts drawn from the run's seed."""
    out = {}
    for r, status in enumerate(statuses):
        if status != "ok":
            continue
        params = {k: v.detach().unsqueeze(0) for k, v in runner.params(r).items()}
        policy = functools.partial(_call, runner.policy, params)
        seed = runner.runs[r].cfg.seed
        contexts = runner.task.sample_contexts(N_CONTEXTS, generator(seed, "outcome"), "test").unsqueeze(0)
        out[r] = greedy_entropy(runner.task, policy, contexts)
    return out


def collapsed(final_reward: float | None, chance: float | None, entropy: float | None) -> bool:
    """The collapse rule of the module docstring (False when a quantity is unknown or not finite)."""
    values = (final_reward, chance, entropy)
    if any(v is None or not math.isfinite(v) for v in values):
        return False
    return final_reward <= chance + COLLAPSE_TOL * (1.0 - chance) and entropy <= ENTROPY_TOL


def classify(result: Any, chance: float | None, entropy: float | None) -> Any:
    """``result`` (a `testbed.runner.RunResult`) with status ``collapsed`` when the rule says so, and the
    quantities the rule used in its info."""
    info = dict(result.info)
    if chance is not None:
        info["chance_reward"] = chance
    if entropy is not None:
        info["final_entropy"] = entropy
    status = result.status
    if status == "ok" and result.rows:
        final = result.rows[-1].get("test_reward")
        if collapsed(None if final is None else float(final), chance, entropy):
            status = "collapsed"
    return dataclasses.replace(result, status=status, info=info)
