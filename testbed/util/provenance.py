"""Where results were made: the code (its git commit, and whether files differ from it) and the machine.

The code: `git` runs one git command in the project's checkout (or another directory) and returns its output,
or None outside a checkout, without git, or on failure; `commit` is the checked-out commit, `source` the commit
with a mark when tracked files differ from it (`changes`), `file_commit` the commit that last changed a file.

The machine: two runs with the same config and seed give the same numbers on one machine, but not always across
machines: torch picks its CPU kernels by the instruction set it detects (AVX2, AVX512, ...) and its build (BLAS
library, version), so a reduction can sum in another order and the last bits differ, which a long training run
can amplify. `machine` is the record of those facts that every run record and scorecard carries.
"""

from __future__ import annotations

import functools
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout holding the project's packages


def git(*args: str, cwd: str | Path = ROOT, timeout: float = 30) -> str | None:
    """The output of ``git ARGS`` run in ``cwd`` (stripped; "" when it prints nothing), or None when git is
    missing, times out or exits non-zero (outside a checkout, a path it does not know, a difference found by
    ``diff --quiet``)."""
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit(short: int | None = None, cwd: str | Path = ROOT) -> str | None:
    """The checked-out commit: its full hash, or with ``short`` its first ``short`` hex digits (more where that
    is ambiguous); None outside a checkout."""
    return git("rev-parse", *([f"--short={short}"] if short else []), "HEAD", cwd=cwd) or None


def changed_paths(porcelain: str) -> list[str]:
    """The paths of ``git status --porcelain`` output ("XY PATH" or "XY OLD -> NEW" per line), read by splitting
    after the status letters, so a line whose leading blank was stripped reads the same."""
    return [ln.split(maxsplit=1)[1].split(" -> ")[-1] for ln in porcelain.splitlines() if len(ln.split()) > 1]


def changes(cwd: str | Path = ROOT, ignore: Iterable[str] = ()) -> list[str]:
    """The tracked files that differ from the checked-out commit (staged or not), except those under the path
    prefixes ``ignore``; [] outside a checkout."""
    prefixes = tuple(ignore)
    status = git("status", "--porcelain", "--untracked-files=no", cwd=cwd) or ""
    return [p for p in changed_paths(status) if not (prefixes and p.startswith(prefixes))]


def source(mark: str, short: int = 12, cwd: str | Path = ROOT, ignore: Iterable[str] = ()) -> str | None:
    """`commit` (``short`` digits) followed by ``mark`` when `changes` (outside ``ignore``) finds a tracked file
    that differs from it: the code that runs, as one label; None outside a checkout."""
    head = commit(short, cwd)
    if head is None:
        return None
    return head + (mark if changes(cwd, ignore) else "")


def file_commit(path: str | Path) -> str | None:
    """The commit that last changed the file ``path`` (full hash), or None when the file differs from it or is not
    in a checkout (git runs in the file's directory, so the file may belong to any checkout)."""
    path = Path(path).resolve()
    if git("diff", "--quiet", "HEAD", "--", path.name, cwd=path.parent) is None:
        return None
    return git("log", "-1", "--format=%H", "--", path.name, cwd=path.parent) or None


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
