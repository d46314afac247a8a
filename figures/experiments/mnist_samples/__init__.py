"""MNIST bandit on-policy, samples per image: DG-1.

Setting (DG arXiv 2603.14608, as known from a secondary summary: MLP width 100, Adam 1e-3, batch 100,
10,000 steps): batches of 100 images, each sampled k times (k in 1, 2, 4, 8, 16; batch-mean baseline
for every k, so only the number of samples changes), pg and dg; k = infinity is the exact expected
update and the supervised cross-entropy run is the oracle (figures/oracle_runs.py), all from the same
initialisation per seed; 5 seeds. Per seed: the final test error (last 5% of the evaluations).

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures import oracle_runs
from figures.common import Context
from figures.experiments.mnist_samples.evidence import Evidence, build
from figures.experiments.mnist_samples.judges import CLAIMS
from figures.experiments.mnist_samples.settings import NAME, configs, describe, oracle_jobs, staged_runs
from figures.staging import staged_evidence


def measure(ctx: Context) -> Evidence:
    """The experiment's evidence, look by look of its sequential design (`figures.staging.staged_evidence`)."""
    b = ctx.budget

    def before(seeds: tuple[int, ...], claims: list | None) -> None:
        # the exact-gradient and cross-entropy runs of these seeds are trained here (they are not testbed runs);
        # tiny quick runs train in this process: spawning workers would cost more than the training
        oracle_runs.ensure(ctx.cache, oracle_jobs(b, seeds), b.mnist_steps, b.mnist_log, 1 if b.quick else ctx.workers,
                           ctx.cached_only, ctx.protocol_stamp,  # trained now: the protocol stamp in their records
                           dict(b.mnist_task_args) or None)

    return staged_evidence(ctx, CLAIMS, "mnist", configs, staged_runs, build, before)


__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure", "staged_runs"]
