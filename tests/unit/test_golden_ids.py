"""Every planned simulator run keeps its id: the run ids of each figures experiment (quick, full and
confirmatory budgets), of every testbed sweep file under sweeps/ and of the validation battery, against the
committed tests/fixtures/golden_run_ids.json.

A run's id is the key of its cached result, so an edit that moves one silently retrains it (or, worse, reads
another run's numbers). An intended change (a new cell, a new sweep file) is recorded by rewriting the fixture:

    python tests/unit/test_golden_ids.py --write
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "golden_run_ids.json"


def planned_ids() -> dict[str, list[str]]:
    """group name -> the sorted distinct run ids it plans."""
    from figures.budgets import FULL, QUICK, confirmatory_budget
    from figures.experiments import EXPERIMENTS, experiment
    from figures.prereg import load
    from testbed.sweep_file import expand, load_file
    from testbed.validate import BATTERY, CANDIDATES, SELECT_SEEDS, cell_roles

    groups: dict[str, list[str]] = {}
    for label, b in (("quick", QUICK), ("full", FULL), ("confirmatory", confirmatory_budget(load()))):
        for name in EXPERIMENTS:
            groups[f"figures/{name}/{label}"] = sorted({c.run_id for c in experiment(name).configs(b)})
    for path in sorted((ROOT / "sweeps").rglob("*.toml")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith("sweeps/llm/"):  # the LLM study's files: tests/llm/test_llm_study.py keeps their keys
            # ids only: a file whose data this machine lacks (Debian's Fashion-MNIST) keeps its ids all the same
            groups[rel] = sorted({c.run_id for c in expand(load_file(path), build=False)})
    for name, cells in (("battery", BATTERY), ("candidates", CANDIDATES)):  # the baselines every scorecard shares
        groups[f"testbed/validate/{name}"] = sorted({c.run_id for cell in cells
                                                     for cfgs in cell_roles(cell, None, SELECT_SEEDS).values()
                                                     for c in cfgs})
    return groups


def digest(ids: list[str]) -> str:
    return hashlib.sha1(",".join(ids).encode()).hexdigest()[:16]


def summary() -> dict[str, dict[str, object]]:
    return {name: {"runs": len(ids), "digest": digest(ids)} for name, ids in planned_ids().items()}


def test_every_planned_run_keeps_its_id():
    want = json.loads(FIXTURE.read_text())
    got = summary()
    changed = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
    assert not changed, f"run ids moved in {changed}: their cached results would be retrained or misread"
    assert got.keys() == want.keys(), (f"groups added {sorted(got.keys() - want.keys())}, removed "
                                       f"{sorted(want.keys() - got.keys())}: record them with --write")


@pytest.mark.parametrize("group", ["figures/mnist_delay/confirmatory", "figures/token_horizon/confirmatory"])
def test_the_fixture_counts_the_registered_grids(group):
    """The confirmatory grids the registration names (figures/preregistration.toml): 320 MNIST-delay runs and
    408 token-horizon runs."""
    assert json.loads(FIXTURE.read_text())[group]["runs"] == {"figures/mnist_delay/confirmatory": 320,
                                                               "figures/token_horizon/confirmatory": 408}[group]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/unit/test_golden_ids.py --write")
    sys.path.insert(0, str(ROOT))
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(summary(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE.relative_to(ROOT)}")
