"""The project's one seed scheme: every random stream is a child of the run's seed, keyed by purpose.

A stream is named by the run's seed and a path of keys, e.g. ``(seed, "slot", step, actor)`` for
the samples an actor hands the learner at ``step``. The path is turned into entropy by numpy's
`numpy.random.SeedSequence` (``entropy=seed, spawn_key=keys``), the standard construction for
independent, reproducible child streams (O'Neill's hash-based seed mixing; numpy's docs,
"Parallel random number generation"). String keys enter as their CRC-32, integer keys as
themselves. Because a stream depends only on its path, results do not depend on the order in which
streams are used (an actor's chunk is the same whichever event samples it first).

`SCHEME` is part of every run id (testbed/runner.py): a change to how streams are derived changes
every id, so a results cache never serves a run made under an older scheme.
"""

from __future__ import annotations

import zlib

import numpy as np
import torch

SCHEME = 2  # 1: SplitMix64 mixing (before the one-loop runner); 2: numpy SeedSequence


def _key(part: int | str) -> int:
    if isinstance(part, str):
        return zlib.crc32(part.encode())
    if isinstance(part, bool) or not isinstance(part, int | np.integer) or part < 0:
        raise ValueError(f"seed keys must be non-negative integers or strings, got {part!r}")
    return int(part)


def seed_sequence(seed: int, *keys: int | str) -> np.random.SeedSequence:
    """The SeedSequence of stream ``keys`` under ``seed`` (seed a non-negative integer)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return np.random.SeedSequence(entropy=int(seed), spawn_key=tuple(_key(k) for k in keys))


def derive(seed: int, *keys: int | str) -> int:
    """A 63-bit integer seed for stream ``keys`` (for libraries that take an int)."""
    state = seed_sequence(seed, *keys).generate_state(2, np.uint32)
    return ((int(state[0]) << 32) | int(state[1])) >> 1


def generator(seed: int, *keys: int | str) -> torch.Generator:
    """A CPU ``torch.Generator`` for stream ``keys``."""
    return torch.Generator().manual_seed(derive(seed, *keys))


def numpy_rng(seed: int, *keys: int | str) -> np.random.Generator:
    """A numpy ``Generator`` (PCG64) for stream ``keys``."""
    return np.random.default_rng(seed_sequence(seed, *keys))
