"""Stabilizers for off-policy / asynchronous policy gradients, as small exact torch components.

Public entry points (relied on by the testbed, llm_scale and the verl/TRL plugins)::

    available() -> list[str]          build(spec) -> Recipe
    PolicyTerms(logp, behavior_logp, advantages, mask, proximal_logp=None, versions=None,
                group_ids=None, rewards=None)
    recipe.advantages(...), recipe.loss(terms, agg), recipe.step(model, optimizer, terms)
"""

from . import advantages, dg, gradient, importance, ppo_family, recipes, surrogates  # noqa: F401  (registration)
from .aggregation import AGG_MODES, aggregate
from .base import Advantage, BatchStats, GradientTransform, Surrogate, TransformResult
from .dg import delight, delight_gate, kondo_gate
from .numerics import MAX_LOG_RATIO, effective_sample_size, safe_exp, sequence_log_ratio
from .recipe import Recipe
from .registry import ADVANTAGES, NAMED_RECIPES, SURROGATES, TRANSFORMS, available, build, parse_spec, register
from .score_norms import score_sq_norms
from .terms import LossOutput, PolicyTerms

__all__ = [
    "ADVANTAGES", "AGG_MODES", "MAX_LOG_RATIO", "NAMED_RECIPES", "SURROGATES", "TRANSFORMS",
    "Advantage", "BatchStats", "GradientTransform", "LossOutput", "PolicyTerms", "Recipe", "Surrogate",
    "TransformResult", "aggregate", "available", "build", "delight", "delight_gate", "effective_sample_size",
    "kondo_gate", "parse_spec", "register", "safe_exp", "score_sq_norms", "sequence_log_ratio",
]
