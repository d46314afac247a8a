"""``python -m theory report``: run every check of results 1-10 and print one table.

The table is computed by the same ``check_*`` functions the tests in tests/theory assert on, so
the report and ``pytest -m theory`` cannot disagree.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable, Iterable

import pandas as pd
import torch

from testbed.util.files import atomic_write_frame
from testbed.util.progress import Progress

from .baseline_drift import check_baseline_drift
from .checks import Check
from .delayed_optimization import check_autocorrelation, check_delayed_recurrence, check_delayed_sgd
from .delight import check_contamination, check_gate, check_lemma1, check_multi_context
from .importance import check_ess, check_importance_sampling, check_opob

# (item of ALGORITHMS.md "Analytic results to check", title, check function), in report order.
CHECKS: tuple[tuple[int, str, Callable[[], list[Check]]], ...] = (
    (1, "delayed linear recurrence", check_delayed_recurrence),
    (2, "lag-1 gradient autocorrelation", check_autocorrelation),
    (3, "delayed SGD bound", check_delayed_sgd),
    (4, "DG gate as a maximiser", check_gate),
    (5, "DG Lemma 1", check_lemma1),
    (6, "DG multi-context proposition", check_multi_context),
    (7, "contamination", check_contamination),
    (8, "importance sampling", check_importance_sampling),
    (9, "OPOB baseline", check_opob),
    (9, "B/ESS and chi^2", check_ess),
    (10, "stale REINFORCE baseline drift", check_baseline_drift),
)
ITEMS = tuple(sorted({item for item, _, _ in CHECKS}))
# the printed table fits a terminal: a result's name is shortened to RESULT_WIDTH characters (the CSV keeps it
# whole) and the notes are wrapped at NOTE_WIDTH
RESULT_WIDTH = 56
NOTE_WIDTH = 110
SYMBOL = {"abs": "|m-p|<=tol", "upper": "m<=p+tol", "lower": "m>=p-tol"}


def run_checks(items: Iterable[int] | None = None, progress: bool = False) -> list[Check]:
    """Run the checks of the given items (default all) and return their rows, in report order."""
    wanted = set(ITEMS if items is None else items)
    unknown = wanted - set(ITEMS)
    if unknown:
        raise ValueError(f"unknown item(s) {sorted(unknown)}; allowed: {', '.join(map(str, ITEMS))}")
    selected = [(item, title, fn) for item, title, fn in CHECKS if item in wanted]
    rows: list[Check] = []
    with Progress(len(selected), desc="theory checks", unit="check", enabled=progress, postfix=dict) as bar:
        for item, title, fn in selected:
            bar.update(0, {"check": f"{item}. {title}"})
            rows += fn()
            bar.update()
    return rows


def to_frame(rows: list[Check]) -> pd.DataFrame:
    """One row per check: item, result, predicted, measured, tolerance, comparison, margin, pass, note."""
    return pd.DataFrame(
        {
            "item": [r.item for r in rows],
            "result": [r.result for r in rows],
            "predicted": [r.predicted for r in rows],
            "measured": [r.measured for r in rows],
            "tolerance": [r.tolerance for r in rows],
            "test": [SYMBOL[r.comparison] for r in rows],
            "margin": [r.margin for r in rows],
            "pass": ["PASS" if r.passed else "FAIL" for r in rows],
            "note": [r.note for r in rows],
            "source": [r.source for r in rows],
        }
    )


def format_table(frame: pd.DataFrame) -> str:
    """The printed table (numbers to 6 significant digits), followed by the numbered notes."""
    shown = frame.drop(columns=["note", "source"]).copy()
    shown["result"] = [f"{textwrap.shorten(r, RESULT_WIDTH, placeholder='...')}{' [' + str(i) + ']' if n else ''}"
                       for i, (r, n) in enumerate(zip(frame["result"], frame["note"]), 1)]  # fmt: skip
    with pd.option_context("display.max_colwidth", RESULT_WIDTH + 8, "display.width", 400, "display.max_rows", 1000):
        table = shown.to_string(index=False, float_format=lambda v: f"{v:.6g}", justify="left")
    notes = [textwrap.fill(f"[{i}] {n}", NOTE_WIDTH, subsequent_indent="    ")
             for i, n in enumerate(frame["note"], 1) if n]  # fmt: skip
    return table + ("\n\nNotes:\n" + "\n".join(notes) if notes else "")


def main(items: Iterable[int] | None = None, csv: str | None = None) -> int:
    """Print the table (and write it as CSV if asked); return 0 if every check passed, else 1."""
    torch.set_num_threads(1)  # tiny tensors: thread start-up would dominate
    start = time.perf_counter()
    frame = to_frame(run_checks(items, progress=sys.stderr.isatty()))  # no bar frames in a log file
    print(format_table(frame))
    failed = int((frame["pass"] == "FAIL").sum())
    print(f"\n{len(frame) - failed} of {len(frame)} checks passed in {time.perf_counter() - start:.1f} s")
    if csv:
        try:  # written whole or not at all
            atomic_write_frame(frame, csv)
        except OSError as exc:
            print(f"error: could not write --csv {csv!r} ({exc.strerror or exc}); the table above is complete", file=sys.stderr)
            return 2
    return 0 if failed == 0 else 1
