"""Asynchronous GRPO on Hugging Face causal LMs with the testbed's stabilizer recipes, and verl/TRL plugins.

    python -m llm_scale train --model tiny --task copy --recipe dg --max-staleness 2

The recipe objects are ``testbed.stabilizers.build(spec)``, unchanged. Importing this package is
cheap: transformers is imported only when a model is built.
"""

from typing import Any

__all__ = ["TrainConfig", "Trainer", "UsageError"]


def __getattr__(name: str) -> Any:
    """The trainer and its config load on first use: the verl and TRL plugins (llm_scale.integrations) import
    this package in their host's workers, where a failure of the trainer's imports must not stop them."""
    if name in ("TrainConfig", "UsageError"):
        from . import config

        return getattr(config, name)
    if name == "Trainer":
        from .trainer import Trainer

        return Trainer
    raise AttributeError(f"module 'llm_scale' has no attribute {name!r}")
