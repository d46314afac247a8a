"""Publishing the claims report: the stamp, claims.md and one self-contained HTML page, from the same rows.

`stamp` records when, from which commit and in how much wall time the report was made. Every
``python -m figures`` invocation, finished or interrupted, appends itself to ``timings.json``'s
``invocations`` (`record_invocation`); a report's wall time is that of its campaign (`campaign`): the
invocations of its command since the last one that started from a cache holding none of its runs, so a run
stopped and resumed is timed whole, with each invocation's commit.
`write_markdown` and `write_html` render the payload that claims.json holds, so the three files can
never disagree; the HTML page embeds every figure once, as a PNG data URI, and needs nothing else. Both
files are written whole or not at all (a temporary file renamed into place): a full disk leaves the
previous ones.
"""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import os
from pathlib import Path
from typing import Any

from figures.table import verdict_cell
from testbed.util.files import atomic_write_text
from testbed.util.provenance import source

COLORS = {"reproduced": "#1a7f37", "direction only": "#9a6700", "not reproduced": "#cf222e",
          "inconclusive": "#6e7781", "not applicable": "#8250df", "not testable": "#57606a"}


def commit() -> str:
    """The checked-out commit (short), with "+changes" when tracked files outside results/ differ from it."""
    return source("+changes", ignore=("results/",)) or "unknown"


def read_timings(out: Path) -> dict[str, Any]:
    """``out/timings.json`` ({} when absent or damaged: a damaged file is replaced, never fatal)."""
    tpath = Path(out) / "timings.json"
    try:
        data = json.loads(tpath.read_text()) if tpath.is_file() else {}
    except ValueError:
        data = {}
    return data if isinstance(data, dict) else {}


def record_invocation(out: Path, entry: dict[str, Any], per_figure: dict[str, Any] | None = None) -> None:
    """Append one invocation (command, started, commit, wall_s, cpu_s, workers, completed, missing_at_start,
    total_runs) to ``out/timings.json``'s ``invocations``; with ``per_figure`` (a finished invocation's seconds
    per figure), also keep those under the command's name."""
    data = read_timings(out)
    data.setdefault("invocations", []).append(entry)
    if per_figure is not None:
        data[entry["command"]] = {"wall_s": per_figure, "workers": entry.get("workers"),
                                  "cpu_count": entry.get("cpu_count")}
    atomic_write_text(Path(out) / "timings.json", json.dumps(data, indent=1))


