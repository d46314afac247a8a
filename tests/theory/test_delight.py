"""Results 4-7 (the DG gate, Lemma 1, the multi-context proposition, contamination) with the real gate."""

from __future__ import annotations

import numpy as np
import pytest

from theory.checks import failures, find
from theory.delight import (
    FAILS,
    check_contamination,
    check_gate,
    check_lemma1,
    check_multi_context,
    contamination_limit_cosine,
    dg_context_weight,
    real_gate,
)

pytestmark = pytest.mark.theory


@pytest.fixture(scope="module")
def multi_context_rows():
    return check_multi_context()


@pytest.fixture(scope="module")
def contamination_rows():
    return check_contamination()


def test_gate_maximises_linear_plus_entropy_and_its_limits():
    rows = check_gate()
    assert not failures(rows), "\n".join(failures(rows))


def test_gate_hand_values():
    np.testing.assert_allclose(real_gate(np.array([0.0, np.log(3.0)]), 1.0), [0.5, 0.75], rtol=1e-6)


def test_lemma1_holds_and_is_tight():
    rows = check_lemma1()
    assert not failures(rows), "\n".join(failures(rows))


def test_lemma1_fails_under_whitening_and_logp_clipping():
    rows = check_lemma1()
    assert find(rows, "whiten=True").measured > 0.5  # gate above 1/2 for a failure: far above pi^(1/2) = 0.1
    clip = find(rows, "logp_clip=10")
    assert clip.passed and clip.measured > 1e-3  # above the bound pi^(1/2) = 1e-3 at pi = 1e-6


def test_multi_context_proposition(multi_context_rows):
    assert not failures(multi_context_rows), "\n".join(failures(multi_context_rows))


def test_multi_context_counterexample_below_a_quarter(multi_context_rows):
    row = find(multi_context_rows, "eta=0.2 < 1/4")
    assert row.passed and row.measured < 0  # DG farther from the oracle than PG beyond rounding


def test_multi_context_counterexample_with_value_baseline(multi_context_rows):
    row = find(multi_context_rows, "A = R - p_n")
    assert row.passed and row.measured < 0


def test_dg_context_weight_is_monotone_iff_eta_at_least_half():
    p = np.linspace(0.01, 1.0, 1000)
    assert np.all(np.diff(dg_context_weight(p, 0.5)) >= 0)
    assert np.any(np.diff(dg_context_weight(p, 0.4)) < 0)


def test_contamination(contamination_rows):
    assert not failures(contamination_rows), "\n".join(failures(contamination_rows))


def test_contamination_pg_cosine_does_not_collapse(contamination_rows):
    row = find(contamination_rows, "PG cosine at delta")
    assert FAILS in row.note
    assert row.measured > 0.75  # the claimed O(delta/rho) would be ~1e-7 here
    q = np.full(4, 0.25)
    nu = np.array([0.0, 0.0, 0.0, 0.0, 1.0])
    assert contamination_limit_cosine(nu, q) == pytest.approx(1.25 / (np.sqrt(2) * np.sqrt(1.25)))
