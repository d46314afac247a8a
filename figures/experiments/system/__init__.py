"""Wall-clock claims of distributed systems: AREAL-2 (not applicable here, by rule).

The simulator runs actors and learner in one CPU process and counts learner steps, not seconds, so
a throughput claim about a distributed GPU system has nothing to be compared with.

Its parts: settings.py, evidence.py, judges.py and its figures' plot modules (figures/experiments/__init__.py).
"""

from __future__ import annotations

from figures.experiments.system.evidence import Evidence, measure
from figures.experiments.system.judges import CLAIMS
from figures.experiments.system.settings import NAME, configs, describe

__all__ = ["CLAIMS", "NAME", "Evidence", "configs", "describe", "measure"]