def campaign(invocations: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """The invocations of ``command`` that made the cache its report reads: walking back from the last one,
    up to and including one that found none of its runs cached (``missing_at_start == total_runs``) and does
    not follow an interrupted invocation (whose saved loops it may have resumed).

    Returns ``wall_s`` and ``cpu_s`` (summed over them), ``invocations`` (how many), ``commits`` (each one's, in order),
    ``started`` (the first one's start, None without any) and ``complete``: False when the history ends before such a start (runs trained by invocations not
    recorded here, or reused from another cache), in which case ``wall_s`` covers only the recorded ones."""
    mine = [e for e in invocations if e.get("command") == command]
    chosen: list[dict[str, Any]] = []
    complete = False
    for i in range(len(mine) - 1, -1, -1):
        e = mine[i]
        chosen.append(e)
        fresh = bool(e.get("total_runs")) and e.get("missing_at_start") == e.get("total_runs")
        if fresh and (i == 0 or mine[i - 1].get("completed") is not False):
            complete = True
            break
    chosen.reverse()

    def total(key: str) -> float | None:
        vals = [e.get(key) for e in chosen]
        return sum(vals) if chosen and None not in vals else None

    return {"wall_s": total("wall_s"), "cpu_s": total("cpu_s"), "invocations": len(chosen),
            "commits": [e.get("commit") for e in chosen], "started": chosen[0].get("started") if chosen else None,
            "complete": complete}


def command_targets(command: str) -> tuple[frozenset[str], bool, bool]:
    """The targets a ``python -m figures ...`` command line names (figure names, ``all``, ``claims``) and
    whether it has ``--quick`` and ``--cached-only``."""
    words = command.split()[3:]
    return frozenset(w for w in words if not w.startswith("--")), "--quick" in words, "--cached-only" in words


def provenance(timings: dict[str, Any], figures: list[str], quick: bool) -> list[dict[str, Any]]:
    """Per figure, the command whose runs its data shows: the last completed invocation in ``timings`` (as
    `read_timings` returns it) that trained for it (names the figure or ``all``, same setting, not
    ``--cached-only``: a cached-only redraw shows runs an earlier command trained).

    Each row: ``figure``, ``command``, ``started`` (the first invocation of that command's `campaign`),
    ``commits``, ``wall_s`` (the campaign's: every figure of the command, resumes included), ``complete``,
    ``workers``, and ``figure_s`` (this figure's seconds, training and drawing, in the command's last finished
    invocation). A figure that no recorded invocation trained gets ``command`` None and no times: per-figure
    seconds kept under a command's name without an invocation record may be those of an earlier run of the same
    command, so they are not attributed."""
    invocations = timings.get("invocations", [])

    def trains(command: str, fig: str) -> bool:
        names, q, cached = command_targets(command)
        return q == quick and not cached and (fig in names or "all" in names)

    rows = []
    for fig in figures:
        last = next((e for e in reversed(invocations) if e.get("completed") and trains(e.get("command", ""), fig)),
                    None)
        if last is None:
            rows.append({"figure": fig, "command": None, "started": None, "commits": [], "wall_s": None,
                         "complete": False, "workers": None, "figure_s": None})
            continue
        command = last["command"]
        camp = campaign(invocations, command)
        per_figure = (timings.get(command) or {}).get("wall_s") or {}
        rows.append({"figure": fig, "command": command, "started": camp["started"], "commits": camp["commits"],
                     "wall_s": camp["wall_s"], "complete": camp["complete"], "workers": last.get("workers"),
                     "figure_s": per_figure.get(fig)})
    return rows


def stamp(out: Path, command: str, quick: bool, runs_s: float | None = None,
          figures: list[str] | None = None, machines: dict[str, dict[str, int] | None] | None = None) -> dict[str, Any]:
    """Date (UTC), commit, and the wall / CPU time of the campaign of invocations that made the data
    (`campaign`; for a rebuilt report, ``claims``, that of ``python -m figures all``), plus ``runs_s``: the
    runs' own training time summed over runs (each run records it and keeps it across a resume), which
    holds even when the invocation history is incomplete, and ``provenance``: per figure of ``figures``, the
    command that trained the runs its data shows (`provenance`), and ``machines``: per figure, its runs per machine
    that trained them (the data file's count, `figures.common.machines`; None where the file predates it)."""
    info: dict[str, Any] = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                            "commit": commit(), "command": command, "setting": "quick" if quick else "full",
                            "cpu_count": os.cpu_count()}
    timings = read_timings(out)
    invocations = timings.get("invocations", [])
    made_by = "python -m figures all" + (" --quick" if quick else "")
    mine = command if any(e.get("command") == command for e in invocations) else made_by
    camp = campaign(invocations, mine)
    last = next((e for e in reversed(invocations) if e.get("command") == mine), {})
    info["wall_s"] = camp["wall_s"]
    info["cpu_s"] = camp["cpu_s"]
    info["workers"] = last.get("workers")
    info["invocations"] = camp["invocations"]
    info["campaign_commits"] = camp["commits"]
    info["history_complete"] = camp["complete"]
    info["runs_s"] = runs_s
    info["provenance"] = provenance(timings, list(figures or []), quick)
    info["machines"] = dict(machines or {})
    return info


def machines_line(st: dict[str, Any]) -> str | None:
    """The header's sentence on the machines that trained the figures' runs (None when no figure says): each
    machine with the runs of each figure it trained (figures that share an experiment read the same runs, so
    the counts are per figure, never summed), and the figures whose data files do not count them."""
    per_figure = st.get("machines") or {}
    if not per_figure:
        return None
    figs: dict[str, list[str]] = {}
    for fig, counts in per_figure.items():
        for label, n in (counts or {}).items():
            figs.setdefault(label, []).append(f"{fig} {n:,}")
    unknown = [fig for fig, counts in per_figure.items() if counts is None]
    parts = [f"{label} (runs per figure: {', '.join(figs[label])})" for label in sorted(figs)]
    if unknown:
        parts.append(f"not counted for {', '.join(unknown)} (their data files predate the count)")
    return ("Machines that trained the runs behind the figures (CPU, the instruction set torch's kernels use, torch, "
            "BLAS; \"not recorded\": runs saved before their records named it): " + "; ".join(parts)
            + ". A run of one config can end with other last bits on another machine, so a verdict near its rule's "
            "edge can move with it.")


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "not recorded"
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


