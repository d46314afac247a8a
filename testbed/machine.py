"""Which machine trained a run: the facts that decide its floating-point results.

Two runs with the same config and seed give the same numbers on one machine, but not always across
machines: torch picks its CPU kernels by the instruction set it detects (AVX2, AVX512, ...) and its
build (BLAS library, version), so a reduction can sum in another order and the last bits differ, which a
long training run can amplify. A run cache keyed by settings alone cannot tell such runs apart, so each
run's record carries `machine()`, and a report can say which machines made its numbers (`describe`).
"""

from __future__ import annotations

import functools
import platform
from pathlib import Path
from typing import Any

NOT_RECORDED = "not recorded"


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows, else "unknown"."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.cache
def machine() -> dict[str, Any]:
    """This process's machine: ``cpu`` (model name), ``cpu_capability`` (the instruction set torch's CPU kernels
    dispatch on: ``torch.backends.cpu.get_cpu_capability()``), ``torch`` (version, with its build tag),
    ``blas`` (MKL or not), ``python`` and ``os``. Computed once per process."""
    import torch

    return {"cpu": cpu_model(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch": torch.__version__, "blas": "mkl" if torch.backends.mkl.is_available() else "other",
            "python": platform.python_version(), "os": f"{platform.system()} {platform.machine()}"}


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
