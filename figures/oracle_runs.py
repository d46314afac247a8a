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

The seeds of one kind train together (`train`: one slot per seed of the runner's stacked MLP, each seed's
rows bit for bit its run alone's, at about half the cost of training them one by one), cut into runs that
the workers finish together (`batches`). Results are cached as CSV under ``<cache>/oracle/<hash>.csv``
keyed by the settings, like the runner's store, so a figure re-plot does not retrain; ``<hash>.json`` beside
it records the settings, the machine that trained the run (testbed/machine.py) and the fingerprint of the code
that trained it (`code`: `train` and everything it calls, testbed/util/codeprint.py); a run trained by code that
has changed since is trained again (`current`; a record without a fingerprint, written before records carried
one, is not judged).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from testbed.util.files import atomic_write_text
from testbed.util.planning import plan_runs

KINDS = ("pg_exact", "dg_exact", "ce")


def _key(settings: dict) -> str:
    return hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def train(kind: str, seeds: Sequence[int], steps: int, log_every: int, lr: float = 1e-3, batch: int = 100,
          eta: float = 1.0, stop: Callable[[], bool] | None = None,
          task_args: dict[str, Any] | None = None) -> list[pd.DataFrame]:
    """One run per seed, trained together: the policy holds one slot per seed (the runner's stacked MLP),
    each slot's loss is formed row by row as a single run's, and the summed loss gives each slot exactly its
    own gradient, so every seed's rows are the run alone's, bit for bit. ``stop``: asked after every step;
    when it says so, KeyboardInterrupt (nothing is kept: the runs are short, and start over). ``task_args``: the
    MNIST task's options (``data_dir``, ``train_size``, as a run's ``task_args``; default the embedded subset)."""
    from testbed.stabilizers import delight_gate
    from testbed.tasks import make_task
    from testbed.util.seeding import generator

    if kind not in KINDS:
        raise ValueError(f"oracle kind must be one of {', '.join(KINDS)}, got {kind!r}")
    torch.set_num_threads(1)
    task = make_task("mnist", **(task_args or {}))
    policy = task.make_policy([generator(s, "init") for s in seeds])  # one slot per seed
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gens = [generator(s, "oracle", kind) for s in seeds]
    rows: list[list[dict]] = [[] for _ in seeds]
    for t in range(steps):
        x = torch.stack([task.sample_contexts(batch, g, "train") for g in gens])  # [S, batch]
        logp = torch.log_softmax(policy(task.pixels(x)), dim=-1)  # [S, batch, 10]
        y = task.labels[x]
        if kind == "ce":
            per_image = -logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)
        else:
            probs = logp.detach().exp()
            r = torch.nn.functional.one_hot(y, 10).to(logp.dtype)
            base = (probs * r).sum(-1).mean(-1)  # [S]
            adv = r - base[:, None, None]
            weight = probs * adv
            if kind == "dg_exact":  # the real gate (one "token" per image and action), slot by slot as alone
                weight = weight * torch.stack([delight_gate(a, lp, eta) for a, lp in zip(adv, logp.detach())])
            per_image = -(weight * logp).sum(-1)
        loss = per_image.mean(-1).sum()  # each slot's mean loss; their sum leaves each slot its own gradient
        opt.zero_grad()
        loss.backward()
        opt.step()
        if stop is not None and t + 1 < steps and stop():
            raise KeyboardInterrupt
        if (t + 1) % log_every == 0 or t + 1 == steps:
            with torch.no_grad():
                evals = task.evaluate(policy, [generator(s, "eval", t) for s in seeds])
            for out, ev in zip(rows, evals, strict=True):
                out.append({"step": t + 1, **ev})
    return [pd.DataFrame(r) for r in rows]


def _settings(kind: str, seed: int, steps: int, log_every: int, task_args: dict[str, Any] | None = None) -> dict:
    """The run's settings, its cache key's source (``task_args`` enter only when given: the embedded subset's
    runs keep their keys)."""
    from testbed.util.seeding import SCHEME

    return {"kind": kind, "seed": seed, "steps": steps, "log_every": log_every, "lr": 1e-3, "batch": 100,
            "task": "mnist", "seed_scheme": SCHEME, **({"task_args": dict(sorted(task_args.items()))} if task_args else {})}


def rows_path(cache: Path, kind: str, seed: int, steps: int, log_every: int,
              task_args: dict[str, Any] | None = None) -> Path:
    """Where the run's rows are cached (its record is the ``.json`` beside them)."""
    return Path(cache) / "oracle" / f"{_key(_settings(kind, seed, steps, log_every, task_args))}.csv"


