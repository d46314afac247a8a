"""The system experiment's claims: their margins, preconditions and judges (figures/records.py); no plotting."""

from __future__ import annotations

from figures.experiments.system.evidence import Evidence
from figures.experiments.system.settings import NAME
from figures.records import Claim, Judgement


def judge_areal2(ev: Evidence) -> Judgement:
    return Judgement("no wall-clock throughput in a sequential CPU simulator", [], verdict="not applicable",
                     note="by rule")


CLAIMS = (
    Claim("AREAL-2", "asynchronous system up to 2.77x faster than synchronous at equal GPUs", "2505.24298",
          "2.77x (abstract)", NAME, "none", (),
          "A claim about the measured throughput of a distributed GPU system. The simulator executes actors and "
          "learner sequentially in one CPU process and counts learner steps, not time: not applicable by rule.",
          judge_areal2, ()),
)
