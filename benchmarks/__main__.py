"""``python -m benchmarks [all|overhead|throughput|store|sweep|profile ...] [--quick] [--write README]``

Runs the benchmarks and prints every ratio with its target. ``--write benchmarks/README.md``
replaces the results block of that file (between ``<!-- results:start -->`` and
``<!-- results:end -->``) with a table stamped with the date and the machine; with ``profile`` it
replaces the profiles block likewise. Nothing else in the file is touched.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from benchmarks import loop, profile_steps, stabilizer_overhead, sweep_scaling, version_store
from benchmarks.common import DEFAULT_THREADS, Ratio, machine, set_threads
from testbed.util.arguments import CommandLine

NAMES = ("loop", "overhead", "store", "sweep", "profile")


def collect(names: list[str], quick: bool) -> tuple[list[Ratio], str]:
    ratios: list[Ratio] = []
    profiles = ""
    for name in names:
        if name == "loop":
            ratios += loop.run_all(quick=quick)
        elif name == "overhead":
            ratios += stabilizer_overhead.run(quick=quick)
        elif name == "store":
            ratios += version_store.run(quick=quick)
        elif name == "sweep":
            ratios += sweep_scaling.run(quick=quick)
        elif name == "profile":
            profiles = profile_steps.run(quick=quick)
    return ratios, profiles


def markdown(ratios: list[Ratio], command: str) -> str:
    m = machine()
    lines = [
        f"Measured {m['date']} on {m['cpu']} ({m['cores']} cores), torch {m['torch']}, {m['threads']} thread(s), "
        f"clock: {m['clock']}, load average at the end {m['load_1min']}. Command: `{command}`.",
        "",
        "| group | ratio | value | target | met | how measured |",
        "| --- | --- | ---: | --- | --- | --- |",
    ]
    for r in ratios:
        met = {None: "", True: "yes", False: "**no**"}[r.met]
        lines.append(f"| {r.group} | {r.name} | {r.value:.3f} | {r.target} | {met} | {r.detail} |")
    return "\n".join(lines)


def replace_block(path: Path, tag: str, body: str) -> None:
    start, end = f"<!-- {tag}:start -->", f"<!-- {tag}:end -->"
    text = path.read_text() if path.exists() else f"# Benchmarks\n\n{start}\n{end}\n"
    if start not in text or end not in text:
        text = text.rstrip("\n") + f"\n\n{start}\n{end}\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end), re.DOTALL)
    path.write_text(pattern.sub(lambda _: f"{start}\n{body}\n{end}", text, count=1))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = CommandLine(prog="python -m benchmarks", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", default=["all"], help=f"all, or any of: {', '.join(NAMES)}")
    p.add_argument("--quick", action="store_true", help="few rounds (a smoke run; numbers are noisy)")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    p.add_argument("--write", type=Path, default=None, help="markdown file whose results/profiles blocks to replace")
    args = p.parse_args(argv)
    names = list(NAMES[:-1]) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        print(f"error: unknown benchmark(s) {', '.join(unknown)}; allowed: all, {', '.join(NAMES)}", file=sys.stderr)
        return 2
    set_threads(args.threads)
    ratios, profiles = collect(names, args.quick)
    for r in ratios:
        print(r.line())
    if profiles:
        print(profiles)
    if args.write:
        command = "python -m benchmarks " + " ".join(argv)
        if ratios:
            replace_block(args.write, "results", markdown(ratios, command))
        if profiles:
            m = machine()
            replace_block(args.write, "profiles", f"Profiled {m['date']} (`{command}`).\n\n{profiles}")
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
