"""The project's seed scheme, `testbed.util.seeding` (shared with llm_scale), under the testbed's name."""

from testbed.util.seeding import SCHEME, derive, generator, numpy_rng, seed_sequence

__all__ = ["SCHEME", "derive", "generator", "numpy_rng", "seed_sequence"]
