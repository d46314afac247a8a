"""Write the tables README.md and docs/ show from the committed results files, between marker comments.

    python tools/readme_tables.py            # rewrite every generated table in place
    python tools/readme_tables.py --check    # exit 1, naming the file, where a table differs from its source

The verdict tables are figures.table's (`python -m figures.table --no-header`: README holds no commit id) of
results/confirmatory/claims.json (the confirmatory report, with a line saying how many of its runs it holds) and
results/paper/claims.json (the exploratory one), each report's own record; the later registrations' table reads
each figures/registrations/*.toml and the claims.json of the report it names; the wall-time table is read from
results/paper/timings.json; nothing in them is typed by hand. tests/unit/test_docs.py asserts
that the committed pages equal what this script writes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from figures.table import verdict_cell, verdict_table
from testbed.util.files import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "results" / "paper" / "claims.json"
CONFIRMATORY = ROOT / "results" / "confirmatory" / "claims.json"
TIMINGS = ROOT / "results" / "paper" / "timings.json"


def _hms(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def wall_table(timings: dict, command: str = "python -m figures all") -> str:
    """Wall time per figure of the last campaign of ``command`` (seconds, and the share of the total)."""
    walls = timings[command]["wall_s"]
    total = walls["_total"]
    lines = ["| figure | wall (s) | share |", "| --- | ---: | ---: |"]
    for name, seconds in walls.items():
        if not name.startswith("_"):
            lines.append(f"| {name} | {seconds:,.0f} | {seconds / total:.1%} |")
    cpu = walls.get("_cpu_s")
    lines.append(f"| **total** | {total:,.0f} ({_hms(total)}) | 100.0% |")
    if cpu is not None:
        lines.append(f"| CPU time, all workers | {cpu:,.0f} | |")
    return "\n".join(lines)


def confirmatory_table(report: dict) -> str:
    """The confirmatory report's label and how many of its simulator runs it holds, then its verdict table."""
    st = report.get("stamp") or {}
    total, missing = report.get("total_runs"), report.get("missing_runs") or 0
    runs = (f"{total - missing} of its {total} simulator runs" if isinstance(total, int) else "its simulator runs")
    line = (f"Protocol: **{st.get('label', 'exploratory')}**; seed block {st['seed_block'][0]}..{st['seed_block'][1]}; "
            f"the report holds {runs}" + ("; a claim whose design has not all run yet reads 'inconclusive' (no data, or not judged on the runs that have)." if missing else "."))
    return "\n".join([line, "", *verdict_table(report, header=False)])


def later_table(root: Path = ROOT) -> str:
    """One row per claim of each later registration (figures/registrations/*.toml): its file, seed block,
    its report's protocol label and verdict (or that its report is not made yet), and the first registration's
    verdict of the claim (results/confirmatory/claims.json)."""
    from figures.prereg import later_files, load_later

    first = {r["id"]: r["verdict"] for r in json.loads((root / CONFIRMATORY.relative_to(ROOT)).read_text())["claims"]}
    lines = ["| claim | registration | seed block | protocol | verdict | first registration's verdict |",
             "| --- | --- | --- | --- | --- | --- |"]
    for f in later_files(root):
        reg = load_later(f)
        block = f"{reg.block().start}..{reg.block().stop - 1}"
        try:
            report = json.loads((root / reg.later["output"]["report"] / "claims.json").read_text())
        except (OSError, ValueError):
            report = None
        verdicts = {r["id"]: verdict_cell(r) for r in (report or {}).get("claims", [])}
        label = ((report or {}).get("stamp") or {}).get("label", "")
        for cid in reg.later["claims"]:
            shown = verdicts.get(cid, "report not made yet")
            lines.append(f"| {cid} | [{f.relative_to(root)}]({f.relative_to(root)}) | {block} | {label or 'n/a'} | "
                         f"{shown} | {first.get(cid, '')} |")
    return "\n".join(lines)


def tables() -> dict[str, str]:
    """Marker name -> generated table, from the committed results files."""
    return {"confirmatory": confirmatory_table(json.loads(CONFIRMATORY.read_text())),
            "later-registrations": later_table(),
            "verdicts": "\n".join(verdict_table(json.loads(CLAIMS.read_text()), header=False)),
            "wall-time": wall_table(json.loads(TIMINGS.read_text()))}


PAGES = {"confirmatory": ROOT / "README.md", "later-registrations": ROOT / "README.md", "verdicts": ROOT / "README.md", "wall-time": ROOT / "docs" / "reproducing.md"}


def fill(text: str, name: str, table: str) -> str:
    """Replace what lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` by ``table``."""
    pattern = re.compile(rf"(<!-- {re.escape(name)}:begin[^>]*-->\n)(?:.*?\n)?(<!-- {re.escape(name)}:end -->)", re.S)
    if not pattern.search(text):
        raise ValueError(f"no '<!-- {name}:begin -->' ... '<!-- {name}:end -->' markers")
    return pattern.sub(lambda m: m.group(1) + table + "\n" + m.group(2), text, count=1)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv not in ([], ["--check"]):
        print("usage: python tools/readme_tables.py [--check]", file=sys.stderr)
        return 2
    stale = []
    for name, table in tables().items():
        page = PAGES[name]
        text = page.read_text()
        new = fill(text, name, table)
        if new != text:
            stale.append(page.relative_to(ROOT).as_posix())
            if not argv:
                atomic_write_text(page, new)
    if argv and stale:
        print(f"generated tables out of date in: {', '.join(stale)} (run python tools/readme_tables.py)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
