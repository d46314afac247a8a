"""Results 8-9 (importance sampling, OPOB, B/ESS) with the real stabilizers."""

from __future__ import annotations

import numpy as np
import pytest

from theory.checks import failures, find
from theory.importance import (
    check_ess,
    check_importance_sampling,
    check_opob,
    chi2_divergence,
    opob_population,
    truncated_is_bias,
)

pytestmark = pytest.mark.theory


def test_exact_is_unbiased_and_truncated_bias_matches_closed_form():
    rows = check_importance_sampling()
    assert not failures(rows), "\n".join(failures(rows))
    # the truncation actually bites in these cases (a zero bias would make the check vacuous)
    assert "clipped actions: 0" not in find(rows, "TIS c=2: max").note


def test_truncation_bias_hand_case():
    # K = 2, pi = (0.8, 0.2), mu = (0.2, 0.8), c = 2: only action 0 is clipped, (0.8 - 0.4)_+ = 0.4
    pi, mu, adv = np.array([0.8, 0.2]), np.array([0.2, 0.8]), np.array([1.0, -1.0])
    bias = truncated_is_bias(pi, mu, adv, 2.0)
    np.testing.assert_allclose(bias, -0.4 * 1.0 * (np.array([1.0, 0.0]) - pi), atol=1e-15)
    assert not truncated_is_bias(pi, mu, adv, 4.0).any()  # c >= max ratio: unbiased


def test_opob_minimises_variance():
    rows = check_opob()
    assert not failures(rows), "\n".join(failures(rows))


def test_opob_closed_form_on_policy_hand_case():
    # mu = pi uniform over 2 actions: w = 1 and |s|^2 equal, so b* is the plain mean reward
    pi = np.array([0.5, 0.5])
    assert opob_population(pi, pi, np.array([1.0, 0.0])) == pytest.approx(0.5)


def test_inverse_ess_estimates_one_plus_chi2():
    rows = check_ess()
    assert not failures(rows), "\n".join(failures(rows))
    assert chi2_divergence(np.array([0.5, 0.5]), np.array([0.25, 0.75])) == pytest.approx(0.25 / 0.25 + 0.25 / 0.75 - 1)