def _train_to(paths: list[str], kind: str, seeds: list[int], steps: int, log_every: int,
              stamp: dict | None = None, task_args: dict[str, Any] | None = None) -> list[str]:
    from testbed.util.executor import stop_requested
    from testbed.util.provenance import machine

    rows_per_seed = train(kind, seeds, steps, log_every, stop=stop_requested, task_args=task_args)
    for path, seed, rows in zip(paths, seeds, rows_per_seed, strict=True):
        record = {"settings": _settings(kind, seed, steps, log_every, task_args), "machine": machine(), "code": code(),
                  **({"preregistration": stamp} if stamp else {})}
        atomic_write_text(Path(path).with_suffix(".json"), json.dumps(record, indent=1, sort_keys=True))
        atomic_write_text(path, rows.to_csv(index=False))  # the rows last: their file is the "done" marker
    return paths


def code() -> dict[str, str]:
    """The fingerprint of the code that trains an oracle run: `train` and everything it names."""
    from testbed.util.codeprint import source_digest

    return {"oracle": source_digest(train)}


def current(cache: Path, kind: str, seed: int, steps: int, log_every: int,
            task_args: dict[str, Any] | None = None) -> bool:
    """Whether the run is cached and was trained by the code as it is now (a record without a fingerprint is not
    judged; testbed/util/codeprint.py `stale_parts`)."""
    from testbed.util.codeprint import stale_parts

    path = rows_path(cache, kind, seed, steps, log_every, task_args)
    if not path.is_file():
        return False
    try:
        record = json.loads(path.with_suffix(".json").read_text())
    except (OSError, ValueError):
        record = {}  # rows without their record (cached before records were written): not judged
    return not stale_parts(record.get("code") if isinstance(record, dict) else None, code())


def batches(jobs: list[tuple[str, int]], workers: int) -> list[tuple[str, list[int]]]:
    """The (kind, seeds) runs ``jobs`` train as: one kind's seeds together, at most `testbed.plan.MAX_LOOP` a
    run (as the runner's loops), cut by `testbed.plan.balanced_chunks` so that the workers finish a kind's runs
    together."""
    from testbed.plan import MAX_LOOP, balanced_chunks

    return [(kind, chunk) for kind in dict.fromkeys(k for k, _ in jobs)
            for chunk in balanced_chunks([s for k, s in jobs if k == kind], MAX_LOOP, workers)]


def ensure(cache: Path, jobs: list[tuple[str, int]], steps: int, log_every: int, workers: int = 1,
           cached_only: bool = False, stamp: dict | None = None, task_args: dict[str, Any] | None = None) -> None:
    """Train the (kind, seed) jobs not yet cached (`batches`), in ``workers`` processes of the command's executor
    (testbed/util/executor.py: the local pool, or Ray with ``--executor ray``); ``stamp``: a confirmatory run's
    protocol stamp, written into each new record under ``preregistration``; ``task_args``: the task's options."""
    todo = plan_runs(jobs, key=lambda job: f"{job[0]}/{job[1]}",
                     done=lambda job: current(cache, job[0], job[1], steps, log_every, task_args)).todo
    if not todo or cached_only:
        return
    runs = [(kind, seeds, [str(rows_path(cache, kind, s, steps, log_every, task_args)) for s in seeds])
            for kind, seeds in batches(todo, workers)]
    if workers <= 1 or len(runs) == 1:
        for kind, seeds, paths in runs:
            _train_to(paths, kind, seeds, steps, log_every, stamp, task_args)
        return
    from testbed.util.executor import default

    default().run(_train_to, [(paths, kind, seeds, steps, log_every, stamp, task_args) for kind, seeds, paths in runs],
                  min(workers, len(runs)))


def cached(cache: Path, kind: str, seed: int, steps: int, log_every: int, cached_only: bool = False,
           task_args: dict[str, Any] | None = None) -> pd.DataFrame:
    """The run's rows (training it now if it is not `current`; an empty frame if ``cached_only`` and it is not)."""
    path = rows_path(cache, kind, seed, steps, log_every, task_args)
    if not current(cache, kind, seed, steps, log_every, task_args):
        if cached_only:
            return pd.DataFrame({"step": [], "test_error": []})
        _train_to([str(path)], kind, [seed], steps, log_every, task_args=task_args)
    df = pd.read_csv(path, dtype={"step": "int64", "test_error": "float64", "test_reward": "float64"})
    df["kind"], df["seed"] = kind, seed
    return df
