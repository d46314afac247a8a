"""Training with exact expected gradients on the MNIST bandit (the infinite-sample limits of DG-1).

The runner trains from sampled actions; DG-1 also needs the limits of infinitely many samples per
image, which no sampler reaches. With 10 actions the expectations are finite sums, so this adapter
trains the same MLP (same initialisation as the runner's seed: ``generator(seed, "init")``), with
Adam at the same learning rate and batches of 100 images, on:

* ``pg_exact``: -mean_x sum_a sg(pi(a|x)) A(x, a) log pi(a|x), i.e. the exact gradient of the
  expected reward (PG with infinitely many samples per image; the baseline cancels);
* ``dg_exact``: the same sum with each term gated by DG's gate sg(sigmoid(A l / eta)), l = -log pi(a|x),
  eta = 1 (DG's expected update; the gate is the stabilizers' own `delight_gate`), A = r - b with b the
  batch mean of the expected reward (the expectation of the sampled batch-mean baseline);
* ``ce``: the supervised cross-entropy to the label (the oracle DG-1 measures the gap to).

Results are cached as CSV under ``<cache>/oracle/<hash>.csv`` keyed by the settings, like the runner's
store, so a figure re-plot does not retrain; ``<hash>.json`` beside it records the settings and the machine
that trained the run (testbed/machine.py; absent for runs cached before it was written).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import torch

from testbed.files import atomic_write_text

KINDS = ("pg_exact", "dg_exact", "ce")


def _key(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def train(kind: str, seed: int, steps: int, log_every: int, lr: float = 1e-3, batch: int = 100,
          eta: float = 1.0) -> pd.DataFrame:
    from testbed.seeding import generator
    from testbed.stabilizers import delight_gate
    from testbed.tasks import make_task

    if kind not in KINDS:
        raise ValueError(f"oracle kind must be one of {', '.join(KINDS)}, got {kind!r}")
    torch.set_num_threads(1)
    task = make_task("mnist")
    policy = task.make_policy([generator(seed, "init")])  # one slot
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = generator(seed, "oracle", kind)
    rows = []
    for t in range(steps):
        x = task.sample_contexts(batch, gen, "train")
        logits = policy(task.pixels(x)[None])[0]
        if kind == "ce":
            loss = torch.nn.functional.cross_entropy(logits, task.labels[x])
        else:
            logp = torch.log_softmax(logits, dim=-1)
            probs = logp.detach().exp()
            r = torch.nn.functional.one_hot(task.labels[x], 10).to(logp.dtype)
            base = (probs * r).sum(-1).mean()
            adv = r - base
            weight = probs * adv
            if kind == "dg_exact":  # the real gate (one "token" per image and action)
                weight = weight * delight_gate(adv, logp.detach(), eta)
            loss = -(weight * logp).sum(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (t + 1) % log_every == 0 or t + 1 == steps:
            with torch.no_grad():
                rows.append({"step": t + 1, **task.evaluate(policy, [generator(seed, "eval", t)])[0]})
    return pd.DataFrame(rows)


def _settings(kind: str, seed: int, steps: int, log_every: int) -> dict:
    from testbed.seeding import SCHEME

    return {"kind": kind, "seed": seed, "steps": steps, "log_every": log_every, "lr": 1e-3, "batch": 100,
            "task": "mnist", "seed_scheme": SCHEME}


def rows_path(cache: Path, kind: str, seed: int, steps: int, log_every: int) -> Path:
    """Where the run's rows are cached (its record is the ``.json`` beside them)."""
    return Path(cache) / "oracle" / f"{_key(_settings(kind, seed, steps, log_every))}.csv"


def _train_to(path: str, kind: str, seed: int, steps: int, log_every: int) -> str:
    from testbed.machine import machine

    rows = train(kind, seed, steps, log_every)
    record = {"settings": _settings(kind, seed, steps, log_every), "machine": machine()}
    atomic_write_text(Path(path).with_suffix(".json"), json.dumps(record, indent=1, sort_keys=True))
    atomic_write_text(path, rows.to_csv(index=False))  # the rows last: their file is the "done" marker
    return path


def ensure(cache: Path, jobs: list[tuple[str, int]], steps: int, log_every: int, workers: int = 1,
           cached_only: bool = False) -> None:
    """Train the (kind, seed) jobs not yet cached, in ``workers`` processes."""
    todo = [(k, s) for k, s in jobs if not rows_path(cache, k, s, steps, log_every).is_file()]
    if not todo or cached_only:
        return
    if workers <= 1 or len(todo) == 1:
        for k, s in todo:
            _train_to(str(rows_path(cache, k, s, steps, log_every)), k, s, steps, log_every)
        return
    import concurrent.futures as cf
    import multiprocessing

    with cf.ProcessPoolExecutor(min(workers, len(todo)), mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = [pool.submit(_train_to, str(rows_path(cache, k, s, steps, log_every)), k, s, steps, log_every)
                   for k, s in todo]
        for f in cf.as_completed(futures):
            f.result()


def cached(cache: Path, kind: str, seed: int, steps: int, log_every: int, cached_only: bool = False) -> pd.DataFrame:
    """The run's rows (training it now if needed; an empty frame if ``cached_only`` and absent)."""
    path = rows_path(cache, kind, seed, steps, log_every)
    if not path.is_file():
        if cached_only:
            return pd.DataFrame({"step": [], "test_error": []})
        _train_to(str(path), kind, seed, steps, log_every)
    df = pd.read_csv(path, dtype={"step": "int64", "test_error": "float64", "test_reward": "float64"})
    df["kind"], df["seed"] = kind, seed
    return df
