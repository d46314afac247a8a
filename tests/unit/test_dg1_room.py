"""DG-1's room on another training set (figures/dg1_room.py): bad input is refused in one line, and the page's
numbers are the base's window means of the very runs (the oracles bit for bit `figures.oracle_runs.train`)."""

from __future__ import annotations

import json

import numpy as np

from figures import dg1_room, oracle_runs
from testbed.util.endpoints import endpoint_per_seed


def test_refuses_the_confirmatory_block_and_a_bad_data_dir(tmp_path, capsys):
    assert dg1_room.main(["--seeds", "1", "10000", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10000" in err[0] and "exploratory seeds are 0 .. 9999" in err[0]
    assert dg1_room.main(["--seeds", "0", "--data-dir", str(tmp_path / "none"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "none" in err[0]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_window_means_of_the_base_and_the_oracles(tmp_path):
    assert dg1_room.main(["--seeds", "0", "1", "--train-size", "800", "--steps", "60", "--log-every", "10",
                          "--out", str(tmp_path)]) == 0
    res = json.loads((tmp_path / "dg1_room.json").read_text())
    assert res["task_args"] == {"train_size": 800} and res["n_train"] == 800
    window = tuple(res["window"])
    assert res["versions"][0] <= window[0] <= window[1] <= res["versions"][-1]
    for cell in dg1_room.CELLS:
        want = endpoint_per_seed(res["versions"], np.array(res["curves"][cell]), window)
        assert np.allclose(res["phase"][cell], want, equal_nan=True)
        assert res["final"][cell] == [c[-1] for c in res["curves"][cell]]
    exact = oracle_runs.train("pg_exact", [0, 1], 60, 10, task_args={"train_size": 800})
    assert res["curves"]["pg k=inf"] == [f["test_error"].tolist() for f in exact]
    assert len(res["base_health"]) == 2
    assert res["room"]["the base is healthy (registered)"]["status"] == (
        "met" if sum(h != "healthy" for h in res["base_health"]) <= 0.2 * 2 else "failed")
    page = (tmp_path / "dg1_room.md").read_text()
    assert "DG is not run" in page and all(r["status"] in page for r in res["room"].values())
