"""Property: junk typed into any option of ``python -m testbed`` / ``python -m figures``, any spec parameter,
a sweep file or a results table never ends in a traceback or a half-written output directory.

Every example runs the real command line in-process. With ``--dry-run`` (run, sweep, demo) a command
checks everything and writes nothing, so the property is: exit 2 with exactly one output line
``error: ...`` (bad input), or exit 0 (the junk happened to be valid); never exit 1, never an
exception, never a file left behind. Junk that is accepted as a recipe, delay or friction parameter
is then trained for real (a 3-step bandit run) and must finish with a status (never ``failed``).
Junk that is invalid by construction (a word where a number goes, a name no registry knows) must exit 2.

Examples are derandomised (the same in every run) and bounded; the whole module takes well under a
minute. Set JUNK_LOG=path to append every rejected input to a file (for counting distinct bad inputs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import testbed.delay as delay_mod
import testbed.frictions as frictions_mod
from figures import FIGURES
from figures.__main__ import main as figures_main
from testbed.cli import _run_parser, main
from testbed.config import RunConfig
from testbed.stabilizers import build
from testbed.stabilizers.registry import ADVANTAGES, NAMED_RECIPES, SURROGATES, TRANSFORMS
from testbed.tasks import task_names, task_options

pytestmark = pytest.mark.integration


def bounded(n: int) -> settings:
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


SPECIAL = ["", " ", "-", "--", "-h", "--help", "0", "-0", "-1", "1", "2", "0.5", "-0.5", "1e-9", "1e12", "1e15",
           "1e400", "-1e400", str(10**30), "nan", "NaN", "inf", "-inf", "1_000", "0x10", "10**9", "1.5e3", "abc",
           "none", "None", "true", "false", "[1, 2]", "[]", "[", "]", "(", ")", "()", "'", '"', "''", "a=b", "x(y=1)",
           "+", ",", ":", "fixed:-1", "tis(c=2", "\x00", "\n", "\t", "é", "😀", "%s", "{}", "$HOME", "~", "..", "/",
           "/dev/null", "/dev/full", "/proc/self/status", "__import__('os')", "lambda: 0", "1;2", "a b c"]
JUNK = st.one_of(st.sampled_from(SPECIAL), st.text(max_size=10),
                 st.text(alphabet="0123456789.e-+", min_size=1, max_size=6))
WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)  # never a number
_LOG = os.environ.get("JUNK_LOG")


@dataclasses.dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return (self.out + self.err).splitlines()


def call(entry, argv: list[str]) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry(argv)
        except SystemExit as exc:  # --help
            code = exc.code if isinstance(exc.code, int) else 2
    return Outcome(code, out.getvalue(), err.getvalue())


def record(key: object, code: int) -> None:
    """With JUNK_LOG set: append the input and its exit code (2: refused, 0: accepted, 3: accepted and trained)."""
    if _LOG:
        with open(_LOG, "a") as fh:
            fh.write(f"{code} {key!r}\n")


def check(outcome: Outcome, argv: list[str], strict: bool = False, key: object = None) -> None:
    text = outcome.out + outcome.err
    assert "Traceback" not in text, (argv, text)
    assert outcome.code in (0, 2), (argv, outcome)
    record(argv if key is None else key, outcome.code)
    if outcome.code == 2:
        assert len(outcome.lines) == 1 and outcome.lines[0].startswith("error: "), (argv, outcome)
    elif "--help" not in argv and "-h" not in argv:
        assert strict is False, (argv, "invalid input accepted", outcome)


def many_runs(option: str, junk: str) -> bool:
    """A valid --seeds of more than 20: legal, only slow to check (thousands of configs); left out."""
    from testbed.stabilizers.spec import SpecError, parse_value

    if option != "--seeds":
        return False
    try:
        value = parse_value(junk)
    except SpecError:
        return False
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 20


@contextlib.contextmanager
def workdir():
    """A fresh working directory; asserts that nothing was left in it."""
    old = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            yield Path(tmp)
            assert os.listdir(tmp) == [], os.listdir(tmp)
        finally:
            os.chdir(old)


# -- every option of every command --------------------------------------------------------------------------

RUN_OPTIONS = sorted({s for a in _run_parser()._actions for s in a.option_strings if s.startswith("--")} - {"--help"})
TASK_FLAGS = [(t, "--" + k.replace("_", "-")) for t in task_names() for k in task_options(t)
              if "--" + k.replace("_", "-") not in RUN_OPTIONS]
NUMERIC_RUN = ["--steps", "--seeds", "--seed", "--batch-size", "--lr", "--n-actors", "--group-size", "--epochs",
               "--minibatches", "--log-every", "--workers", "--loop-size"]


@bounded(600)
@given(option=st.sampled_from(RUN_OPTIONS + [f for _, f in TASK_FLAGS]), junk=JUNK,
       task=st.sampled_from(["bandit", "contextual_bandit", "mnist", "token_reversal"]))
def test_junk_in_any_run_option(option, junk, task):
    flags = {f for t, f in TASK_FLAGS if t == task}
    assume((option in RUN_OPTIONS or option in flags) and not many_runs(option, junk))
    with workdir():
        argv = ["run", "--task", task, "--steps", "3", "--batch-size", "8"]
        argv = [a for a in argv if not (option == "--task" and a in ("--task", task))]
        argv += [f"{option}={junk}", "--dry-run"] + ([] if option == "--out" else ["--out", "out"])
        check(call(main, argv), argv)


@bounded(100)
@given(option=st.sampled_from(NUMERIC_RUN), word=WORDS)
def test_a_word_for_a_number_is_always_refused(option, word):
    assume(word.lower() not in ("inf", "nan", "true", "false", "none"))
    with workdir():
        argv = ["run", "--task", "bandit", f"{option}={word}", "--dry-run", "--out", "out"]
        check(call(main, argv), argv, strict=True)


DEMO_OPTIONS = ["--out", "--steps", "--workers", "--recipes", "--delays", "--seeds", "--no-progress"]


@bounded(150)
@given(option=st.sampled_from(DEMO_OPTIONS), junk=JUNK)
def test_junk_in_any_demo_option(option, junk):
    assume(not many_runs(option, junk))
    with workdir():
        argv = ["demo", "--steps", "3", f"{option}={junk}", "--dry-run"] + ([] if option == "--out" else ["--out", "o"])
        check(call(main, argv), argv)


@bounded(120)
@given(extra=st.lists(JUNK, min_size=1, max_size=3), command=st.sampled_from(["list", "report", "nope", "validate"]))
def test_junk_arguments_to_other_commands(extra, command):
    if command == "validate":  # a valid recipe would start the battery: only recipes that do not build
        with contextlib.suppress(ValueError):
            build(extra[0])
            assume(False)
    with workdir():
        argv = [command, *extra]
        check(call(main, argv), argv)


@bounded(60)
@given(option=st.sampled_from(["--seeds", "--workers", "--threshold"]), word=WORDS)
def test_junk_validate_options_are_refused(option, word):
    assume(word.lower() not in ("inf", "nan", "true", "false", "none"))
    with workdir():
        argv = ["validate", "pg", f"{option}={word}", "--no-progress"]
        check(call(main, argv), argv, strict=True)


@bounded(150)
@given(targets=st.lists(JUNK, min_size=1, max_size=3),
       option=st.sampled_from(["--workers", "--out", "--cache", "--quick", "--no-progress", "--cached-only"]),
       junk=JUNK)
def test_junk_in_the_figures_command(targets, option, junk):
    assume(not set(targets) & {*FIGURES, "all", "list", "claims", "-h", "--help"})
    with workdir():
        argv = [*targets, f"{option}={junk}"]
        check(call(figures_main, argv), ["figures", *argv], strict=True)


@bounded(40)
@given(option=st.sampled_from(["--workers", "--out", "--cache"]), junk=JUNK)
def test_junk_figures_options_with_a_real_target(option, junk):
    """`claims` reads evidence only: with junk in an option it must refuse, never train or write."""
    assume(junk not in ("-h", "--help"))
    with workdir():
        argv = ["claims", f"{option}={junk}"] + ([] if option == "--out" else ["--out", "nowhere"])
        check(call(figures_main, argv), ["figures", *argv], strict=True)


# -- every spec parameter -----------------------------------------------------------------------------------


def _params() -> list[tuple[str, str, str]]:
    out = []
    for table in (ADVANTAGES, SURROGATES, TRANSFORMS):
        for name, cls in table.items():
            out += [("--recipe", name, f.name) for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]
    for name, parts in NAMED_RECIPES.items():
        for part in parts:
            cls = {**ADVANTAGES, **SURROGATES, **TRANSFORMS}[part.name]
            out += [("--recipe", name, f"{part.name}.{f.name}") for f in dataclasses.fields(cls) if f.init
                    and not f.name.startswith("_")]
    for name, cls in delay_mod._MODELS.items():
        out += [("--delay", name, f.name) for f in dataclasses.fields(cls)]
    out.append(("--delay", "sync+mixed", "q"))
    for name, cls in frictions_mod._COMPONENTS.items():
        out += [("--friction", name, f.name) for f in dataclasses.fields(cls)]
    for task in task_names():
        out += [("--task", task, key) for key in task_options(task)]
    return out


PARAMS = _params()
VALUES = st.one_of(st.sampled_from(SPECIAL), st.integers(-3, 3).map(str),
                   st.sampled_from([str(10**30), "-" + str(10**30), "1e-300", "0.999", "1.001"]),
                   st.floats(allow_nan=True, allow_infinity=True).map(repr), WORDS,
                   st.lists(st.integers(-2, 2), max_size=3).map(str))


@bounded(600)
@given(param=st.sampled_from(PARAMS), value=VALUES)
def test_junk_in_any_spec_parameter(param, value):
    option, name, key = param
    with workdir():
        if option == "--task":
            argv = ["run", "--task", f"{name}({key}={value})", "--steps", "3", "--batch-size", "8"]
        elif name == "sync+mixed":
            argv = ["run", "--task", "bandit", "--delay", f"sync+mixed({key}={value})", "--steps", "3"]
        else:
            argv = ["run", "--task", "bandit", option, f"{name}({key}={value})", "--steps", "3", "--batch-size", "8"]
        outcome = call(main, [*argv, "--dry-run", "--out", "out"])
        check(outcome, argv)
        if outcome.code == 0 and option != "--task":  # accepted: it must also train without an internal error
            trained = call(main, [*argv, "--out", "out", "--no-progress", "--log-every", "1"])
            assert trained.code == 0, (argv, trained)
            record(argv, 3)
            assert "failed" not in Path("out/summary.csv").read_text()
            for path in sorted(Path("out").rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            Path("out").rmdir()


# -- sweep files and results tables -------------------------------------------------------------------------

KEYS = st.sampled_from([f for f in RunConfig.field_names() if f != "task_args"] + ["seeds", "K", "N", "H", "hidden",
                                                                                    "data_dir", "widht", "", "1"])
SCALARS = st.one_of(st.none(), st.booleans(), st.sampled_from([-1, 0, 1, 2, 3, 10**12, 10**30]),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(SPECIAL[:60]), WORDS)
VALUE = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(WORDS, SCALARS, max_size=2))
TABLE = st.dictionaries(KEYS, VALUE, max_size=4)
SWEEP = st.fixed_dictionaries({}, optional={"base": st.one_of(TABLE, SCALARS), "grid": st.one_of(TABLE, SCALARS),
                                            "workers": SCALARS, "format": SCALARS, "loop_size": SCALARS,
                                            "out": SCALARS, "extra": SCALARS})


@bounded(300)
@given(spec=SWEEP, raw=st.one_of(st.none(), st.text(max_size=40)))
def test_junk_sweep_files(spec, raw):
    with workdir() as tmp:
        path = Path(tempfile.mkdtemp()) / ("s.yaml" if raw is None else "s.toml")
        path.write_text(yaml.safe_dump(spec) if raw is None else raw)
        argv = ["sweep", str(path), "--dry-run", "--out", str(tmp / "out")]
        check(call(main, argv), argv, key=("sweep file", path.suffix, path.read_text()))
        path.unlink()
        path.parent.rmdir()


CELLS = st.one_of(st.sampled_from(["ok", "diverged", "collapsed", "failed", "nan", "", "1e5", "inf", "-1", "x,y",
                                   '"', "0.5", "None"]), st.text(max_size=5))


@bounded(200)
@given(columns=st.lists(st.sampled_from(["run_id", "status", "recipe", "lr", "seed", "final_test_error", "wall_s",
                                         "task.H", "diverged_at", "junk"]), min_size=1, max_size=6, unique=True),
       rows=st.lists(st.lists(CELLS, min_size=6, max_size=6), max_size=4), raw=st.one_of(st.none(), st.binary(max_size=30)))
def test_report_on_junk_tables(columns, rows, raw):
    with tempfile.TemporaryDirectory() as tmp:
        if raw is None:
            import csv

            with open(Path(tmp) / "summary.csv", "w", newline="") as fh:
                writer = csv.writer(fh)
                writer.writerow(columns)
                writer.writerows(r[: len(columns)] for r in rows)
        else:
            (Path(tmp) / "summary.csv").write_bytes(raw)
        argv = ["report", tmp]
        outcome = call(main, argv)
        record(("summary.csv", (Path(tmp) / "summary.csv").read_bytes()), outcome.code)
        assert "Traceback" not in outcome.out + outcome.err and outcome.code in (0, 2), (columns, rows, raw, outcome)
        if outcome.code == 2:
            assert len(outcome.lines) == 1 and outcome.lines[0].startswith("error: ")
        else:
            assert {"run_id", "status"} <= set(columns)
