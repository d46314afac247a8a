"""An LLM sweep (``python -m llm_scale sweep FILE``): the project's grid format over the trainer's settings, the
study's run keys (a run shared with a study is one run), cached runs and tables that add up."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from llm_scale import study
from llm_scale import sweep as llm_sweep
from llm_scale.cli import main

TINY = "[base]\nsteps = 2\neval_every = 1\neval_size = 4\n"


def test_a_grid_run_has_the_key_of_the_same_study_run(tmp_path):
    """The sweep keys a run as the study does (`study.config_run`): the stale search run of a study is the grid's
    run with the same settings, so both read one directory."""
    (tmp_path / "study.toml").write_text("[train]\neval_every = 1\nsteps = 3\nmode = 'thread'\n[search]\neta = [2]\n"
                                         "lr = [1e-3]\nseeds = [0, 1]\n[compare]\nseeds = [0, 1]\n")  # fmt: skip
    (tmp_path / "grid.toml").write_text("[base]\neval_every = 1\nsteps = 3\nmode = 'thread'\nrecipe = 'grpo'\n"
                                        "lr = 1e-3\n[grid]\nmax_staleness = [2]\nseed = [0, 1]\n")  # fmt: skip
    stale = [r.key for r in study.search_runs(study.load_sweep(tmp_path / "study.toml")) if r.arm == study.STALE]
    assert [r.key for r in llm_sweep.load(tmp_path / "grid.toml").runs] == stale


def test_the_grid_is_expanded_in_file_order_with_seeds_last(tmp_path):
    (tmp_path / "g.yaml").write_text("base:\n  steps: 2\n  eval_every: 1\ngrid:\n  recipe: [grpo, dg]\n"
                                     "  max_staleness: [0, 4]\n  seeds: 2\n")  # fmt: skip
    sweep = llm_sweep.load(tmp_path / "g.yaml")
    assert sweep.grid_keys == ("recipe", "max_staleness", "seed")
    assert [tuple(s.values()) for s in sweep.settings] == [
        (r, e, s) for r in ("grpo", "dg") for e in (0, 4) for s in (0, 1)]
    assert len({r.key for r in sweep.runs}) == 8


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (TINY + "out = 'x'\n", "['out'] may not be set"),
        (TINY + "bogus = 1\n", "unknown setting(s) ['bogus']"),
        ("[base]\nsteps = 2\n", "eval_every must be >= 1"),
        (TINY + "[grid]\nlr = []\n", "grid key 'lr' must be a non-empty list"),
        (TINY + "seeds = 2\n[grid]\nseed = [0]\n", "give either seeds = N or seed"),
        (TINY + "[grid]\nlr = [-1.0]\n", "lr"),
        ("workers = 2\n" + TINY, "unknown top-level key(s) 'workers'"),
        ("last_evals = 0\n" + TINY, "last_evals must be an integer >= 1"),
    ],
)
def test_bad_sweep_files_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert main(["sweep", str(path), "--plan", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err
    assert not (tmp_path / "o").exists() and not (tmp_path / "r").exists()


def test_a_sweep_trains_each_run_once_and_its_cells_average_its_runs(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(TINY + "[grid]\nrecipe = ['grpo', 'dg']\nseeds = 2\n")
    runs, out = tmp_path / "runs", tmp_path / "out"
    assert main(["sweep", str(path), "--runs", str(runs), "--out", str(out), "--parallel", "2"]) == 0
    table = pd.read_csv(out / "runs.csv")
    assert table["finished"].all() and len(table) == 4 and table["key"].nunique() == 4
    cells = pd.read_csv(out / "cells.csv")
    for _, cell in cells.iterrows():
        acc = table[table["recipe"] == cell["recipe"]]["accuracy"]
        assert cell["accuracy"] == pytest.approx(acc.mean(), abs=1e-12) and cell["finished"] == 2
        assert cell["se"] == pytest.approx(acc.std(ddof=1) / math.sqrt(2), abs=1e-12)
    ups = pd.read_csv(out / "updates.csv")
    assert sorted(ups.groupby("key")["version"].max()) == [2, 2, 2, 2]  # versions 0..steps per run
    stamps = {k: (runs / k / "summary.json").stat().st_mtime_ns for k in table["key"]}
    capsys.readouterr()
    assert main(["sweep", str(path), "--runs", str(runs), "--out", str(out)]) == 0
    assert "to train" not in capsys.readouterr().out  # every run reused
    assert {k: (runs / k / "summary.json").stat().st_mtime_ns for k in table["key"]} == stamps
    assert pd.read_csv(out / "runs.csv").equals(table)
