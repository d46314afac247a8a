"""The figures' seed accounting (figures/style.py): a seed a later look did not train is NaN and must not count."""

from __future__ import annotations

import math

import numpy as np

from figures.style import seed_note
from testbed.util.stats import mean_se_finite as mean_se


def test_mean_se_counts_only_the_trained_seeds():
    v = [0.1, 0.2, 0.3, 0.4, math.nan, math.nan, math.nan, math.nan]
    mean, se = mean_se(v)
    assert mean == np.float64(0.25)
    assert math.isclose(se, np.std([0.1, 0.2, 0.3, 0.4], ddof=1) / 2.0)  # sqrt(4), not sqrt(8)
    assert mean_se([0.3, math.nan]) == (0.3, 0.0)
    mean, se = mean_se([math.nan])
    assert math.isnan(mean) and se == 0.0
    rows = np.array([[0.1, 1.0, math.nan], [0.3, math.nan, math.nan], [math.nan, math.nan, math.nan]])  # [seeds, x]
    mean, se = mean_se(rows)  # per column, as the bands draw it
    assert np.allclose(mean[:2], [0.2, 1.0]) and math.isnan(mean[2])
    assert np.allclose(se, [np.std([0.1, 0.3], ddof=1) / math.sqrt(2), 0.0, 0.0])


def test_seed_note_names_the_series_a_sequential_design_extended():
    first_look = np.r_[np.ones(5), np.full(10, np.nan)]
    staged = np.ones(15)
    assert seed_note(5, {"pg": first_look, "is": first_look[:, None]}) == "5 seeds"
    note = seed_note(5, {"pg": first_look, "grpo": staged, "decoupled_ppo": np.stack([staged, first_look], axis=1)})
    assert note.startswith("5 seeds (15 for grpo, decoupled_ppo,")
    assert "pg" not in note
