"""Wall-clock claims of distributed systems: AREAL-2 (not applicable here, by rule).

The simulator runs actors and learner in one CPU process and counts learner steps, not seconds, so
a throughput claim about a distributed GPU system has nothing to be compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from figures.budgets import Budget
from figures.evidence import Evidence as ExperimentEvidence
from figures.records import Claim, Judgement
from testbed.config import RunConfig

NAME = "system"


def configs(b: Budget) -> list[RunConfig]:
    return []


def describe(b: Budget) -> str:
    return "none: no throughput is measured"


@dataclass
class Evidence(ExperimentEvidence):
    """Nothing: no throughput is measured."""


def evidence(ctx: Any) -> Evidence:
    return Evidence()


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
