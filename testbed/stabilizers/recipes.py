"""Bundled recipes: named combinations of components (see registry.Part)."""

from __future__ import annotations

# Filled in as components land, e.g.:
# register_recipe("vcpo", (Part("advantage", "opob"), Part("surrogate", "tis", {"level": "sequence", "c": 8.0}),
#                          Part("transform", "ess_lr")), "VCPO (arXiv 2602.17616): ...")
