"""Bundled recipes: named combinations of components (see registry.Part).

Every registered component is also a recipe of its own name (``"tis(c=2)+ess_lr"`` composes), so
only true bundles are listed here. A bundle's *default* parts (``core=False``) apply only where no
other term of the spec provides that kind: ``"gac"`` is GRPO with the projection, ``"dg+gac"`` the
DG surrogate on group advantages with the projection.
"""

from __future__ import annotations

from .registry import Part, register_recipe

register_recipe(
    "vcpo",
    (
        Part("advantage", "opob"),
        Part("surrogate", "tis", {"level": "sequence", "c": 8.0}),
        Part("transform", "ess_lr"),
    ),
    "VCPO (arXiv 2602.17616): the off-policy optimal baseline (opob), sequence-level truncated IS "
    "with c = 8, and the ESS-scaled learning rate (ess_lr).",
)

register_recipe(
    "grpo",
    (Part("advantage", "group"), Part("surrogate", "ppo")),
    "GRPO (DeepSeekMath, arXiv 2402.03300): group-normalised advantages (R - mean_g) / (std_g + eps) and the "
    "PPO-clipped ratio relative to the behaviour policy, the base that LLM trainers (and GAC) use.",
)

register_recipe(
    "gac",
    (
        Part("advantage", "group", core=False),
        Part("surrogate", "ppo", core=False),
        Part("transform", "gac_projection"),
    ),
    "GAC (arXiv 2603.01501) as the paper applies it: GRPO (group advantages, PPO clip) with the gradient "
    "alignment projection (gac_projection). The projection alone on bare REINFORCE: pg+gac_projection.",
)