PROVENANCE_COLUMNS = ("figure", "trained by", "started", "commit(s)", "this figure", "the command's wall time",
                      "workers")


def provenance_table(st: dict[str, Any]) -> list[tuple[str, ...]]:
    """The stamp's `provenance` as display rows (`PROVENANCE_COLUMNS`), or [] when one command made every figure
    (the header's wall time then says it all)."""
    rows = st.get("provenance") or []
    if len({r["command"] for r in rows}) <= 1:
        return []

    def command_wall(r: dict[str, Any]) -> str:
        if r["wall_s"] is None:
            return "not recorded"
        n = sum(1 for q in rows if q["command"] == r["command"])
        cached = "" if r["complete"] else " (its first recorded invocation found some of its runs already cached)"
        return hms(r["wall_s"]) + (f" ({n} figures)" if n > 1 else "") + cached

    return [(r["figure"], f"`{r['command']}`" if r["command"] else "not recorded",
             (r["started"] or "not recorded")[:16].replace("T", " "),
             ", ".join(f"`{c}`" for c in dict.fromkeys(r["commits"])) or "not recorded", hms(r["figure_s"]), command_wall(r),
             str(r["workers"] or "not recorded")) for r in rows]


def provenance_wall(st: dict[str, Any]) -> tuple[float | None, bool]:
    """Wall time summed over the recorded commands that made the figures (each command's campaign once), and
    whether that is all of it (every figure's command recorded, every campaign from an empty cache)."""
    rows = st.get("provenance") or []
    campaigns = {r["command"]: r for r in rows if r["command"] is not None and r["wall_s"] is not None}
    whole = len(campaigns) == len({r["command"] for r in rows}) and all(r["complete"] for r in campaigns.values())
    return (sum(r["wall_s"] for r in campaigns.values()) if rows else None), whole


def _header(p: dict[str, Any]) -> list[str]:
    st = p["stamp"]
    setting = ("**quick** (CI smoke setting: a handful of steps, two seeds; verdicts are NOT evidence)"
               if p["setting"] == "quick" else "**full** (the papers' budgets, figures/budgets.py)")
    if st.get("wall_s") is None and provenance_table(st):
        total, whole = provenance_wall(st)
        made = [r for r in st["provenance"] if r["command"] is not None]
        unknown = len(st["provenance"]) - len(made)
        timed = (f"the figures were made by {len({r['command'] for r in made})} recorded commands"
                 + (f" and {unknown} figure(s) by a run with no invocation record" if unknown else "")
                 + f" (table below): {'' if whole else 'at least '}{hms(total)} of wall time summed over those commands")
    else:
        timed = (f"wall time {hms(st.get('wall_s'))} ({st.get('workers') or '?'} worker(s) on {st.get('cpu_count')} "
                 "CPU(s))")
    lines = [f"Setting: {setting}. Made by `{p['command']}` on {st['date']} at commit `{st['commit']}`; {timed}. "
             "Verdicts are computed by the rules of each claim's record (figures/experiments/) from the figures' data "
             "(data/*.json), not typed in."]
    if st.get("label"):  # the protocol stamp (figures/claims.py protocol)
        pr, block = st.get("preregistration") or {}, st.get("seed_block") or ["?", "?"]
        why = "; ".join(st.get("label_reasons") or [])
        kept = (f"the rules of {pr['supersedes']} but its [{'], ['.join(pr['rules'])}], restated" if pr.get("rules")
                else f"every rule of {pr.get('supersedes')}")
        reg = (f"Later registration {pr['file']} (claims {', '.join(pr.get('claims') or [])}; {kept})"
               if pr.get("supersedes") else
               f"Pre-registration {pr.get('file', 'figures/preregistration.toml')}")
        lines.append(f"Protocol: **{st['label']}**. {reg}, sha256 "
                     f"`{str(pr.get('sha256'))[:16]}`, commit `{pr.get('commit')}`; confirmatory seed block "
                     f"{block[0]}..{block[1]}" + (f". Not confirmatory because: {why}" if why else ""))
    n = st.get("invocations") or 0
    if n > 1 or (n and st.get("history_complete") is False):
        commits = ", ".join(f"`{c}`" for c in st.get("campaign_commits") or [])
        timed = (f"The wall time sums {n} invocations (stopped and resumed from the run cache; commits {commits})."
                 if st.get("history_complete") else
                 f"The wall time covers only the {n} recorded invocation(s) (commits {commits}): part of the run cache "
                 "was trained by invocations not recorded in timings.json.")
        lines.append(f"{timed} The runs' own training time, summed over runs: {hms(st.get('runs_s'))} of worker time.")
    trained_on = machines_line(st)
    if trained_on:
        lines.append(trained_on)
    if p.get("missing_runs"):
        lines.append(f"**Partial report:** {p['missing_runs']} of {p['total_runs']} simulator runs were not (yet) in the "
                     "cache (`--cached-only`); the affected cells use the seeds that finished.")
    if st.get("provisional_regime"):
        lines.append("**Provisional regime:** `async_grpo` is not registered in testbed/regimes.py; GAC-1, GAC-2 and "
                     "AREAL-1 ran with the stand-in settings of figures/experiments/async_grpo/settings.py.")
    return lines


