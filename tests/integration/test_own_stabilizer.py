"""docs/own_stabilizer.md, run as written: its files and commands are read from the page itself, so the page
and this test cannot drift apart. Plus the one-flag machinery: --import, module:ClassName, sweep files'
imports, the unknown-recipe hint."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

from testbed.stabilizers import PolicyTerms, registry

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "own_stabilizer.md"


def blocks(lang: str) -> list[str]:
    """The fenced code blocks of the page in language ``lang``."""
    return re.findall(rf"```{lang}\n(.*?)```", PAGE.read_text(), flags=re.S)


def files() -> dict[str, str]:
    """The page's files: blocks whose first line is ``# file: NAME``."""
    out = {}
    for lang in ("python", "toml"):
        for text in blocks(lang):
            first, _, _ = text.partition("\n")
            if first.startswith("# file: "):
                out[first[len("# file: "):].strip()] = text
    return out


def commands() -> list[list[str]]:
    (text,) = blocks("bash")
    return [shlex.split(line) for line in text.splitlines() if line.strip() and not line.startswith("#")]


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if k != "TESTBED_IMPORTS"}
    e["PYTHONPATH"] = str(ROOT)
    return e


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    assert argv[0] == "python"
    return subprocess.run([sys.executable, *argv[1:]], cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=900)


def test_the_pages_surrogate_has_the_formula_it_states():
    """w = c tanh(r / c) per token, detached: loss = -w A logp, and the gradient of the loss is -w A."""
    namespace: dict = {}
    try:
        exec(compile(files()["softis.py"], "softis.py", "exec"), namespace)
        surrogate = namespace["SoftIS"](c=3.0)
        logp = torch.tensor([[-0.5, -1.0, -2.0]], requires_grad=True)
        blogp = torch.tensor([[-1.0, -1.0, -0.1]])
        adv = torch.tensor([[1.0, -2.0, 0.5]])
        mask = torch.tensor([[True, True, False]])
        loss, used, metrics = surrogate.per_token(PolicyTerms(logp, blogp, adv, mask))
        r = torch.exp(logp.detach() - blogp)
        w = 3.0 * torch.tanh(r / 3.0)
        assert torch.allclose(loss[0, :2], (-w * adv * logp.detach())[0, :2])
        assert float(loss[0, 2].detach()) == 0.0 and torch.equal(used, mask)
        loss.sum().backward()
        assert torch.allclose(logp.grad[0, :2], (-w * adv)[0, :2])
        assert math.isclose(float(metrics["w_mean"]), float(w[0, :2].mean()), rel_tol=1e-6)
    finally:
        registry.SURROGATES.pop("softis", None)


def test_unknown_recipe_says_how_to_add_one(tmp_path):
    r = run(["python", "-m", "testbed", "run", "--recipe", "softis", "--steps", "2", "--out", "o"], tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert "unknown recipe or component 'softis'" in line and "--import MODULE" in line and "module:ClassName" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv, fragment", [
    (["--import", "nosuchmodule"], "--import 'nosuchmodule': no module named 'nosuchmodule'"),
    (["--import"], "--import needs a module name"),
    (["--recipe", "softis:Nope"], "'softis:Nope': module 'softis' has no Advantage, Surrogate or GradientTransform"),
    (["--import", "broken"], "--import 'broken': importing it failed: ZeroDivisionError"),
])
def test_bad_imports_are_one_line(tmp_path, argv, fragment):
    (tmp_path / "softis.py").write_text(files()["softis.py"])
    (tmp_path / "broken.py").write_text("1 / 0\n")
    r = run(["python", "-m", "testbed", "run", "--task", "bandit", "--steps", "2", "--out", "o", *argv], tmp_path)
    assert r.returncode == 2
    (line,) = r.stderr.splitlines()
    assert fragment in line
    assert not (tmp_path / "o").exists()


