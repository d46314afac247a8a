"""Command line: ``python -m theory report [--items 1 2 ...] [--csv out.csv]``."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theory", description="Check the analytic results of ALGORITHMS.md (items 1-10; 10, the baseline drift of stale REINFORCE, is ours).")
    sub = parser.add_subparsers(dest="command", required=True)
    rep = sub.add_parser("report", help="run every check and print one table: result, predicted, measured, tolerance, pass/fail")
    rep.add_argument("--items", type=int, nargs="+", metavar="N", help="only these items (1-10); default all")
    rep.add_argument("--csv", metavar="PATH", help="also write the table as CSV")
    args = parser.parse_args(argv)
    from .report import ITEMS
    from .report import main as report

    if args.items and not set(args.items) <= set(ITEMS):
        parser.error(f"unknown item(s) {sorted(set(args.items) - set(ITEMS))}; allowed: {', '.join(map(str, ITEMS))}")
    return report(args.items, args.csv)


if __name__ == "__main__":
    sys.exit(main())
