"""A finished run is reused only by the code that made it (testbed/codeprint.py): editing a user's stabilizer or a
built-in one retrains exactly the runs that use it, says which part changed, and every reuse is counted."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from testbed.codeprint import run_code
from testbed.config import RunConfig
from testbed.plan import build_task, plan_sweep
from testbed.stabilizers import registry
from testbed.sweep import run_sweep
from testbed.util.codeprint import source_digest, stale_parts

ROOT = Path(__file__).resolve().parents[2]
MODULE = '''
from dataclasses import dataclass

from testbed.stabilizers import Surrogate, register
from testbed.stabilizers.surrogates import base_metrics, prepare


def weight(r):
    return {WEIGHT}


@register
@dataclass
class Scaled(Surrogate):
    name = "fp_scaled"

    def per_token(self, terms):
        p = prepare(terms)
        return -weight(1.0) * p.advantages * p.logp, p.mask, base_metrics(p)
'''


def configs(recipes: list[str]) -> list[RunConfig]:
    return [RunConfig(task="bandit", recipe=r, delay="fixed:3", steps=20, log_every=10, lr=0.3, seed=s)
            for r in recipes for s in (0, 1)]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(registry.IMPORTS_ENV, raising=False)

    def write(weight: str):
        (tmp_path / "fp_user_mod.py").write_text(MODULE.replace("{WEIGHT}", weight))
        if "fp_user_mod" in sys.modules:
            importlib.reload(sys.modules["fp_user_mod"])
        else:
            registry.import_modules(["fp_user_mod"])

    yield write
    registry.SURROGATES.pop("fp_scaled", None)
    sys.modules.pop("fp_user_mod", None)


def test_editing_a_user_stabilizer_retrains_its_runs_only(tmp_path, user_module, capsys):
    out = tmp_path / "out"
    user_module("1.0")
    cfgs = configs(["fp_scaled", "pg"])
    first = run_sweep(cfgs, out, progress=False)
    assert "reused" not in capsys.readouterr().err
    # the same code: everything reused, and said so
    run_sweep(cfgs, out, progress=False)
    assert "4 of 4 run(s) reused from" in capsys.readouterr().err
    # the helper the surrogate calls changes (not the class itself): its runs are retrained, pg's are not
    user_module("0.0")
    plan = plan_sweep(cfgs, out)
    assert [s.config.recipe for s in plan.todo] == ["fp_scaled", "fp_scaled"]
    assert set(map(tuple, plan.stale.values())) == {("surrogate fp_scaled",)}
    second = run_sweep(cfgs, out, progress=False)
    err = capsys.readouterr().err
    assert "2 of 4 run(s) reused from" in err
    assert "retraining 2 finished run(s)" in err and "the code of surrogate fp_scaled changed" in err
    mine = lambda t: t[t["recipe"] == "fp_scaled"].reset_index(drop=True)  # noqa: E731
    pgs = lambda t: t[t["recipe"] == "pg"].reset_index(drop=True)  # noqa: E731
    pd.testing.assert_frame_equal(pgs(first), pgs(second))
    # a zero weight is a zero gradient: the policy never moves, so the logged reward stays at its first value
    assert mine(second).groupby("seed")["test_reward"].nunique().eq(1).all()
    assert not mine(first)["test_reward"].equals(mine(second)["test_reward"])
    records = [json.loads(p.read_text()) for p in (out / "runs").glob("*.json")]
    assert all(set(r["code"]) == {"advantage auto", f"surrogate {r['config']['recipe']}", "task bandit", "loop"}
               for r in records)


def test_a_record_without_a_fingerprint_is_reused_and_said_so(tmp_path, capsys):
    out = tmp_path / "out"
    cfgs = configs(["pg"])
    run_sweep(cfgs, out, progress=False)
    for path in (out / "runs").glob("*.json"):  # as written before runs carried their code
        record = json.loads(path.read_text())
        del record["code"]
        path.write_text(json.dumps(record))
    plan = plan_sweep(cfgs, out)
    assert plan.todo == [] and plan.unchecked == 2
    (line,) = plan.reuse_lines()
    assert line.startswith("2 of 2 run(s) reused from") and "2 recorded without a code fingerprint" in line


def test_digest_follows_helpers_and_ignores_plumbing():
    spec = RunConfig(task="bandit", recipe="tis").parse()
    code = run_code(spec, build_task(spec))
    assert set(code) == {"advantage auto", "surrogate tis", "task bandit", "loop"}
    assert stale_parts(code, code) == [] and stale_parts(None, code) == []
    assert stale_parts({**code, "loop": "x"}, code) == ["loop"]
    from testbed.stabilizers import importance, numerics

    parts: dict = {}
    from testbed.util.codeprint import _walk

    _walk(importance.TIS, parts)
    assert "testbed.stabilizers.numerics.safe_exp" in parts  # a helper it calls
    assert repr(numerics.safe_exp.__defaults__) in parts["testbed.stabilizers.numerics.safe_exp"]  # its defaults
    assert not any(k.startswith("testbed.stabilizers.registry.") for k in parts)  # plumbing
    assert not any(k.startswith("torch.") for k in parts)  # installed packages are taken as they are
    assert source_digest(importance.TIS) != source_digest(importance.IS)


def _copy_env(src: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != registry.IMPORTS_ENV}
    env["PYTHONPATH"] = str(src)
    return env


@pytest.mark.slow
def test_editing_a_built_in_stabilizer_retrains_its_runs_only(tmp_path):
    """A copy of the package, run from the command line: tis's default c edited -> the tis runs retrain (the line
    names 'surrogate tis'), the pg runs are reused; a docstring and a comment of the surrogates pg and tis use
