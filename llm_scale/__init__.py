"""Asynchronous GRPO on Hugging Face causal LMs with the testbed's stabilizer recipes, and verl/TRL plugins.

    python -m llm_scale train --model tiny --task copy --recipe dg --max-staleness 2

The recipe objects are ``testbed.stabilizers.build(spec)``, unchanged. Importing this package is
cheap: transformers is imported only when a model is built.
"""

from .config import TrainConfig, UsageError
from .trainer import Trainer

__all__ = ["TrainConfig", "Trainer", "UsageError"]
