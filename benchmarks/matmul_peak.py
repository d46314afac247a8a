"""The machine's float32 matrix-multiply rate, measured in the same run as the workload it normalises.

``peak_flops()`` times ``a @ b`` for square float32 matrices (default n = 1024: large enough for
the BLAS to reach its plateau, small enough to take ~0.1 s on one core) and returns FLOP/s,
2 n^3 per product. Throughput benchmarks divide a workload's achieved FLOP/s by this number measured
in alternation with the workload (benchmarks/throughput.py).

    python -m benchmarks.matmul_peak [--threads 1]     # prints GFLOP/s for n = 256 .. 2048
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks.common import DEFAULT_THREADS, set_threads, timed
from testbed.util.arguments import CommandLine


class MatmulPeak:
    """Reusable operands for timing n x n float32 matmuls."""

    def __init__(self, n: int = 1024, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.n = n
        self.a = torch.randn((n, n), generator=gen)
        self.b = torch.randn((n, n), generator=gen)
        self.out = torch.empty((n, n))
        self()  # warm up (BLAS initialisation, page faults)

    def __call__(self) -> None:
        torch.mm(self.a, self.b, out=self.out)

    @property
    def flops(self) -> float:
        return 2.0 * self.n**3

    def measure(self, repeat: int = 3) -> float:
        """FLOP/s: the median over ``repeat`` timed products."""
        return self.flops / statistics.median(timed(self) for _ in range(repeat))


def peak_flops(n: int = 1024, repeat: int = 5) -> float:
    return MatmulPeak(n).measure(repeat)


def main(argv: list[str] | None = None) -> None:
    p = CommandLine(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    args = p.parse_args(argv)
    threads = set_threads(args.threads)
    for n in (256, 512, 1024, 2048):
        print(f"n={n:5d}  {peak_flops(n) / 1e9:8.1f} GFLOP/s  ({threads} thread(s))")


if __name__ == "__main__":
    main()
