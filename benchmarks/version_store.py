"""Memory of the version queue at D = 1000, relative to the model's size.

How versions are stored (testbed/delay.py, testbed/runner.py): the runner keeps no old parameters.
A chunk with lag L is sampled when its version is current and waits in the queue until it is
consumed, so at lag D the queue holds the D pending chunks of each actor (contexts, actions,
behaviour log-probs, versions, rewards). A run of 2D + 1 steps at ``fixed:D`` logged every D steps
reports the queue at step D - 1, when it holds D + 1 chunks per actor (``queue_peak_bytes``: the
tensor bytes of the pending chunks at the logged steps). A chunk's tensors have fixed shapes, so the
token-reversal queue is measured at a smaller D (``--transformer-D``, 50) and scaled to D. Python
object headers (a few hundred bytes per tensor) are not counted.

The alternative the ratio is set against: keeping D + 1 parameter copies (ratio D + 1).

    python -m benchmarks.version_store [--D 1000]
"""

from __future__ import annotations

import argparse

from benchmarks.common import DEFAULT_THREADS, Ratio, set_threads
from testbed.config import RunConfig
from testbed.runner import run as run_once
from testbed.util.arguments import CommandLine


def store(task: str, d: int, measured_d: int) -> dict[str, float]:
    result = run_once(RunConfig(task=task, delay=f"fixed:{measured_d}", steps=2 * measured_d + 1, log_every=measured_d))
    cfg = result.config
    per_chunk = result.info["queue_peak_bytes"] / ((measured_d + 1) * cfg.n_actors)
    return {"model": result.info["param_bytes"], "store": per_chunk * (d + 1) * cfg.n_actors, "per_chunk": per_chunk,
            "samples": cfg.batch_size // cfg.n_actors, "actors": cfg.n_actors}


def run(d: int = 1000, transformer_d: int = 50, quick: bool = False) -> list[Ratio]:
    out = []
    for task, measured in (("mnist", 100 if quick else d), ("token_reversal", 5 if quick else transformer_d)):
        dd = 100 if quick else d
        s = store(task, dd, measured)
        scaled = "" if measured == dd else f" (measured at D={measured}, scaled)"
        detail = (f"model {s['model'] / 1e3:.0f} kB; store {s['store'] / 1e6:.2f} MB{scaled}; "
                  f"{s['actors']} actor(s) x {s['per_chunk'] / 1e3:.2f} kB per chunk of {s['samples']} samples")
        out.append(Ratio(f"version store:{task}", f"store at D={dd} / model size", s["store"] / s["model"], "", detail))
        out.append(Ratio(f"version store:{task}", f"store / keeping {dd + 1} parameter copies",
                         s["store"] / (s["model"] * (dd + 1)), "", "below 1: smaller than a parameter store"))
    return out


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--D", type=int, default=1000)
    p.add_argument("--transformer-D", type=int, default=50)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    set_threads(args.threads)
    for ratio in run(args.D, args.transformer_D, args.quick):
        print(ratio.line())


if __name__ == "__main__":
    main()
