"""Result 10: the baseline drift of stale REINFORCE, in closed form and through the real surrogates."""

from __future__ import annotations

import numpy as np
import pytest

from theory.baseline_drift import check_baseline_drift, drift, signal, stale_reinforce, truncated_drift
from theory.checks import failures

pytestmark = pytest.mark.theory


def test_every_check_passes():
    rows = check_baseline_drift()
    assert len(rows) == 8 and not failures(rows), "\n".join(failures(rows))


def test_two_action_hand_case():
    # pi = (0.8, 0.2), mu = (0.2, 0.8), r = (1, 0): signal = mu r - (mu.r) pi = (0.2, 0) - 0.2 (0.8, 0.2) = (0.04, -0.04)
    pi, mu, r = np.array([0.8, 0.2]), np.array([0.2, 0.8]), np.array([1.0, 0.0])
    np.testing.assert_allclose(signal(pi, mu, r), [0.04, -0.04], atol=1e-15)
    # the drift b (pi - mu) = 0.5 (0.6, -0.6) is 7.5 times the signal here, and points the way pi moved
    np.testing.assert_allclose(drift(pi, mu, 0.5), [0.3, -0.3], atol=1e-15)
    np.testing.assert_allclose(stale_reinforce(pi, mu, r, 0.5), [0.34, -0.34], atol=1e-15)
    # on-policy (mu = pi) the baseline changes nothing
    np.testing.assert_allclose(stale_reinforce(pi, pi, r, 0.0), stale_reinforce(pi, pi, r, 0.9), atol=1e-15)
    # truncated IS at c = 2 clips action 0 (pi/mu = 4): the remaining drift b (0.8 - 0.4) (e_0 - pi)
    np.testing.assert_allclose(truncated_drift(pi, mu, 0.5, 2.0), 0.5 * 0.4 * (np.array([1.0, 0.0]) - pi), atol=1e-15)
    assert not truncated_drift(pi, mu, 0.5, 4.0).any()  # c >= max ratio: no drift left
