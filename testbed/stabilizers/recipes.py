"""Bundled recipes: named combinations of components (see registry.Part).

Every registered component is also a recipe of its own name (``"gac"`` = default advantage + pg +
the gac projection; ``"tis(c=2)+ess_lr"`` composes), so only true bundles are listed here.
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
