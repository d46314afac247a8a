"""The pieces behind clear errors and honest results: argument types, machine-fit estimates, the output
directory check, the collapse rule and chance levels, progress lines, typed table reading."""

from __future__ import annotations

import argparse
import io
import math

import pandas as pd
import pytest
import torch

from testbed import limits, outcomes
from testbed.config import RunConfig
from testbed.results import column_types, read_frame
from testbed.tasks import make_task
from testbed.usage import integer, number
from testbed.util.arguments import ArgumentParser
from testbed.util.errors import UsageError, one_line
from testbed.util.progress import Progress


@pytest.mark.parametrize(
    "convert, text, value",
    [(integer(1), "5", 5), (integer(1), "1e3", 1000), (integer(0), "0", 0), (integer(), "-7", -7),
     (number(0, open_lo=True), "1e-3", 1e-3), (number(0, 1), "1", 1.0), (number(), "-2.5", -2.5)],
)
def test_argument_types_accept_what_the_grammar_reads(convert, text, value):
    assert convert(text) == value and type(convert(text)) is type(value)


@pytest.mark.parametrize(
    "convert, text, message",
    [(integer(1), "0", "must be an integer >= 1, got '0'"), (integer(1), "1.5", "must be an integer >= 1, got '1.5'"),
     (integer(1), "true", "must be an integer >= 1, got 'true'"), (integer(0, 3), "4", "must be an integer in [0, 3]"),
     (integer(1), "1e400", "must be an integer >= 1"), (number(0, open_lo=True), "0", "must be a finite number > 0"),
     (number(0, open_lo=True), "inf", "must be a finite number > 0, got 'inf'"), (number(0, 1), "nan", "in [0, 1]"),
     (number(), "[1]", "must be a finite number, got '[1]'")],
)
def test_argument_types_name_what_is_allowed(convert, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        convert(text)
    assert message in str(info.value)


def test_parser_errors_are_one_line_usage_errors():
    p = ArgumentParser(prog="x")
    p.add_argument("--steps", type=integer(1))
    p.add_argument("--friction", "--frictions", dest="f", choices=("a", "b"))
    for argv, text in [(["--steps", "0"], "--steps must be an integer >= 1, got '0'"),
                       (["--frictions", "c"], "--friction: invalid choice: 'c'"),
                       (["--nope"], "unrecognized arguments: --nope"),
                       (["--steps=--"], "--steps must be an integer >= 1, got '--'"),
                       (["--steps", "-1e3"], "--steps must be an integer >= 1, got '-1e3'")]:
        with pytest.raises(UsageError) as info:
            p.parse_args(argv)
        assert str(info.value).startswith(text), (argv, str(info.value))
    assert one_line("a\n\n  b\n") == "a; b" and one_line("") == "(no message)"


# -- estimates ----------------------------------------------------------------------------------------------


def test_run_estimate_adds_up_its_parts():
    spec = RunConfig(task="bandit", steps=1000, n_actors=2, batch_size=8, log_every=10, delay="fixed:5").parse()
    shape = limits.TaskShape(context_bytes=8, horizon=1, n_actions=10, n_params=10)
    est = limits.estimate_run(spec, shape)
    assert est.parts["lag table"] == 1000 * (limits.LAG_BYTES_PER_STEP + limits.LAG_BYTES_PER_ENTRY * 2)
    sample = 8 + 1 * (8 + 4 + 8) + 8
    assert est.parts["queue"] == 6 * (8 * sample + 2 * limits.CHUNK_OVERHEAD)  # lag 5: 6 batches in flight
    assert est.parts["model"] == 10 * 4 * 6 + 8 * 1 * 10 * 4 * 4
    assert est.parts["logged rows"] == 101 * limits.ROW_BYTES
    assert est.memory == sum(est.parts.values()) and est.disk == 101 * limits.DISK_ROW_BYTES * 2 + 4096
    far = RunConfig(task="bandit", steps=100, delay="fixed:1000000").parse()
    assert "100 batches of" in limits.estimate_run(far, shape).why["queue"]  # lags are clamped to the step


def test_task_shape_counts_parameters_without_allocating():
    shape = limits.task_shape(make_task("mnist", hidden=10**7))  # 7.9e9 parameters: 32 GB if allocated
    assert shape.n_params == 784 * 10**7 + 10**7 + 10 * 10**7 + 10
    assert (shape.context_bytes, shape.horizon, shape.n_actions) == (8, 1, 10)


def test_check_fits_refuses_with_the_largest_part_and_the_workers():
    small, big = limits.Estimate({"queue": 10}), limits.Estimate({"lag table": 600, "queue": 50}, {"lag table": "why"})
    assert limits.check_fits([small, big], 1, 2, 0, "/", memory=700, disk=10)[0] == 650
    with pytest.raises(UsageError) as info:
        limits.check_fits([small, big, big], 2, 3, 0, "/", memory=700, disk=10)
    assert str(info.value) == ("this work needs at least 1.3 KiB of memory (2 loops at once, --workers 2) but 700 bytes "
                               "is available; the largest part is the lag table (why: 600 bytes); try fewer --steps "
                               "or --n-actors")
    with pytest.raises(UsageError, match=r"the results of 3 run\(s\) need about 2\.0 KiB on disk under '/' but 1\.0 KiB"):
        limits.check_fits([small], 1, 3, 2048, "/", memory=700, disk=1024)


def test_output_dir_check_creates_then_cleans_up(tmp_path):
    out = tmp_path / "a" / "b"
    assert limits.check_output_dir(out, create=False) == [] and not (tmp_path / "a").exists()
    made = limits.check_output_dir(out, create=True)
    assert made == [tmp_path / "a", out] and out.is_dir() and list(out.iterdir()) == []
    limits.remove_created(made)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("x")
    for bad, text in [(tmp_path / "f", "names an existing file"), (tmp_path / "f" / "g", "is a file, not a directory"),
                      ("", "must be a directory path"), ("a\0b", "must be a directory path")]:
        with pytest.raises(UsageError, match=text):
            limits.check_output_dir(bad, create=True)


def test_fmt_bytes():
    assert [limits.fmt_bytes(n) for n in (0, 1023, 1536, 5 * 2**30, 2**60)] == [
        "0 bytes", "1023 bytes", "1.5 KiB", "5.0 GiB", "1024.0 PiB"]


# -- outcomes -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "final, chance, entropy, expected",
    [(0.10, 0.1, 0.0, True), (0.19, 0.1, 0.05, True), (0.191, 0.1, 0.0, False), (0.1, 0.1, 0.051, False),
     (0.0, 0.5, 0.0, True), (0.9, 0.5, 0.0, False), (math.nan, 0.1, 0.0, False), (0.1, None, 0.0, False),
     (0.1, 0.1, None, False)],
)
def test_collapse_rule(final, chance, entropy, expected):
    assert outcomes.collapsed(final, chance, entropy) is expected


