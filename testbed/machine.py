"""Which machines trained a run, as labels for reports.

Each run's record carries `machine()` (testbed/util/provenance.py, shared with llm_scale: the CPU, instruction set
and torch build that decide the last bits of its numbers); `describe` turns one such record into a label and
`trained_by` names the machines of a run record, so a report can say which machines made its numbers.
"""

from __future__ import annotations

from typing import Any

__all__ = ["NOT_RECORDED", "describe", "trained_by"]

NOT_RECORDED = "not recorded"


def describe(m: dict[str, Any] | None) -> str:
    """One label for a machine record: the fields that change floating-point results, CPU, instruction set, torch
    version and BLAS ("AMD EPYC, AVX2, 2.13.0+cpu, mkl"), or `NOT_RECORDED` for a run saved before records carried
    their machine."""
    if not m:
        return NOT_RECORDED
    return ", ".join(str(m.get(k, "?")) for k in ("cpu", "cpu_capability", "torch", "blas"))


def trained_by(record: dict[str, Any] | None) -> str:
    """The machines that trained the run of a record (``runs/<id>.json``): `describe` of its ``machine``, or, when
    a loop stopped on one machine was resumed on another, each machine in order joined by " then " (the
    record's ``trained_on``: [{from_step, machine}], written only then)."""
    if not isinstance(record, dict):
        return NOT_RECORDED
    parts = record.get("trained_on")
    if isinstance(parts, list) and len(parts) > 1:
        return " then ".join(describe(p.get("machine") if isinstance(p, dict) else None) for p in parts)
    return describe(record.get("machine"))
