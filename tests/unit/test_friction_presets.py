"""Token-reversal friction levels and the frozen preset: the documented definitions, the calibration files
generated from them, and the frictions' behaviour on constructed cases, in numbers."""

import importlib.util
import math
from pathlib import Path

import pytest
import torch

from testbed.config import RunConfig
from testbed.frictions import (
    PANEL,
    TOKEN_REVERSAL_LEVELS,
    TOKEN_REVERSAL_PRESET,
    flipped_reward_share,
    parse_frictions,
    token_reversal_preset,
    token_reversal_setting,
)
from testbed.tasks.token_reversal import TokenReversal, discovery_probability

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION = ROOT / "sweeps" / "calibration"


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, CALIBRATION / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("level", sorted(TOKEN_REVERSAL_LEVELS))
def test_every_panel_entry_of_every_level_is_a_valid_run(level):
    for which in PANEL:
        s = token_reversal_setting(TOKEN_REVERSAL_LEVELS[level], which)
        cfg = RunConfig(task="token_reversal", recipe="pg", delay=s["delay"], frictions=s["frictions"],
                        task_args={"H": 10, "M": 2, **s["task_args"]})
        spec = cfg.parse()
        assert spec.frictions.none == (which in ("none", "staleness", "rare"))


def test_panel_entries_by_hand():
    g1 = TOKEN_REVERSAL_LEVELS["G1"]
    assert token_reversal_setting(g1, "none") == {"delay": "sync", "frictions": "none", "task_args": {"partial_credit": True}}
    assert token_reversal_setting(g1, "staleness")["delay"] == "uniform:2"
    assert token_reversal_setting(g1, "rare") == {"delay": "sync", "frictions": "none",
                                                  "task_args": {"partial_credit": True, "min_correct": 8}}
    assert token_reversal_setting(TOKEN_REVERSAL_LEVELS["L1"], "rare")["task_args"] == {"partial_credit": False,
                                                                                       "min_correct": 8}
    both = token_reversal_setting(g1, "all")
    assert both["delay"] == "uniform:2" and both["task_args"] == {"partial_credit": True, "min_correct": 8}
    fr = parse_frictions(both["frictions"])
    assert (fr.bug.kind, fr.bug.temp, fr.bug.frac, fr.bug.sticky) == ("temperature", 2.0, 0.2, True)
    assert (fr.reward.kind, fr.reward.p) == ("flip", 0.01)
    l3 = token_reversal_setting(TOKEN_REVERSAL_LEVELS["L3"], "all")  # the definitions used before calibration
    assert l3["task_args"] == {"partial_credit": False} and l3["delay"] == "uniform:8"
    with pytest.raises(ValueError, match="panel entry must be one of"):
        token_reversal_setting(g1, "everything")


def test_calibration_files_are_generated_from_the_levels():
    make = load_script("make_sweeps")
    for name, text in {**make.stage_files(), **make.graded_files(), **make.weaker_files(), **make.fraction_files()}.items():
        if name.startswith("stage2_L"):  # planned, not run (RULE.md, amendment): not kept as files
            continue
        assert (CALIBRATION / f"{name}.toml").read_text() == text, name


def test_flipped_reward_share_closed_form_and_by_simulation():
    # exact-only reward at H = 10 with 10% flips: 99.1% of the rewarded episodes are flips at the start
    assert flipped_reward_share(2.0**-10, 0.1) == pytest.approx(0.999023 * 0.1 / (0.999023 * 0.1 + 0.000977 * 0.9), rel=1e-4)
    assert flipped_reward_share(2.0**-10, 0.1) > 0.99
    s = discovery_probability(10, 2, 8)
    assert flipped_reward_share(s, 0.01) == pytest.approx((1 - s) * 0.01 / ((1 - s) * 0.01 + s * 0.99))
    assert math.isnan(flipped_reward_share(0.0, 0.0))
    n = 200_000
    gen = torch.Generator().manual_seed(0)
    truth = (torch.rand(n, generator=gen) < s).float()
    shown = parse_frictions("reward(p=0.01, kind=flip)").corrupt_rewards(truth, gen)
    flips = ((shown == 1) & (truth == 0)).sum() / (shown == 1).sum()
    p = flipped_reward_share(s, 0.01)
    assert abs(float(flips) - p) <= 5 * math.sqrt(p * (1 - p) / float((shown == 1).sum()))


def test_graded_rare_reward_corrupted_by_a_flip_pays_the_complement():
    task = TokenReversal(H=4, min_correct=3, partial_credit=True)
    x = torch.tensor([[0, 1, 1, 0]] * 3)
    a = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1], [1, 0, 0, 1]])
    r = task.reward(x, a)
    assert r.tolist() == [1.0, 0.75, 0.0]
    shown = parse_frictions("reward(p=1.0, kind=flip)").corrupt_rewards(r, torch.Generator().manual_seed(0))
    assert shown.tolist() == [0.0, 0.25, 1.0]


def test_sticky_bug_of_the_levels_hits_exactly_two_of_ten_actors_for_the_whole_run():
    for level in ("L1", "L2", "L3"):
        fr = parse_frictions(TOKEN_REVERSAL_LEVELS[level]["bugs"])
        for seed in range(5):
            mask = fr.buggy_actors(10, torch.Generator().manual_seed(seed))
            assert int(mask.sum()) == 2
            gen = torch.Generator().manual_seed(seed)
            assert all(fr.is_buggy(i, mask, gen) == bool(mask[i]) for i in range(10))


def test_l2_random_bug_replaces_a_quarter_of_a_buggy_actors_tokens():
    fr = parse_frictions(TOKEN_REVERSAL_LEVELS["L2"]["bugs"])
    d = fr.draws(20_000, 10, 2, True, torch.Generator().manual_seed(0))
    rate = float(d["flip"].float().mean())
    assert abs(rate - 0.25) <= 5 * math.sqrt(0.25 * 0.75 / 200_000)
    assert "flip" not in fr.draws(10, 10, 2, False, torch.Generator().manual_seed(0))  # clean actors untouched


def test_the_frozen_preset_is_the_documented_choice_of_the_calibration_table():
    """The preset in the code, the choice written in TABLE.md and the definitions they stand for agree."""
    table = (CALIBRATION / "TABLE.md").read_text()
    chosen = [line for line in table.splitlines() if line.startswith("**Choice (rule 3):")]
    assert len(chosen) == 1 and f"_{TOKEN_REVERSAL_PRESET}_all**" in chosen[0]
    level = TOKEN_REVERSAL_LEVELS[TOKEN_REVERSAL_PRESET]
    for which in PANEL:
        assert token_reversal_preset(which) == token_reversal_setting(level, which)
    both = token_reversal_preset("all")
    task = TokenReversal(H=10, M=2, **both["task_args"])
    assert task.min_correct == level["min_correct"] and task.partial_credit == bool(level.get("graded", False))
    assert both["delay"] == level["staleness"]
    assert both["frictions"] == f"{level['bugs']}+{level['corruption']}"