def _parts_md(parts: list[dict[str, Any]]) -> list[str]:
    if not parts:
        return []
    lines = ["| part | estimate [90% interval] | margin | status | seeds needed |", "| --- | --- | --- | --- | --- |"]
    for q in parts:
        need = q.get("seeds_needed")
        detail = f" ({q['detail']})" if q.get("detail") else ""
        status = q["status"] + (" (edge)" if q.get("edge") else "")
        lines.append(f"| {q['name']}{detail} | {q['shown']} | {q['margin_shown']} | {status} | "
                     f"{'' if need is None else need} |")
    return lines


def write_markdown(path: Path, p: dict[str, Any], extra: list[str] = ()) -> None:
    """claims.md, written whole or not at all; ``extra``: markdown lines appended after the claims."""
    lines = ["# Published claims vs this testbed", "", *[x for ln in _header(p) for x in (ln, "")]]
    made = provenance_table(p["stamp"])
    if made:
        lines += ["Where each figure's data comes from: the last finished command that trained its runs "
                  "(timings.json); \"this figure\" is its training and drawing time in that command's last "
                  "invocation, the command's wall time covers all its figures, resumes included.", "",
                  "| " + " | ".join(PROVENANCE_COLUMNS) + " |", "|" + " --- |" * len(PROVENANCE_COLUMNS),
                  *("| " + " | ".join(row) + " |" for row in made), ""]
    lines += ["| id | claim | paper | ours | verdict | seeds needed |", "| --- | --- | --- | --- | --- | --- |"]
    for r in p["claims"]:
        need = r.get("seeds_needed")
        variants = "; ".join(f"{k}: {v}" for k, v in r.get("variants", {}).items())
        verdict = verdict_cell(r) + (f" ({variants})" if variants else "")
        lines.append(f"| {r['id']} | {r['claim']} | {r['paper_value']} | {r['ours']} | {verdict} | "
                     f"{'' if need is None else need} |")
    lines += ["", "## Shared rules", "", p["shared_rules"], "", "## Claims", ""]
    for r in p["claims"]:
        lines += [f"### {r['id']}: {r['verdict']}", "", f"*{r['claim']}* ({r['source']}; paper: {r['paper_value']})", "",
                  f"- Setting: {r['setting']}", f"- Grid: {r['grid'] or 'n/a'}", f"- Rule: {r['rule']}"]
        for m in r["margins"]:
            lines.append(f"- Margin `{m['name']}` = {m['shown']}: {m['derivation']}")
        if r.get("note"):
            lines.append(f"- Note: {r['note']}")
        if r["figures"]:
            lines.append("- Figures: " + ", ".join(f"[{f}]({f}.png)" for f in r["figures"]))
        for sens in r.get("sensitivity", []):
            lines.append(f"- Sensitivity to {sens}")
        lines.append("")
        lines += _parts_md(r["parts"])
        if r.get("other_parts"):
            lines += ["", "Reported beside the verdict (not part of it):", "", *_parts_md(r["other_parts"])]
        if "paragraph" in r:
            g = r["paragraph"]
            lines += ["", f"**What we measured.** {g['measured']}", "", f"**Mechanism.** {g['mechanism']}", "",
                      f"**What would decide it.** {g['decide']}"]
        lines.append("")
    lines += list(extra)
    atomic_write_text(Path(path), "\n".join(lines) + ("\n" if extra else ""))


