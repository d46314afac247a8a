"""verl's entry point for this package: registers the ``tb_*`` policy losses, or says loudly why it cannot.

verl imports every ``verl.plugins`` entry point at start-up and logs a failure only at debug level,
so a broken install would surface much later as "Unsupported loss mode: tb_dg". This module never
raises: if `llm_scale.integrations.verl` fails to import, it logs one error line naming the cause
and registers a placeholder for each ``tb_*`` name that raises the same cause when verl calls it.
"""

from __future__ import annotations

import logging

LOGGER = logging.getLogger("llm_scale.integrations.verl")

# The surrogate names, for the placeholders when the registry itself cannot be imported.
KNOWN_SURROGATES = ("cispo", "decoupled_ppo", "dg", "gspo", "is", "kondo", "m2po", "mis", "pg", "pmpo", "ppo", "tis")

ERROR: str | None = None


def _placeholder(loss_name: str, reason: str):  # verl calls it with a PolicyLossFn signature
    def unavailable(*args, **kwargs):
        raise RuntimeError(f"verl policy loss {loss_name!r} is unavailable: the staleness-testbed plugin failed to load ({reason})")

    unavailable.__name__ = f"unavailable_{loss_name}"
    return unavailable


def _register_placeholders(reason: str) -> None:
    try:
        from verl.trainer.ppo import core_algos
    except Exception:  # verl itself is broken: nothing to register into
        return
    try:
        from testbed.stabilizers import SURROGATES

        names = sorted(SURROGATES)
    except Exception:
        names = list(KNOWN_SURROGATES)
    for name in names:
        loss_name = f"tb_{name}"
        if loss_name not in core_algos.POLICY_LOSS_REGISTRY:
            core_algos.register_policy_loss(loss_name)(_placeholder(loss_name, reason))


try:
    from . import verl as plugin  # noqa: F401  (registration happens on import)
except Exception as exc:  # any failure, reported once and kept for the placeholders
    ERROR = " ".join(f"{type(exc).__name__}: {exc}".split())
    LOGGER.error("staleness-testbed verl plugin failed to load, tb_* policy losses are unavailable: %s", ERROR)
    _register_placeholders(ERROR)
