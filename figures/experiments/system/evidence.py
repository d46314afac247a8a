"""The system experiment's evidence: its typed record (figures/evidence.py) and how it is read from the runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from figures.evidence import Evidence as ExperimentEvidence


@dataclass
class Evidence(ExperimentEvidence):
    """Nothing: no throughput is measured."""


def measure(ctx: Any) -> Evidence:
    return Evidence()
