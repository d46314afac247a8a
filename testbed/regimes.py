"""Named regimes: the learner and staleness settings of a kind of trainer, as presets of a run's config.

A run names its regime (``RunConfig.regime``, ``--regime NAME``, ``regime = "NAME"`` in a sweep file);
the regime's settings fill the fields the run leaves unset (None), before the task's defaults and the
global ones: explicit settings > regime > task defaults > DEFAULTS (testbed/runner.py).

* ``one_step``: one optimizer step per batch, no groups: the setting of the papers' MNIST and token
  reversal experiments (and of every run that names no regime).
* ``async_grpo``: what LLM trainers do (verl, AReaL, TRL): GRPO groups of G samples per context,
  K epochs over N minibatches per batch (several optimizer steps per batch), the proximal policy of
  decoupled PPO = the policy at the start of the batch, and AReaL's bounded staleness with actors
  faster than the learner. The values are those of the regime search (sweeps/regime/, README), in which
  naive GRPO degrades significantly under staleness while its synchronous version learns; ``stale``
  lists the two staleness levels the search and the claims use.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from testbed.stabilizers.spec import SpecError


@dataclass(frozen=True)
class Regime:
    """A preset: run settings per task (``"*"``: any task), and the staleness levels it is studied at."""

    name: str
    doc: str
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    stale: tuple[str, ...] = ()

    def for_task(self, task: str) -> dict[str, Any]:
        return {**self.settings.get("*", {}), **self.settings.get(task, {})}


REGIMES: dict[str, Regime] = {}


def register_regime(regime: Regime) -> Regime:
    REGIMES[regime.name] = regime
    return regime


def get_regime(name: str) -> Regime:
    if name not in REGIMES:
        raise SpecError(f"unknown regime {name!r}; allowed: {', '.join(REGIMES)}")
    return REGIMES[name]


register_regime(Regime("one_step", "one optimizer step per batch, no groups (the papers' setting)",
                       {"*": {"group_size": 1, "epochs": 1, "minibatches": 1}}))

# The values come from the search (sweeps/regime/search_*.toml, summarised by sweeps/regime/summarize.py;
# the table is in README.md): on MNIST naive GRPO's final test error rises significantly (paired over 5
# seeds: by more than 2 standard errors and 2 points) at both staleness levels while its synchronous
# version learns. On token reversal no searched setting made it degrade (staleness helped instead).
register_regime(Regime(
    "async_grpo",
    "LLM trainers' regime: GRPO groups of G samples per context, one epoch over N minibatches per batch (N "
    "optimizer steps), proximal policy = policy at the start of the batch, bounded staleness with actors 4x "
    "faster than the learner",
    {"mnist": {"group_size": 10, "epochs": 1, "minibatches": 4, "lr": 3e-3, "delay": "bounded:8,4"},
     # the same shape on token reversal; no setting of its search made GRPO degrade (README), so this is
     # the regime's shape at the learning rate with the best synchronous GRPO of that search
     "token_reversal": {"group_size": 10, "epochs": 1, "minibatches": 4, "lr": 1e-4, "delay": "bounded:8,4"}},
    stale=("bounded:8,4", "bounded:32,4"),
))
