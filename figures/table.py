"""Print the verdict table of a claims report (claims.json) as markdown, for README and the docs.

    python -m figures.table [--no-header] [CLAIMS_JSON]        default: results/paper/claims.json

One row per claim: id, the claim, the paper's value, the verdict (marked "edge" where a part's deciding
interval end lies within one standard error of its rule's edge), the real model's verdict where the report's
real-LLM column has one (``llm[].real``), and the verdicts of the committed cross-CPU reports beside it where
the report recorded them. With the header (``--no-header`` leaves it out, for README, which holds no commit
id) a first line names the report: its protocol label (confirmatory / exploratory), commit and setting.
Everything comes from the file; nothing is typed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DEFAULT = Path("results/paper/claims.json")


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def verdict_cell(row: dict[str, Any]) -> str:
    """A claims.json row's verdict as the tables show it: bold, "(edge)" where a part sits within one standard
    error of its rule's edge (`figures.confirm.near_edge`)."""
    return f"**{row['verdict']}**" + (" (edge)" if row.get("on_edge") else "")


def verdict_table(report: dict[str, Any], header: bool = True) -> list[str]:
    """The markdown lines of the table (module docstring); ``header``: the line naming the report first."""
    st = report.get("stamp") or {}
    rows = report["claims"]
    beside = sorted({name for r in rows for name in (r.get("beside") or {})})
    real = {str(x.get("id")): x.get("real") for x in report.get("llm") or [] if isinstance(x, dict)}
    label = st.get("label") or "exploratory (no protocol stamp)"
    head = (f"Report: {label}; setting {report.get('setting', '?')}; commit `{st.get('commit', '?')}`"
            + (f"; seed block {st['seed_block'][0]}..{st['seed_block'][1]}" if st.get("seed_block") else ""))
    cols = ["id", "claim", "paper", "verdict", *(["real model"] if real else []), *beside]
    out = ([head, ""] if header else []) + ["| " + " | ".join(cols) + " |", "|" + " --- |" * len(cols)]
    for r in rows:
        verdict = verdict_cell(r)
        others = ([real.get(r["id"]) or ""] if real else []) + [(r.get("beside") or {}).get(name) or ""
                                                                 for name in beside]
        out.append("| " + " | ".join(_cell(x) for x in (r["id"], r["claim"], r["paper_value"], verdict, *others))
                   + " |")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    header = "--no-header" not in argv
    argv = [a for a in argv if a != "--no-header"]
    if len(argv) > 1 or any(a.startswith("-") for a in argv):
        print(f"error: one claims.json at most and the option --no-header, got {' '.join(argv)}", file=sys.stderr)
        return 2
    path = Path(argv[0]) if argv else DEFAULT
    try:
        report = json.loads(path.read_text())
        lines = verdict_table(report, header)
    except OSError as exc:
        print(f"error: cannot read {str(path)!r}: {exc.strerror}; give a report's claims.json", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError) as exc:
        print(f"error: {path} is not a claims report (claims.json with 'claims' rows): {exc!r}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
