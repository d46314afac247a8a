"""MNIST in the async-GRPO regime: GAC-1 (per base), GAC-2 and AREAL-1, each against its own base.

The regime (testbed/regimes.py, ``async_grpo``; docs/ALGORITHMS.md, "The learner regimes") is what
LLM trainers do and what GAC and AReaL's decoupled PPO were built for: GRPO groups of G samples per
context, K epochs over N minibatches per batch (several optimizer steps per batch), the proximal
policy = the policy at the start of the batch, and AReaL's bounded staleness with actors faster than
the learner. The claims are judged at the regime's staleness levels (`Regime.stale`) against the same
regime at lag 0 ("sync"):

* GAC-1: the cosine between consecutive optimizer steps' raw gradients (``grad_cos_prev``: within a
  batch, the previous minibatch's gradient), per base: grpo (the GAC paper's base), pg and tis;
* GAC-2: ``gac`` (grpo + the projection) at a stale level against ``grpo`` at sync, where grpo itself
  degrades at that level;
* AREAL-1: ``decoupled_ppo`` (group advantages in this regime, proximal = start of the batch) against
  naive ``grpo`` (PPO clip relative to the behaviour policy), the same way.

Until ``async_grpo`` is registered in testbed/regimes.py, `PROVISIONAL` stands in, spelled out as
explicit run settings (a worker process could not resolve an unregistered regime name); the report
says so on every claim of this experiment.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures import gac_probe
from figures.common import Context
from figures.experiments.async_grpo.evidence import Evidence, build
from figures.experiments.async_grpo.judges import CLAIMS
from figures.experiments.async_grpo.settings import NAME, configs, describe, exact_configs, staged_runs
from figures.staging import staged_evidence


def measure(ctx: Context) -> Evidence:
    """The experiment's evidence, look by look of its sequential design (`figures.staging.staged_evidence`)."""
    b = ctx.budget

    def before(seeds: tuple[int, ...], claims: list | None) -> None:
        if claims is None or {"GAC-1", "GAC-2"} & {c.id for c in claims}:
            # the exact-gradient probe's runs (figures/gac_probe.py; not stored as testbed runs)
            gac_probe.ensure(ctx.cache, exact_configs(b, seeds), b.async_exact_until, ctx.cached_only,
                             ctx.protocol_stamp, 1 if b.quick else ctx.workers)

    return staged_evidence(ctx, CLAIMS, "async", configs, staged_runs, build, before)


__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure", "staged_runs"]
