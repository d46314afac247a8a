"""The pre-registration of the confirmatory claims report: load, check, stamp and label.

    python -m figures.prereg check [--file F]     validate the file, or a later registration (one line per problem, exit 2)
    python -m figures.prereg seeds                the seeds every exploratory record names, and the block
    python -m figures.prereg stamp                the stamp a confirmatory run records (JSON)

The file (figures/preregistration.toml, `PATH`) states per claim its endpoint, estimator, margins with
their source, preconditions and design, the confirmatory seed block and the sequential designs
(docs/claims_protocol.md). A confirmatory run reads only it. `stamp` is what the run records: the
file's SHA-256, the commit that last changed it (None when it is not committed as it is) and the block.

`label` decides whether a report may call itself "confirmatory" (Nosek et al. 2018, "The preregistration
revolution", PNAS 115: a prediction is confirmatory only when the analysis was fixed before the data):
the file is registered, committed and unmodified, byte-identical to the one stamped on the first
confirmatory run, every judged seed lies in the block and none appears in any exploratory record
(`used_seeds`: every seed named under sweeps/, figures/ and results/, outside the confirmatory report).
Otherwise the report is "exploratory", with the reasons.

A later registration (figures/registrations/*.toml, `load_later`) re-registers some claims on a new design
after the first registration's runs, which stays frozen: it names the claims, a new seed block (disjoint from
the first's, never run before), the budget fields and task options its design changes, and where its report and
run cache go, and inherits every rule (endpoints, estimators, margins, phase, designs) from the first file. Its
digest covers both files, its commit is None unless both are committed as they are, and its report is labelled
by the same `label`. ``python -m figures all --registration FILE`` runs it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.util.errors import EXIT_USAGE, UsageError
from testbed.util.provenance import file_commit

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PATH = Path(__file__).with_name("preregistration.toml")
REGISTRATIONS = Path(__file__).with_name("registrations")  # later registrations (`load_later`)
LATER_SECTIONS = ("registration", "seeds", "budget", "task_args", "output", "spike")
LATER_RULES = ("spike",)  # the rule sections a later registration may restate (with registration.after_data)
SPIKE_KEYS = ("window", "false_alarm", "factor_grid", "reference", "early_steps")
SPIKE_REFERENCES = ("local", "early")  # what a spike is measured against (`figures.confirm.SpikeReference`)
LATER_BUDGET = ("samples_k",)  # the budget fields a later registration may set (figures/budgets.py Budget)
# the confirmatory report and its run cache (python -m figures all --confirmatory): not exploratory records
CONFIRMATORY_DIRS = ("results/confirmatory", "results/figures/confirmatory_runs")
SCANNED = ("sweeps", "figures", "results")
KINDS = ("typical", "stability", "exact", "system")
ESTIMATORS = ("trimmed", "mean+collapse", "binomial", "exact", "none")
SOURCES = ("paper", "resolution", "project")
SCALES = ("diff", "factor")
DESIGNS = ("mnist", "async", "tr", "horizon")
CLAIM_KEYS = ("kind", "design", "endpoint", "estimator", "rule", "preconditions", "margins")
SECTIONS = ("registration", "seeds", "designs", "phase", "stability", "gac", "spike", "ddg", "margins", "claims")
TEXT_SUFFIXES = (".py", ".md", ".toml", ".json", ".jsonl", ".csv", ".txt", ".sh", ".cfg", ".yaml", ".yml")


@dataclass(frozen=True)
class Prereg:
    """The parsed, checked file: its sections as read, and its SHA-256."""

    data: dict[str, Any]
    sha256: str
    file: str = "figures/preregistration.toml"  # the registration's file; a later one's inherits PATH's rules
    files: tuple[str, ...] = ()  # every file the registration reads (its commit needs each committed as it is)

    def section(self, name: str) -> dict[str, Any]:
        return self.data[name]

    @property
    def claims(self) -> dict[str, dict[str, Any]]:
        return self.data["claims"]

    def seeds(self, design: str) -> tuple[int, ...]:
        """The confirmatory seeds of ``design``, first look first: block_start + 0 .. block_start + cap - 1."""
        start = int(self.data["seeds"]["block_start"])
        return tuple(range(start, start + int(self.data["designs"][design]["cap"])))

    def block(self) -> range:
        s = self.data["seeds"]
        return range(int(s["block_start"]), int(s["block_start"]) + int(s["block_size"]))

    @property
    def later(self) -> dict[str, Any]:
        """A later registration's own settings (claims, budget, task_args, output); {} for the first."""
        return self.data.get("later") or {}