@pytest.mark.parametrize(
    "task, options, chance",
    [("mnist", {}, 0.1), ("bandit", {}, 0.5), ("bandit", {"means": [0.2, 0.4]}, 0.3), ("contextual_bandit", {"K": 4}, 0.25)],
)
def test_chance_is_the_uniform_policy_reward(task, options, chance):
    assert outcomes.chance_reward(make_task(task, **options)) == pytest.approx(chance, abs=1e-6)


def test_chance_on_token_reversal_is_near_m_to_the_minus_h():
    assert outcomes.chance_reward(make_task("token_reversal", H=3, M=2)) == pytest.approx(1 / 8, abs=0.04)


def test_greedy_entropy_is_1_for_uniform_and_0_for_saturated():
    task = make_task("contextual_bandit", N=3, K=4)
    policy = outcomes._zero_policy(task)
    x = task.sample_contexts(16, torch.Generator().manual_seed(0), "test").unsqueeze(0)
    assert outcomes.greedy_entropy(task, policy, x) == pytest.approx(1.0)
    with torch.no_grad():
        for p in policy.parameters():
            p[..., 0] = 1e4  # every context: all probability on action 0
    assert outcomes.greedy_entropy(task, policy, x) == 0.0


# -- progress -------------------------------------------------------------------------------------------------


def test_progress_writes_plain_lines_off_a_terminal():
    stream = io.StringIO()
    bar = Progress(4, initial=1, stream=stream, interval=0.0)
    bar.update(1)
    bar.update(2)
    bar.close()
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue() and len(lines) == 2
    assert lines[0].startswith("runs: 2/4 (50%), 0:00:00 elapsed, about 0:00:00 left")
    assert lines[1] == "runs: 4/4 (100%), 0:00:00 elapsed"
    quiet, slow = io.StringIO(), io.StringIO()
    Progress(3, stream=quiet, enabled=False).update(3)
    bar = Progress(3, stream=slow, interval=3600)
    bar.update(1)
    bar.close()
    assert quiet.getvalue() == "" and slow.getvalue().splitlines() == ["runs: 1/3 (33%), 0:00:00 elapsed, about 0:00:00 left"]


# -- typed tables ---------------------------------------------------------------------------------------------


def test_text_columns_are_read_as_text(tmp_path):
    path = tmp_path / "t.csv"
    pd.DataFrame({"run_id": ["1e5", "007", "nan", ""], "status": ["ok", "ok", "NA", "ok"], "seed": [0, 1, 2, 3],
                  "lr": [1e-3, 1, 2, 3], "task.variant": ["1", "copy", "2e3", "None"], "task.H": [1, 2, 3, 4],
                  "test_error": [0.5, float("nan"), 0.25, 1.0]}).to_csv(path, index=False)
    table = read_frame(path)
    assert table["run_id"].tolist()[:3] == ["1e5", "007", "nan"] and pd.isna(table["run_id"].iloc[3])
    assert table["status"].tolist() == ["ok", "ok", "NA", "ok"] and table["task.variant"].tolist() == ["1", "copy", "2e3",
                                                                                                       "None"]
    assert str(table["seed"].dtype) == "Int64" and table["lr"].dtype == float and table["task.H"].dtype.kind == "i"
    assert table["test_error"].isna().tolist() == [False, True, False, False]
    assert set(column_types(["run_id", "recipe", "steps", "lr", "task.data_dir", "test_error"])) == {
        "run_id", "recipe", "steps", "lr", "task.data_dir"}


def test_counting_a_warm_started_policy_computes_and_caches_nothing():
    """A policy whose construction trains (token reversal's rare_p0 warm start) is not counted, and the attempt
    leaves no meta-device tensor in any cache: a real run afterwards works."""
    from testbed.runner import run

    assert limits.task_shape(make_task("token_reversal", H=3, M=2, rare_p0=0.1)).n_params is None
    result = run(RunConfig(task="token_reversal", steps=2, batch_size=20, task_args={"H": 3, "M": 3}))
    assert result.status == "ok" and len(result.rows) == 1