edited -> nothing retrains."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "testbed", src / "testbed", ignore=shutil.ignore_patterns("__pycache__"))
    argv = [sys.executable, "-m", "testbed", "sweep", str(tmp_path / "s.toml"), "--no-progress"]
    (tmp_path / "s.toml").write_text('out = "o"\n[base]\ntask = "bandit"\nsteps = 20\nlog_every = 10\nlr = 0.3\n'
                                     'delay = "fixed:3"\n[grid]\nrecipe = ["pg", "tis"]\nseed = [0, 1]\n')

    def sweep() -> str:
        r = subprocess.run(argv, cwd=tmp_path, env=_copy_env(src), capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        return r.stderr

    sweep()
    importance = src / "testbed/stabilizers/importance.py"
    text = importance.read_text()
    assert text.count("    c: float = 2.0\n") == 1
    importance.write_text(text.replace("    c: float = 2.0\n", "    c: float = 1.5\n"))
    err = sweep()
    assert "2 of 4 run(s) reused from 'o'" in err
    assert "retraining 2 finished run(s) in 'o': the code of surrogate tis changed since they ran" in err
    surrogates = src / "testbed/stabilizers/surrogates.py"
    text = surrogates.read_text()
    assert "REINFORCE (Williams 1992)" in text and "    p = prepare(terms)\n" in text
    surrogates.write_text(text.replace("REINFORCE (Williams 1992)", "REINFORCE, Williams 1992")
                          .replace("    p = prepare(terms)\n", "    p = prepare(terms)  # float32, masked\n"))
    err = sweep()
    assert "4 of 4 run(s) reused from 'o'" in err and "retraining" not in err


def test_a_digest_is_the_same_in_every_process_whatever_the_defaults_hold(tmp_path):
    """A default value that is a function or an object prints with its memory address; the digest names it by its
    module and name instead, so a record written by one process matches the digest another computes."""
    (tmp_path / "fp_defaults.py").write_text("def step(x, f=lambda v: v + 1, seen=object(), opts={'g': len}):\n"
                                            "    return f(x)\n")
    code = "from fp_defaults import step; from testbed.util.codeprint import source_digest; print(source_digest(step))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    digests = {subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
               for _ in range(2)}
    assert len(digests) == 1 and len(digests.pop().strip()) == 16