def _fail(where: str, what: str) -> None:
    raise UsageError(f"{where}: {what}")


def check(data: dict[str, Any], where: str = "preregistration") -> None:
    """Raise `UsageError` (one line naming the bad value and what is allowed) at the first problem."""
    missing = [s for s in SECTIONS if s not in data]
    if missing:
        _fail(where, f"missing section(s) {', '.join(missing)}; a registration has {', '.join(SECTIONS)}")
    if data["registration"].get("status") != "registered":
        _fail(where, f"registration.status must be 'registered', got {data['registration'].get('status')!r}")
    s = data["seeds"]
    for k in ("exploratory_below", "block_start", "block_size"):
        if not isinstance(s.get(k), int) or isinstance(s.get(k), bool) or s[k] < 0:
            _fail(where, f"seeds.{k} must be a non-negative integer, got {s.get(k)!r}")
    if s["block_start"] < s["exploratory_below"]:
        _fail(where, f"seeds.block_start = {s['block_start']} lies among the exploratory seeds "
                     f"(below {s['exploratory_below']}); allowed: >= seeds.exploratory_below")
    for name in DESIGNS:
        d = data["designs"].get(name)
        if not isinstance(d, dict) or not all(isinstance(d.get(k), int) and d[k] >= 1 for k in ("n0", "step", "cap")):
            _fail(where, f"designs.{name} must have integers n0, step, cap >= 1, got {d!r}")
        if not d["n0"] <= d["cap"] <= s["block_size"]:
            _fail(where, f"designs.{name}: need n0 <= cap <= seeds.block_size, got n0 {d['n0']}, cap {d['cap']}, "
                         f"block {s['block_size']}")
    ph = data["phase"]
    if not 0 <= ph.get("progress_lo", -1) < ph.get("progress_hi", -1) <= 1:
        _fail(where, f"phase: need 0 <= progress_lo < progress_hi <= 1, got {ph.get('progress_lo')!r}, "
                     f"{ph.get('progress_hi')!r}")
    check_spike(data["spike"], where, "spike")
    for cid, c in data["claims"].items():
        at = f"claims.{cid}"
        absent = [k for k in CLAIM_KEYS if k not in c]
        if absent:
            _fail(where, f"{at} lacks {', '.join(absent)}; every claim states {', '.join(CLAIM_KEYS)}")
        if c["kind"] not in KINDS:
            _fail(where, f"{at}.kind {c['kind']!r} is not one of {', '.join(KINDS)}")
        if c["estimator"] not in ESTIMATORS:
            _fail(where, f"{at}.estimator {c['estimator']!r} is not one of {', '.join(ESTIMATORS)}")
        if c["design"] not in (*DESIGNS, "none"):
            _fail(where, f"{at}.design {c['design']!r} is not one of {', '.join(DESIGNS)}, none")
        if c["kind"] == "stability" and c["estimator"] not in ("mean+collapse", "binomial"):
            _fail(where, f"{at}: a stability claim is judged on its tail (mean+collapse or binomial), got "
                         f"{c['estimator']!r}")
        for m in c["margins"]:
            if m.get("source") not in SOURCES:
                _fail(where, f"{at} margin {m.get('name')!r}: source {m.get('source')!r} is not one of "
                             f"{', '.join(SOURCES)}")
            if m["source"] == "resolution" and "value" in m:
                _fail(where, f"{at} margin {m['name']!r}: a resolution margin is computed, not typed; drop value")
            if m["source"] != "resolution" and not isinstance(m.get("value"), int | float):
                _fail(where, f"{at} margin {m['name']!r}: a {m['source']} margin needs a number value")
            if m["source"] != "resolution" and m.get("scale") not in SCALES:
                _fail(where, f"{at} margin {m['name']!r}: scale {m.get('scale')!r} is not one of {', '.join(SCALES)}")


