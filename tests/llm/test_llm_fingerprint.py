"""``python -m llm_scale fingerprint`` on the tiny model: schema, bookkeeping and closed-form cases."""

from __future__ import annotations

import json
import math

import pytest

from llm_scale.cli import main
from testbed.stabilizers.fingerprint import Fingerprint

FAST = ["--model", "tiny", "--prompts", "16", "--group-size", "4", "--sizes", "4", "8", "16", "32",
        "--update-prompts", "4", "--sketch-dim", "4096"]  # fmt: skip


def test_zero_advantage_batches_give_nan_cosines_and_unchanged_weights(tmp_path, capsys):
    # products of six-digit numbers have 11 or 12 digits, beyond the 6-token budget: every reward is 0, every
    # gradient is zero, so no cosine is defined and the updates leave the weights (and log-ratios) as they were
    out = tmp_path / "fp"
    task = "arithmetic(min_operand=100000, max_operand=999999, ops='*')"
    assert main(["fingerprint", *FAST, "--task", task, "--lags", "0", "2", "--out", str(out)]) == 0
    f = Fingerprint.load(str(out / "tiny__arithmetic.json"))
    assert f.zero_advantage_frac == 1.0
    assert all(c.pairs == 0 and math.isnan(c.mean) for c in f.cosine_by_minibatch)
    assert math.isnan(f.noise_scale)
    lag0, lag2 = f.staleness
    assert (lag0.lag, lag2.lag) == (0, 2)
    assert lag0.ess_seq == pytest.approx(1.0, abs=1e-6) and abs(lag0.logratio_max) < 1e-5  # sampler == learner
    assert lag2.logratio_max == lag0.logratio_max and lag2.ess_seq == lag0.ess_seq
    assert (out / "tiny__arithmetic.png").stat().st_size > 10_000
    assert f.command.startswith("python -m llm_scale fingerprint --model tiny") and f.wall_s > 0
    assert "B_noise" in capsys.readouterr().out


def test_updates_make_the_behaviour_stale(tmp_path):
    out = tmp_path / "fp"
    args = [*FAST, "--task", "copy", "--update-prompts", "16", "--lr", "3e-3", "--lags", "0", "1", "3",
            "--extra-lrs", "3e-2", "--no-after-updates", "--out", str(out)]  # fmt: skip
    assert main(["fingerprint", *args]) == 0
    f = Fingerprint.load(str(out / "tiny__copy.json"))
    assert f.zero_advantage_frac < 1.0  # some group has a reward spread, so updates move the policy
    ess = [s.ess_seq for s in f.staleness]
    assert ess[0] == pytest.approx(1.0, abs=1e-6) and ess[2] < ess[0] and ess[1] < ess[0]
    assert f.staleness[2].clip_frac > 0
    for c in f.cosine_by_minibatch:  # independent pairs of disjoint minibatches: 64 sequences // (2 m)
        assert c.pairs <= 64 // (2 * c.m)
    by_lr = f.extra["staleness_by_lr"]["0.03"]
    assert [r["lag"] for r in by_lr] == [0, 1, 3] and by_lr[0]["ess_seq"] == pytest.approx(1.0, abs=1e-6)
    assert f.extra["after_updates"] is None
    assert json.loads((out / "tiny__copy.json").read_text())["extra"]["lr"] == 3e-3


@pytest.mark.parametrize(("args", "message"), [
    (["--sizes", "6"], "--sizes must be positive multiples of --group-size 4"),
    (["--sizes", "64"], "--sizes [64] need more than --prompts x --group-size = 64 sequences"),
    (["--lags", "-1"], "--lags must be integers in 0..1000"),
    (["--extra-lrs", "2"], "--lr and --extra-lrs must be in (0, 1), got 2"),
    (["--task", "nosuch"], "unknown task 'nosuch'"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, args, message):
    assert main(["fingerprint", *FAST, "--task", "copy", *args, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err
    assert not (tmp_path / "o").exists()
