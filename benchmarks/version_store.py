"""Memory of the version store at D = 1000, relative to the model's size.

How versions are stored (testbed/delay.py, testbed/runner.py): the runner keeps no old parameters.
A chunk with lag L is sampled when its version is current and waits in a queue until it is
consumed, so at lag D the store holds the D pending chunks of each actor (contexts, actions,
behaviour log-probs, versions, rewards). Under ``fixed:D`` every chunk due at steps 1..D is sampled
by version 0 at step 0, which is exactly the steady-state content: this script makes the runner's
own actor generate those D chunks (``Runner._generate``) and sums their tensor bytes
(``Chunk.nbytes``, what the runner reports as ``queue_peak_bytes``). Python object headers (a few
hundred bytes per tensor) are not counted.

For the transformer (token reversal, H = 10, batch 100) sampling 1000 chunks takes minutes on a CPU,
so ``--transformer-chunks`` chunks (default 8) are generated and the bytes scaled to D: a chunk's
tensors have fixed shapes, so every chunk has the same size.

The alternative the ratio is set against: keeping D + 1 parameter copies (ratio D + 1).

    python -m benchmarks.version_store [--D 1000]
"""

from __future__ import annotations

import argparse

import torch

from benchmarks.common import DEFAULT_THREADS, Ratio, set_threads
from testbed.runner import Chunk, RunConfig, Runner


def store(task: str, d: int, generate: int, task_args: dict | None = None) -> dict[str, float]:
    runner = Runner(RunConfig(task=task, delay=f"fixed:{d}", steps=d + 1, task_args=task_args or {}))
    model = sum(p.numel() * p.element_size() for p in runner.params.values())
    chunks = []
    for u in range(1, generate + 1):
        chunk = Chunk(u, 0, runner.sizes[0])
        version = 0
        while version is not None:  # tokens of a chunk are all due at version 0 here
            version = runner._generate(chunk, version)
        chunks.append(chunk)
    per_chunk = sum(c.nbytes() for c in chunks) / generate
    return {"model": model, "store": per_chunk * d * runner.cfg.n_actors, "per_chunk": per_chunk,
            "samples": runner.sizes[0], "actors": runner.cfg.n_actors}


def run(d: int = 1000, transformer_chunks: int = 8, quick: bool = False) -> list[Ratio]:
    out = []
    cases = (("mnist", {}, 200 if quick else d), ("token_reversal", {}, 2 if quick else transformer_chunks))
    for task, args, generate in cases:
        s = store(task, d, generate, args)
        scaled = "" if generate == d else f" (bytes of {generate} chunks x {d / generate:g})"
        detail = (f"model {s['model'] / 1e3:.0f} kB; store {s['store'] / 1e6:.2f} MB{scaled}; "
                  f"{s['actors']} actor(s) x {s['per_chunk'] / 1e3:.2f} kB per chunk of {s['samples']} samples")
        out.append(Ratio(f"version store:{task}", f"store at D={d} / model size", s["store"] / s["model"], "", detail))
        out.append(Ratio(f"version store:{task}", f"store / keeping {d + 1} parameter copies",
                         s["store"] / (s["model"] * (d + 1)), "", "below 1: smaller than a parameter store"))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--D", type=int, default=1000)
    p.add_argument("--transformer-chunks", type=int, default=8)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    set_threads(args.threads)
    with torch.no_grad():
        for ratio in run(args.D, args.transformer_chunks, args.quick):
            print(ratio.line())


if __name__ == "__main__":
    main()