def check_spike(sp: dict[str, Any], where: str, at: str) -> None:
    """Raise `UsageError` (one line) at the first problem of a [spike] section (`figures.confirm.SpikeReference`)."""

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    unknown = sorted(set(sp) - set(SPIKE_KEYS))
    if unknown:
        _fail(where, f"{at} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(SPIKE_KEYS)}")
    kind = sp.get("reference", "local")
    if kind not in SPIKE_REFERENCES:
        _fail(where, f"{at}.reference {kind!r} is not one of {', '.join(SPIKE_REFERENCES)}")
    steps = "window" if kind == "local" else "early_steps"
    if not count(sp.get(steps)):
        _fail(where, f"{at}.{steps} must be an integer >= 1 for a {kind} reference, got {sp.get(steps)!r}")
    grid = sp.get("factor_grid")
    if not isinstance(grid, list) or not grid or not all(isinstance(f, int | float) and not isinstance(f, bool)
                                                         and f > 1 for f in grid):
        _fail(where, f"{at}.factor_grid must be a non-empty list of numbers > 1, got {grid!r}")
    fa = sp.get("false_alarm")
    if not isinstance(fa, int | float) or isinstance(fa, bool) or not 0 < fa < 1:
        _fail(where, f"{at}.false_alarm must be a rate in (0, 1), got {fa!r}")


