"""Command line: ``python -m theory report [--items 1 2 ...] [--csv out.csv]``."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from testbed.util.arguments import CommandLine


def csv_problem(path: str) -> str | None:
    """Why ``--csv path`` cannot be written (one line), or None. Probed before any check runs."""
    target = Path(path)
    if target.is_dir():
        return f"--csv {path!r} is a directory; give a file path, e.g. {os.path.join(path, 'theory.csv')!r}"
    parent = target.parent
    if not parent.is_dir():
        return f"--csv {path!r}: directory {str(parent)!r} does not exist; create it first"
    try:
        if target.exists():
            with open(target, "a"):
                pass
        else:
            with tempfile.NamedTemporaryFile(dir=parent, prefix=f".{target.name}.", suffix=".probe"):
                pass
    except OSError as exc:
        return f"--csv {path!r} is not writable ({exc.strerror or exc}); choose another path"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = CommandLine(prog="python -m theory", description="Check the analytic results of ALGORITHMS.md (items 1-10; 10, the baseline drift of stale REINFORCE, is ours).")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="run every check and print one table: result, predicted, measured, tolerance, pass/fail")
    rep.add_argument("--items", type=int, nargs="+", metavar="N", help="only these items (1-10); default all")
    rep.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    args = parser.parse_args(argv)
    from .report import ITEMS
    from .report import main as report

    if args.items and not set(args.items) <= set(ITEMS):
        parser.error(f"unknown item(s) {sorted(set(args.items) - set(ITEMS))}; allowed: {', '.join(map(str, ITEMS))}")
    problem = csv_problem(args.csv) if args.csv else None
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    return report(args.items, args.csv)


if __name__ == "__main__":
    sys.exit(main())
