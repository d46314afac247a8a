"""Result 11: the stale-baseline drift of REINFORCE on sequences, in closed form and through the real surrogates."""

from __future__ import annotations

import numpy as np
import pytest

from theory.checks import failures
from theory.sequence_drift import check_sequence_drift, expected_ascent, prefix_reach, prefix_table, sequence_drift

pytestmark = pytest.mark.theory


def test_every_check_passes():
    rows = check_sequence_drift()
    assert len(rows) == 5 and not failures(rows), "\n".join(failures(rows))


def test_two_token_hand_case():
    # T = 2, M = 2; prefixes: root, "0", "1". mu uniform everywhere; pi(.|root) = (0.8, 0.2), pi(.|0) = (0.6, 0.4),
    # pi(.|1) = (0.5, 0.5). mu visits root with probability 1 and each one-token prefix with 0.5, so with b = 1
    # the drift b mu(h) (pi - mu) is (0.3, -0.3) at the root, 0.5 (0.1, -0.1) at "0" and 0 at "1".
    seqs, pid = prefix_table(2, 2)
    assert seqs.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1]] and pid.tolist() == [[0, 1], [0, 1], [0, 2], [0, 2]]
    mu = np.full((3, 2), 0.5)
    pi = np.array([[0.8, 0.2], [0.6, 0.4], [0.5, 0.5]])
    np.testing.assert_allclose(prefix_reach(mu, seqs, pid), [1.0, 0.5, 0.5], atol=1e-15)
    want = np.array([[0.3, -0.3], [0.05, -0.05], [0.0, 0.0]])
    np.testing.assert_allclose(sequence_drift(pi, mu, 1.0, seqs, pid), want, atol=1e-15)
    # the real pg, enumerated over the four sequences, with advantage -b: the same numbers
    got, tol = expected_ascent("raw+pg", np.log(pi), mu, 1.0, seqs, pid)
    np.testing.assert_allclose(got, want, atol=tol)
    # token-level IS removes it; on-policy (mu = pi) there is nothing to remove
    got, tol = expected_ascent("raw+is", np.log(pi), mu, 1.0, seqs, pid)
    np.testing.assert_allclose(got, 0.0, atol=tol)
    got, tol = expected_ascent("raw+pg", np.log(pi), pi, 1.0, seqs, pid)
    np.testing.assert_allclose(got, 0.0, atol=tol)
