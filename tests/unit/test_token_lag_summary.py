"""The lag finding's summary definitions (sweeps/token_reversal/lag/summarize.py) on constructed runs, in numbers."""

import importlib.util
import math
import sys
from pathlib import Path

import pandas as pd
import pytest

HERE = Path(__file__).resolve().parents[2] / "sweeps" / "token_reversal" / "lag"


@pytest.fixture(scope="module")
def summarize():
    spec = importlib.util.spec_from_file_location("token_lag_summarize", HERE / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rows(seed: int, delay: str, errors: list[float]) -> list[dict]:
    return [{"recipe": "pg", "delay": delay, "seed": seed, "step": 10 * (i + 1), "test_error": e}
            for i, e in enumerate(errors)]


def test_parting_steps_first_apart_and_apart_for_good(summarize):
    table = pd.DataFrame(
        rows(0, "sync", [0.9, 0.5, 0.4, 0.1]) + rows(0, "fixed:1", [0.9, 0.9, 0.5, 0.9])  # apart at 20, back, apart at 40
        + rows(1, "sync", [0.9, 0.9, 0.9, 0.9]) + rows(1, "fixed:1", [0.9, 0.9, 0.9, 0.95])  # never 25 points apart
    )
    first, for_good = summarize.parting_steps(table, "fixed:1")
    assert first[0] == 20.0 and for_good[0] == 40.0
    assert math.isnan(first[1]) and math.isnan(for_good[1])


def test_gap_and_switches_with_exact_interval(summarize):
    sync = pd.Series([0.0, 0.5, 0.9, 0.2], index=[0, 1, 2, 3])
    lag = pd.Series([0.9, 0.6, 0.9, 0.8], index=[0, 1, 2, 3])
    g = summarize.gap(sync, lag)
    assert g["mean"]["estimate"] == pytest.approx((0.9 + 0.1 + 0.0 + 0.6) / 4)
    assert g["switched"] == 2 and g["switched_frac"] == 0.5  # seeds 0 and 3 are more than 25 points worse
    lo, hi = g["switched_ci"]  # exact 90% Clopper-Pearson for 2 of 4: Beta quantiles 0.05 / 0.95
    assert lo == pytest.approx(0.0976, abs=1e-4) and hi == pytest.approx(0.9024, abs=1e-4)