def _read(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    """(the file's bytes, its parsed TOML); `UsageError` (one line) when it cannot be read or parsed."""
    try:
        raw = path.read_bytes()
        return raw, tomllib.loads(raw.decode())
    except OSError as exc:
        raise UsageError(f"cannot read the {what} {str(path)!r}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


def load(path: Path | str = PATH) -> Prereg:
    """The checked pre-registration (`UsageError`, one line, when it cannot be read or is not valid)."""
    path = Path(path)
    raw, data = _read(path, "pre-registration")
    check(data, str(path))
    return Prereg(data, hashlib.sha256(raw).hexdigest())


def check_later(data: dict[str, Any], first: Prereg, where: str) -> None:
    """Raise `UsageError` (one line) at the first problem of a later registration read against ``first``."""
    unknown = sorted(set(data) - set(LATER_SECTIONS))
    if unknown or not all(k in data for k in ("registration", "seeds", "output")):
        _fail(where, f"a later registration has sections {', '.join(LATER_SECTIONS)} (registration, seeds and output "
                     f"required), got {', '.join(data) or 'none'}")
    r = data["registration"]
    if r.get("status") != "registered":  # never edited after its first run: its digest is in the runs' stamps
        _fail(where, f"registration.status must be 'registered', got {r.get('status')!r}")
    if r.get("supersedes") != first.file:
        _fail(where, f"registration.supersedes must be {first.file!r}, got {r.get('supersedes')!r}")
    claims = r.get("claims")
    if not isinstance(claims, list) or not claims or not set(claims) <= set(first.claims):
        _fail(where, f"registration.claims must list claims of {first.file} ({', '.join(first.claims)}), got {claims!r}")
    s = data["seeds"]
    if set(s) != {"block_start", "block_size"} or not all(
            isinstance(s[k], int) and not isinstance(s[k], bool) for k in s):
        _fail(where, f"seeds must have integers block_start and block_size only, got {s!r}")
    new = range(s["block_start"], s["block_start"] + s["block_size"])
    old = first.block()
    if new.start < int(first.data["seeds"]["exploratory_below"]) or (new.start < old.stop and old.start < new.stop):
        _fail(where, f"seeds block {new.start}..{new.stop - 1} must lie above the exploratory seeds and outside the "
                     f"first registration's block {old.start}..{old.stop - 1}")
    caps = {k: int(v["cap"]) for k, v in first.data["designs"].items()}
    if s["block_size"] < max(caps.values()):
        _fail(where, f"seeds.block_size {s['block_size']} is below the designs' largest cap {max(caps.values())}")
    bad = sorted(set(data.get("budget", {})) - set(LATER_BUDGET))
    if bad:
        _fail(where, f"budget field(s) {', '.join(bad)} cannot be set by a later registration; allowed: "
                     f"{', '.join(LATER_BUDGET)}")
    rules = [k for k in LATER_RULES if k in data]
    if "spike" in data:
        check_spike(data["spike"], where, "spike")
    if rules and not (isinstance(r.get("after_data"), str) and r["after_data"].strip()):
        _fail(where, f"a later registration that restates {', '.join(rules)} says why in registration.after_data "
                     f"(the data read before the rule was fixed), got {r.get('after_data')!r}")
    out = data["output"]
    if set(out) != {"report", "cache"} or not all(isinstance(v, str) and v for v in out.values()):
        _fail(where, f"output must name report and cache directories, got {out!r}")


def load_later(path: Path | str) -> Prereg:
    """A later registration merged over the first (`PATH`): the first's sections with the later's seed block and the
    rule sections it restates (`LATER_RULES`, whole), and ``later`` (its claims, budget, task_args, output, why,
    rules, after_data); digest sha256(first file's bytes + this file's)."""
    path = Path(path)
    first = load(PATH)
    raw, data = _read(path, "registration")
    check_later(data, first, str(path))
    task_args = dict(data.get("task_args") or {})
    from testbed.tasks import coerce_option

    try:  # names and types only: the data a data_dir names is read where the runs use it, not to load the file
        for k, v in task_args.items():
            coerce_option("mnist", k, v)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{path}: task_args {task_args!r}: {str(exc).splitlines()[0]}") from None
    rules = [k for k in LATER_RULES if k in data]
    later = {"claims": list(data["registration"]["claims"]), "budget": dict(data.get("budget") or {}),
             "task_args": task_args, "output": dict(data["output"]), "status": data["registration"]["status"],
             "why": data["registration"].get("why", ""), "rules": rules,
             "after_data": data["registration"].get("after_data", "")}
    merged = {**first.data, **{k: dict(data[k]) for k in rules}, "seeds": {**first.data["seeds"], **data["seeds"]},
              "later": later}
    first_raw = PATH.read_bytes()
    return Prereg(merged, hashlib.sha256(first_raw + raw).hexdigest(), file=_relative(path),
                  files=(_relative(PATH), _relative(path)))


def _relative(path: Path) -> str:
    """``path`` relative to the repository (the working directory) where it lies inside it, else as given."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def registration(path: Path | str | None = None) -> Prereg:
    """The registration a confirmatory run reads: the first (`PATH`) for None or PATH, else `load_later`."""
    if path is None or str(path) == "" or Path(path).resolve() == PATH.resolve():
        return load(PATH)
    return load_later(path)


def committed_at(path: Path = PATH) -> str | None:
    """The commit that last changed ``path``, or None when the file differs from it (or is not in git)."""
    return file_commit(path)


def stamp(path: Path = PATH) -> dict[str, Any]:
    """What a confirmatory run record and the report carry: digest, commit, status and the seed block."""
    p = load(path)
    b = p.block()
    return {"sha256": p.sha256, "commit": committed_at(path), "status": p.data["registration"]["status"],
            "seed_block": [b.start, b.stop - 1], "file": "figures/preregistration.toml"}


def stamp_of(p: Prereg) -> dict[str, Any]:
    """`stamp` of a registration (`registration`): a later one's commit is its own file's when every file it reads
    is committed as it is (else None), and it names the file it supersedes, the claims it judges and the rule
    sections it restates (``rules``, when any)."""
    if not p.later:
        return stamp(PATH)
    commits = [committed_at(Path(f)) for f in p.files]
    b = p.block()
    return {"sha256": p.sha256, "commit": None if None in commits else commits[-1], "status": "registered",
            "seed_block": [b.start, b.stop - 1], "file": p.file, "supersedes": "figures/preregistration.toml",
            "claims": p.later["claims"], **({"rules": p.later["rules"]} if p.later.get("rules") else {})}


def later_files(root: Path | str = ".") -> list[Path]:
    """The later registrations under ``root`` (figures/registrations/*.toml), sorted."""
    return sorted((Path(root) / REGISTRATIONS.relative_to(Path(__file__).parent.parent)).glob("*.toml"))


def later_outputs(root: Path | str = ".") -> list[str]:
    """The report and run-cache directories every later registration under ``root`` names (not exploratory
    records: their seeds are that registration's block)."""
    out = []
    for f in later_files(root):
        try:
            o = tomllib.loads(f.read_text()).get("output") or {}
        except (OSError, ValueError):
            continue
        out += [str(v) for v in o.values() if isinstance(v, str) and v]
    return out


# --- seeds named by exploratory records -------------------------------------------------------------------

_SEED_KEY = re.compile(r"^(\w+_)?seeds?$|^seed_\w+$", re.I)
_NOT_SEEDS = re.compile(r"needed|used|count|_n$|^n_", re.I)
_LITERAL = re.compile(r"\b(?:\w+_)?seeds?\"?\s*[:=]\s*(\[[^\]]*\]|\([^)]*\)|range\([^)]*\)|\d+)", re.I)
_PROSE_RANGE = re.compile(r"\bseeds?\s+(\d+)\s*(?:-|–|to|\.\.)\s*(\d+)", re.I)


def _ints(value: Any) -> Iterator[int]:
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _ints(v)


def _from_structure(obj: Any, count_means_range: bool) -> Iterator[int]:
    """Ints under seed-like keys of parsed JSON/TOML (a bare count under ``seeds`` also as range(count))."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, str) and _SEED_KEY.match(k) and not _NOT_SEEDS.search(k):
                vals = list(_ints(v))
                yield from vals
                if count_means_range and isinstance(v, int) and k.lower().endswith("seeds"):
                    yield from range(v)
            else:
                yield from _from_structure(v, count_means_range)
    elif isinstance(obj, list):
        for v in obj:
            yield from _from_structure(v, count_means_range)


def _from_text(text: str) -> Iterator[int]:
    """Seeds written in code or prose: ``seed = 3``, ``seeds=[0, 1]``, ``seed=range(2, 5)``, "seeds 0-14";
    a bare count (``seeds = 5``) also as range(count)."""
    for m in _LITERAL.finditer(text):
        lit = m.group(1)
        if lit.startswith("range("):
            args = [int(x) for x in re.findall(r"-?\d+", lit)]
            if 1 <= len(args) <= 3 and len(args) == lit.count(",") + 1:
                yield from range(*args)
            continue
        nums = [int(x) for x in re.findall(r"\d+", lit)]
        yield from nums
        if len(nums) == 1 and lit.isdigit():
            yield from range(nums[0])
    for m in _PROSE_RANGE.finditer(text):
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo <= hi:
            yield from range(lo, hi + 1)


def seeds_in_file(path: Path) -> set[int]:
    """Every seed ``path`` names (JSON and TOML by their keys, every text file by its literals and prose)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return set()
    out = set(_from_text(text))
    try:
        if path.suffix == ".json":
            out |= set(_from_structure(json.loads(text), False))
        elif path.suffix == ".jsonl":
            for line in text.splitlines():
                if line.strip():
                    out |= set(_from_structure(json.loads(line), False))
        elif path.suffix == ".toml":
            out |= set(_from_structure(tomllib.loads(text), True))
    except ValueError:
        pass
    return out


def record_files(root: Path, dirs: Iterable[str] = SCANNED) -> Iterator[Path]:
    """The text files of the exploratory records: under ``dirs`` of ``root``, outside `CONFIRMATORY_DIRS` and
    the pre-registration itself."""
    skip = {(root / d).resolve() for d in (*CONFIRMATORY_DIRS, *later_outputs(root))}
    registrations = set(later_files(root))
    for d in dirs:
        for p in sorted((root / d).rglob("*")):
            if (p.is_file() and p.suffix in TEXT_SUFFIXES and p.name != PATH.name and p not in registrations
                    and not skip & set(p.resolve().parents)):
                yield p


def used_seeds(root: Path | str = ".", dirs: Iterable[str] = SCANNED) -> dict[int, str]:
    """{seed: the first file naming it} over the exploratory records, plus every seed the exploratory
    budgets' designs may use (figures/budgets.py ``all_seeds``)."""
    from figures.budgets import FULL, QUICK

    root = Path(root)
    out: dict[int, str] = {}
    for b in (FULL, QUICK):
        for kind in DESIGNS:
            for s in b.all_seeds(kind):
                out.setdefault(int(s), f"figures/budgets.py ({b.name} {kind} design)")
    for p in record_files(root, dirs):
        for s in seeds_in_file(p):
            out.setdefault(s, str(p.relative_to(root)))
    return out


def label(p: Prereg, commit: str | None, first_sha256: str | None, judged_seeds: Iterable[int],
          exploratory: dict[int, str], unwired: Iterable[str] = ()) -> tuple[str, list[str]]:
    """("confirmatory", []) when the report keeps the protocol, else ("exploratory", the reasons): the file is
    registered and committed as it is (``commit``), equal to the one stamped on the first confirmatory run
    (``first_sha256``; None: this is the first), every judged seed is in the block, none is in
    ``exploratory`` ({seed: where it was used}), and no claim is judged by code that does not read its
    registered endpoint and estimator (``unwired``: those claims' ids)."""
    why = []
    unwired = sorted(unwired)
    if unwired:
        why.append(f"the judges of {', '.join(unwired)} do not read their pre-registered endpoint and estimator")
    if p.data["registration"].get("status") != "registered":
        why.append(f"the pre-registration's status is {p.data['registration'].get('status')!r}, not 'registered'")
    if commit is None:
        why.append("the pre-registration is not committed as it is (edited or untracked)")
    if first_sha256 is not None and first_sha256 != p.sha256:
        why.append(f"the rules changed after the first confirmatory run (sha256 {first_sha256[:12]} then, "
                   f"{p.sha256[:12]} now)")
    seeds = sorted(set(int(s) for s in judged_seeds))
    block = p.block()
    outside = [s for s in seeds if s not in block]
    if outside:
        why.append(f"seed(s) {', '.join(map(str, outside[:5]))} lie outside the block {block.start}..{block.stop - 1}")
    seen = [s for s in seeds if s in exploratory]
    if seen:
        why.append(f"seed(s) {', '.join(map(str, seen[:5]))} appear in earlier records ({exploratory[seen[0]]})")
    if not seeds:
        why.append("no judged seeds")
    return ("exploratory", why) if why else ("confirmatory", [])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[0] if argv else "check"
    path = Path(argv[argv.index("--file") + 1]) if "--file" in argv[:-1] else PATH
    try:
        if cmd not in ("check", "seeds", "stamp"):
            raise UsageError(f"unknown command {cmd!r}; allowed: check, seeds, stamp")
        p = registration(path)
        if cmd == "check":
            judged = p.later.get("claims") or list(p.claims)
            print(f"{path}: registered, {len(judged)} claim(s) ({', '.join(judged)}), block {p.block().start}.."
                  f"{p.block().stop - 1}, sha256 {p.sha256}")
        elif cmd == "seeds":
            used = used_seeds(Path("."))
            clash = sorted(set(used) & set(p.block()))
            print(f"exploratory seeds named: {len(used)}, largest {max(used)} ({used[max(used)]}); "
                  f"block {p.block().start}..{p.block().stop - 1}: "
                  + ("disjoint" if not clash else f"CLASHES at {clash[:5]} ({used[clash[0]]})"))
            return 0 if not clash else 1
        else:
            print(json.dumps(stamp_of(p), indent=1))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return 0


if __name__ == "__main__":
    sys.exit(main())