def _img(out: Path, name: str, shown: set[str], claim: dict[str, Any] | None = None) -> str:
    """The figure embedded once on the page (``shown`` collects the names embedded so far); a later claim citing
    it links back to it. Titled with its finding (the claim it is first shown for, with its verdict);
    the caption is HTML text under it, at the page's size (the PNG's own caption line is too small to read once
    the figure is scaled to the page); the alt text says what the image shows and what it found."""
    e = html.escape
    if name in shown:
        return f"<p class='seefig'>Figure <a href='#fig-{e(name)}'>{e(name)}</a> (shown above).</p>"
    png = Path(out) / f"{name}.png"
    if not png.is_file():
        return f"<p class='missing'>figure {e(name)} not made</p>"
    shown.add(name)
    data = base64.b64encode(png.read_bytes()).decode("ascii")
    cap = Path(out) / f"{name}.caption.txt"
    caption = cap.read_text().strip() if cap.is_file() else ""
    finding = f"{claim['id']} {claim['verdict']}: {claim['claim']}" if claim else name
    alt = f"Figure {name}, the evidence for claim {finding}"
    return (f"<figure id='fig-{e(name)}'><h3 class='figtitle'>Figure {e(name)}: {e(finding)}</h3>"
            f"<a href='{e(name)}.png'><img alt='{e(alt)}' src='data:image/png;base64,{data}'></a>"
            f"<figcaption>{e(caption)} (<a href='{e(name)}.png'>full size</a>, <a href='{e(name)}.pdf'>PDF</a>)"
            "</figcaption></figure>")


def _parts_html(parts: list[dict[str, Any]]) -> str:
    if not parts:
        return ""
    rows = "".join(
        f"<tr><td>{html.escape(q['name'])}{(' <i>(' + html.escape(q['detail']) + ')</i>') if q.get('detail') else ''}"
        f"</td><td>{html.escape(q['shown'])}</td><td>{html.escape(q['margin_shown'])}</td>"
        f"<td class='st-{q['status'].replace('/', '')}'>{q['status']}</td>"
        f"<td>{'' if q.get('seeds_needed') is None else q['seeds_needed']}</td></tr>" for q in parts)
    return ("<table class='parts'><tr><th>part</th><th>estimate [90% interval]</th><th>margin</th><th>status</th>"
            f"<th>seeds needed</th></tr>{rows}</table>")


def _md_inline(text: str) -> str:
    """Escape, then render **bold** and `code` of the header lines."""
    import re

    t = html.escape(text)
    t = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", t)
    return re.sub(r"`(.+?)`", r"<code>\1</code>", t)