def test_class_term_and_workers_reimport(tmp_path):
    """'softis:SoftIS(c=4)' without --import, trained in 2 spawned worker processes, gives the same numbers as
    --import softis --recipe 'softis(c=4)' in this one process (and a different one from c=2)."""
    (tmp_path / "softis.py").write_text(files()["softis.py"])
    base = ["python", "-m", "testbed", "run", "--task", "bandit", "--steps", "30", "--log-every", "10", "--seeds", "2",
            "--delay", "fixed:5", "--lr", "0.3", "--no-progress"]
    a = run([*base, "--recipe", "softis:SoftIS(c=4)", "--workers", "2", "--loop-size", "1", "--out", "a"], tmp_path)
    b = run([*base, "--import", "softis", "--recipe", "softis(c=4)", "--out", "b"], tmp_path)
    c = run([*base, "--import", "softis", "--recipe", "softis", "--out", "c"], tmp_path)
    assert (a.returncode, b.returncode, c.returncode) == (0, 0, 0), a.stderr + b.stderr + c.stderr
    cols = ["seed", "step", "test_reward", "reward_avg"]
    ta, tb, tc = (pd.read_csv(tmp_path / d / "results.csv")[cols] for d in "abc")
    pd.testing.assert_frame_equal(ta, tb)
    assert not ta["reward_avg"].equals(tc["reward_avg"])


@pytest.mark.slow
def test_the_page_runs_as_written_from_an_empty_directory(tmp_path):
    for name, text in files().items():
        (tmp_path / name).write_text(text)
    for argv in commands():
        r = run(argv, tmp_path)
        ok = (0, 1) if argv[3:4] == ["validate"] else (0,)  # validate exits 1 when the recipe does not pass
        assert r.returncode in ok, f"{' '.join(argv)}: {r.stderr[-2000:]}"
    one = pd.read_csv(tmp_path / "runs/one/summary.csv")
    assert list(one["recipe"]) == ["softis(c=4)"] and one["status"].iloc[0] in ("ok", "collapsed")
    sweep = pd.read_csv(tmp_path / "runs/sweep/summary.csv")
    assert sorted(set(sweep["recipe"])) == ["pg", "softis", "tis"] and len(sweep) == 6
    assert sweep["final_test_error"].between(0, 1).all()
    table = pd.read_csv(tmp_path / "runs/sweep/plot.csv")
    mine = table[table["recipe"] == "softis"].set_index("delay")["final_test_error_mean"]
    finals = sweep[sweep["recipe"] == "softis"].set_index("delay")["final_test_error"]
    assert mine.to_dict() == pytest.approx(finals.to_dict())  # one seed: the mean is the run's value
    assert (tmp_path / "runs/sweep/plot.png").stat().st_size > 10_000
    (card_path,) = (tmp_path / "runs/cards").glob("*.json")
    card = json.loads(card_path.read_text())
    assert card["recipe"] == "softis" and 0.0 <= card["score"] <= 1.0 and len(card["cells"]) == 2
    summary = json.loads((tmp_path / "runs/llm/summary.json").read_text())
    assert summary["recipe"] == "softis" and summary["steps"] == 20 and summary["status"] == "finished"


def test_the_readmes_example_runs_as_written_from_an_empty_directory(tmp_path):
    """README's own-stabilizer section: its module written as shown, each of its commands run as written from the
    directory holding it (the simulator with the spec name and with module:ClassName, then the LLM trainer)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("<!-- own-stabilizer-example -->"):readme.index("## Verdicts")]
    (module,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    first, _, _ = module.partition("\n")
    assert first.startswith("# ") and first.endswith(".py")
    (tmp_path / first[2:].strip()).write_text(module)
    (script,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    argvs = [shlex.split(line) for line in script.splitlines() if line.strip()]
    assert [a[2] for a in argvs] == ["testbed", "testbed", "llm_scale"]
    for argv in argvs:
        done = run(argv, tmp_path)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    for out in ("runs/mine", "runs/mine-class"):
        summary = pd.read_csv(tmp_path / out / "summary.csv")
        assert list(summary["status"]) == ["ok"]
        assert 0.0 <= float(summary["final_test_error"].iloc[0]) < 0.5  # it learned (chance is 0.9) at lag 50
    summary = json.loads((tmp_path / "runs" / "llm" / "summary.json").read_text())
    assert summary["recipe"] == "capped_is" and summary["steps"] == 20 and summary["status"] == "finished"
