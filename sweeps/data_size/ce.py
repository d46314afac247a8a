"""Supervised cross-entropy reference for the data-size table: the MLP the bandit runs train (same
initialisation: the runner's ``generator(seed, "init")``), Adam 1e-3, batches of 100 labelled training
images, on the same data settings as sweeps/data_size/*.toml. Writes runs/data_size/ce.csv.

    python sweeps/data_size/ce.py [--steps 10000] [--seeds 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from testbed.tasks import make_task
from testbed.util.seeding import generator

FASHION = "/usr/share/datasets/fashion-mnist"
DATA = {"fashion": {"data_dir": FASHION}, "mnist": {}}
SIZES = {"fashion": (1000, 4000, 0), "mnist": (0,)}


def train_ce(task_args: dict, seed: int, steps: int, lr: float = 1e-3, batch: int = 100) -> dict:
    """Final greedy test error of cross-entropy training (loss -log pi(label | image), batch mean)."""
    task = make_task("mnist", **task_args)
    policy = task.make_policy([generator(seed, "init")])
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    gen = generator(seed, "ce")
    for _ in range(steps):
        x = task.sample_contexts(batch, gen, "train")
        loss = torch.nn.functional.cross_entropy(policy(task.pixels(x)[None])[0], task.labels[x])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {"n_train": task.n_train, **task.evaluate(policy, [generator(seed, "eval")])[0]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", default="runs/data_size/ce.csv")
    args = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for data, extra in DATA.items():
        for size in SIZES[data]:
            for seed in range(args.seeds):
                t0 = time.process_time()
                row = train_ce({**extra, "train_size": size}, seed, args.steps)
                rows.append({"data": data, "train_size": size, "seed": seed, "steps": args.steps, **row,
                             "cpu_s": time.process_time() - t0})
                print(rows[-1], flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