def write_html(path: Path, p: dict[str, Any], out: Path, extra: list[str] = ()) -> None:
    """One page: header with the stamp, the verdict table, then each claim with its figures and parts, then
    ``extra`` (markdown lines, shown preformatted); written whole or not at all."""
    e = html.escape
    head = "".join(f"<p>{_md_inline(ln)}</p>" for ln in _header(p))
    made = provenance_table(p["stamp"])
    if made:
        head += ("<table><tr>" + "".join(f"<th>{e(c)}</th>" for c in PROVENANCE_COLUMNS) + "</tr>"
                 + "".join("<tr>" + "".join(f"<td>{_md_inline(x)}</td>" for x in row) + "</tr>" for row in made)
                 + "</table>")
    table = "".join(
        f"<tr><td><a href='#{e(r['id'])}'>{e(r['id'])}</a></td><td>{e(r['claim'])}</td><td>{e(r['paper_value'])}</td>"
        f"<td>{e(r['ours'])}</td><td class='verdict' style='color:{COLORS[r['verdict']]}'>{e(r['verdict'])}"
        + ("".join(f"<br><small>{e(k)}: {e(v)}</small>" for k, v in r.get("variants", {}).items()))
        + f"</td><td>{'' if r.get('seeds_needed') is None else r['seeds_needed']}</td></tr>" for r in p["claims"])
    sections = []
    shown: set[str] = set()
    for r in p["claims"]:
        margins = "".join(f"<li>margin <code>{e(m['name'])}</code> = {e(m['shown'])}: {e(m['derivation'])}</li>"
                          for m in r["margins"])
        para = ""
        if "paragraph" in r:
            g = r["paragraph"]
            para = (f"<div class='para'><p><b>What we measured.</b> {e(g['measured'])}</p><p><b>Mechanism.</b> "
                    f"{e(g['mechanism'])}</p><p><b>What would decide it.</b> {e(g['decide'])}</p></div>")
        other = ("<p>Reported beside the verdict (not part of it):</p>" + _parts_html(r["other_parts"])
                 if r.get("other_parts") else "")
        sections.append(
            f"<section id='{e(r['id'])}'><h2>{e(r['id'])}: <span style='color:{COLORS[r['verdict']]}'>"
            f"{e(r['verdict'])}</span></h2><p><i>{e(r['claim'])}</i> ({e(r['source'])})</p>"
            f"<div class='pv'><div><h4>paper</h4><p>{e(r['paper_value'])}</p></div><div><h4>ours</h4>"
            f"<p>{e(r['ours'])}</p></div></div>"
            f"<ul><li>setting: {e(r['setting'])}</li><li>grid: {e(r['grid'] or 'n/a')}</li><li>rule: {e(r['rule'])}</li>"
            f"{margins}{('<li>note: ' + e(r['note']) + '</li>') if r.get('note') else ''}"
            f"{''.join('<li>sensitivity to ' + e(x) + '</li>' for x in r.get('sensitivity', []))}</ul>"
            f"{_parts_html(r['parts'])}{other}{para}{''.join(_img(out, f, shown, r) for f in r['figures'])}</section>")
    css = ("body{font-family:system-ui,sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#1f2328}"
           "table{border-collapse:collapse;margin:1em 0;font-size:0.9em}td,th{border:1px solid #d0d7de;padding:4px 8px;"
           "vertical-align:top}th{background:#f6f8fa}.verdict{font-weight:bold}.pv{display:flex;gap:2em}.pv div{flex:1;"
           "background:#f6f8fa;padding:0 1em}figure{margin:1em 0}img{max-width:100%}figcaption{font-size:0.95em;"
           "color:#1f2328;line-height:1.45}.figtitle{font-size:1.05em;margin:0.4em 0}#toc{background:#f6f8fa;"
           "padding:0.5em 1.5em;font-size:0.9em}.para{border-left:4px solid #d0d7de;padding-left:1em}.st-holds{color:#1a7f37}"
           ".st-fails{color:#cf222e}.st-direction{color:#9a6700}.st-undecided{color:#6e7781}section{margin-top:2.5em}")
    tail = f"<section id='notes'><pre style='white-space:pre-wrap'>{e(chr(10).join(extra))}</pre></section>" if extra else ""
    entries = []
    for r in p["claims"]:
        figs = ", ".join(f"<a href='#fig-{e(f)}'>{e(f)}</a>" for f in r["figures"])
        entries.append(f"<li><a href='#{e(r['id'])}'>{e(r['id'])}</a>: <span style='color:{COLORS[r['verdict']]}'>"
                       f"{e(r['verdict'])}</span>{f' (figures: {figs})' if figs else ''}</li>")
    notes = "<li><a href='#notes'>Notes</a></li>" if extra else ""
    toc = (f"<nav id='toc'><h2>Contents</h2><ol><li><a href='#verdicts'>Verdicts</a></li><li><a href='#rules'>Shared "
           f"rules</a></li><li>Claims<ol>{''.join(entries)}</ol></li>{notes}</ol></nav>")
    page = (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>Published claims vs this testbed"
            f"</title><style>{css}</style></head><body><h1>Published claims vs this testbed</h1>{head}{toc}"
            "<h2 id='verdicts'>Verdicts</h2><table><tr><th>id</th><th>claim</th><th>paper</th><th>ours</th><th>verdict</th>"
            f"<th>seeds needed</th></tr>{table}</table><h2 id='rules'>Shared rules</h2><p>{e(p['shared_rules'])}</p>"
            f"{''.join(sections)}{tail}</body></html>")
    atomic_write_text(Path(path), page)
