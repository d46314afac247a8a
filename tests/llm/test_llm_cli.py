"""The command line as a user meets it: bad input, failures, divergence, kills, full disks, what is printed.

Bad input: one line on stderr naming the bad value and what is allowed, exit code 2, and nothing
written (the output directory is not even created). `BAD_INPUTS` is table-driven; the hypothesis
test feeds junk to every option of ``train``.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llm_scale import cli
from llm_scale.cli import main
from llm_scale.config import FLOAT_RANGES, INT_RANGES, TrainConfig, _choices

FAST = ["--steps", "6", "--prompts-per-step", "4", "--group-size", "4", "--tensorboard", "off", "--no-save-final"]


def _call(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def _existing_file(tmp: Path) -> str:
    path = tmp / "a_file.txt"
    path.write_text("not a directory")
    return str(path)


def _existing_run(tmp: Path) -> str:
    path = tmp / "old_run"
    path.mkdir(exist_ok=True)
    (path / "metrics.csv").write_text("step\n0\n")
    return str(path)


# (arguments, a fragment of the one-line message); "{file}" / "{run}" become paths made by the test.
BAD_INPUTS = [
    (["--task", "arithmetic(min_operand=abc)"], "min_operand must be an integer, got str"),
    (["--task", "arithmetic(min_operand=5, max_operand=2)"], "need 0 <= min_operand <= max_operand"),
    (["--task", "copy(digits=0)"], "copy: digits must be in 1..12"),
    (["--task", "nosuch"], "unknown task 'nosuch'; allowed: copy, arithmetic, countdown, gsm8k"),
    (["--task", "arithmetic(bogus=1)"], "unknown parameter(s) bogus for task 'arithmetic'"),
    (["--task", "arithmetic((("], "unbalanced parentheses"),
    (["--recipe", "nosuch"], "unknown recipe or component 'nosuch'; allowed:"),
    (["--recipe", "tis(c=abc)"], "tis"),
    (["--tiny.num-heads", "5"], "--tiny.hidden-size 64 must be a multiple of 2 x --tiny.num-heads (10)"),
    (["--tiny.hidden-size", "0"], "--tiny.hidden-size must be an integer in [2, 65536], got 0"),
    (["--tiny.num-layers", "x"], "Error parsing --tiny.num-layers"),
    (["--tiny.max-positions", "8", "--max-new-tokens", "16"], "exceeds the model's context of 8 positions"),
    (["--device", "cuda"], "cannot use CUDA; allowed here: cpu"),
    (["--device", "gpu0"], "--device must be auto, cpu, cuda or cuda:N, got 'gpu0'"),
    (["--mode", "process", "--rollout-device", "cuda:1"], "cannot use CUDA"),
    (["--out", "{file}"], "is an existing file; give a directory"),
    (["--out", "{run}"], "already holds a run; continue it with --resume auto"),
    (["--out", "/proc/llm_scale_out/run"], "cannot write in '/proc'"),
    (["--lr", "inf"], "--lr must be a finite number > 0, got inf"),
    (["--lr", "nan"], "--lr must be a finite number > 0, got nan"),
    (["--lr", "0"], "--lr must be a finite number > 0, got 0.0"),
    (["--lr", "-1e-3"], "--lr must be a finite number > 0"),
    (["--scorecard", "/no/such/card.json"], "--scorecard '/no/such/card.json' does not exist"),
    (["--group-size", "1"], "--group-size 1 makes every advantage of recipe 'pg' zero"),
    (["--group-size", "1", "--recipe", "opob"], "its 'opob' advantage normalises within prompt groups"),
    (["--steps", "1000000000000"], "--steps must be an integer in [1, 1000000000], got 1000000000000"),
    (["--steps", "abc"], "Error parsing --steps: invalid literal for int()"),
    (["--steps", "0"], "--steps must be an integer in [1, 1000000000], got 0"),
    (["--agg", "nope"], "invalid choice 'nope' for argument '--agg'"),
    (["--bogus", "1"], "Unrecognized options: --bogus"),
    (["--temperature", "0"], "--temperature must be a finite number > 0"),
    (["--top-p", "0"], "--top-p must be a finite number in (0, 1]"),
    (["--top-p", "1.5"], "--top-p must be a finite number in (0, 1], got 1.5"),
    (["--top-k", "-1"], "--top-k must be an integer in [0,"),
    (["--minibatches", "3"], "--minibatches 3 must divide the batch size 16"),
    (["--warmup-steps", "10"], "--warmup-steps 10 must be below --steps 6"),
    (["--stop-after", "7"], "--stop-after 7 is beyond --steps 6"),
    (["--min-lr-ratio", "0.5"], "--min-lr-ratio applies to --lr-schedule linear or cosine"),
    (["--resume", "/no/such/ckpt"], "is not a checkpoint directory"),
    (["--task", "gsm8k", "--data", "/no/such.jsonl"], "--data '/no/such.jsonl' does not exist"),
    (["--mode", "sync", "--max-staleness", "2"], "--mode sync generates every batch with the current weights"),
    (["--lag-policy", "fixed", "--partial-chunk", "2"], "--partial-chunk needs asynchronous rollouts"),
    (["--max-staleness", "-1"], "--max-staleness must be an integer in [0, 100000], got -1"),
    (["--model", "./no/such/dir"], "model path './no/such/dir' does not exist"),
    (["--model", "random:nosuch"], "unknown architecture random:nosuch"),
    (["--betas", "0.9", "1.0"], "--betas must be a finite number in [0, 1)"),
    (["--kl-coef", "-0.1"], "--kl-coef must be a finite number >= 0"),
    (["--kl-estimator", "k2"], "invalid choice 'k2'"),
    (["--seed", "-3"], "--seed must be an integer in [0,"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be an integer in [1, 1000000], got 0"),
    (["--micro-batch-size", "1", "--tiny.hidden-size", "64", "--task", "copy(digits=13)"], "copy: digits must be in 1..12"),
]


@pytest.mark.parametrize("args, message", BAD_INPUTS, ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_gives_one_line_exit_2_and_writes_nothing(tmp_path, args, message):
    args = [a.replace("{file}", _existing_file(tmp_path)).replace("{run}", _existing_run(tmp_path)) for a in args]
    out = tmp_path / "new_run"
    argv = ["train", "--out", str(out), *FAST, *args]  # a later --out in args wins
    before = sorted(p.name for p in tmp_path.iterdir())
    code, stdout, stderr = _call(argv)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert message in lines[0]
    assert "Traceback" not in stderr and stdout == ""
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == before


def test_device_cuda_on_a_cpu_only_torch_names_the_build(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    code, _, err = _call(["train", "--device", "cuda:0", "--out", str(tmp_path / "r")])
    assert code == 2 and f"this torch ({torch.__version__}, a CPU-only build) cannot use CUDA" in err


def test_other_commands_reject_junk(tmp_path):
    assert _call(["nosuch"])[0] == 2
    assert _call(["recipes", "extra"])[0] == 2
    assert _call(["scorecard"])[0] == 2
    code, _, err = _call(["scorecard", "dg", "--scorecard", str(tmp_path / "missing.json")])
    assert code == 2 and err.count("\n") == 1 and "does not exist" in err
    code, _, err = _call(["scorecard", "nosuch"])
    assert code == 2 and "unknown recipe or component 'nosuch'" in err


# -- property-based: junk for every option -----------------------------------------------------------
_WORDS = st.text(alphabet="qwzjxvk!@#%^&", min_size=1, max_size=8)


def _junk_for(name: str) -> st.SearchStrategy[list[str]]:
    """Values no field named ``name`` accepts (as command-line tokens)."""
    flag = "--" + name.replace("_", "-")
    if name in INT_RANGES:
        low, high = INT_RANGES[name]
        numbers = st.one_of(st.integers(max_value=low - 1), st.integers(min_value=high + 1, max_value=high * 10 + 10))
        return st.one_of(_WORDS, st.floats(allow_nan=False).map(lambda x: f"{x}e0"), numbers.map(str)).map(lambda v: [flag, v])
    if name in FLOAT_RANGES or name == "lr":
        low, _, high = FLOAT_RANGES.get(name, (0.0, False, float("inf")))
        bad = st.one_of(st.sampled_from(["nan", "inf", "-inf", "1e999"]), st.floats(max_value=low - 1e-3, allow_infinity=False).map(repr))
        if high < float("inf"):
            bad = st.one_of(bad, st.floats(min_value=high + 1e-3, allow_infinity=False).map(repr))
        return st.one_of(_WORDS, bad).map(lambda v: [flag, v])
    if name in ("mode", "lag_policy", "lr_schedule", "weights_via", "agg", "kl_estimator", "nan_policy", "dtype", "autocast",
                "prompt_style", "tensorboard", "minibatch_split"):  # fmt: skip
        return _WORDS.filter(lambda v: v not in _choices(name)).map(lambda v: [flag, v])
    if name in ("proximal", "grad_cosine", "grad_split_half", "grad_checkpointing", "progress", "save_final", "dynamic_sampling"):
        return _WORDS.map(lambda v: [flag, v])  # a flag takes no value: the word is an unrecognized option
    if name == "max_new_tokens":
        return st.one_of(_WORDS, st.integers(max_value=0).map(str)).map(lambda v: [flag, v])
    if name == "betas":
        return st.one_of(st.tuples(st.sampled_from(["1.0", "-0.5", "nan", "x"]), st.just("0.9")), st.tuples(st.just("0.9"))).map(lambda t: [flag, *t])
    if name in ("model", "data", "scorecard", "resume"):
        return _WORDS.map(lambda v: [flag, f"./no/such/{v}"])
    if name in ("recipe", "task"):
        return _WORDS.map(lambda v: [flag, f"nosuch{v}"])
    if name in ("device", "rollout_device"):
        return _WORDS.map(lambda v: [flag, v])
    if name == "out":
        return st.just([flag, "{file}"])
    if name == "tiny":
        sub = st.sampled_from(["hidden-size", "num-layers", "num-heads", "intermediate-size", "max-positions"])
        return st.tuples(sub, st.one_of(_WORDS, st.integers(max_value=0).map(str))).map(lambda t: [f"--tiny.{t[0]}", t[1]])
    raise AssertionError(f"no junk strategy for option {name!r}: add one")


OPTIONS = [f.name for f in __import__("dataclasses").fields(TrainConfig)]
JUNK = st.sampled_from(OPTIONS).flatmap(_junk_for)


def test_every_option_has_a_junk_strategy():
    for name in OPTIONS:
        _junk_for(name)  # raises for an option added without one


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(junk=JUNK)
def test_junk_in_any_option_exits_2_with_one_line_and_writes_nothing(junk):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        junk = [a.replace("{file}", _existing_file(tmp)) for a in junk]
        out = tmp / "run"
        code, stdout, stderr = _call(["train", "--out", str(out), *FAST, *junk])
        assert code == 2, (junk, stderr)
        assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("error: "), (junk, stderr)
        assert "Traceback" not in stderr and stdout == ""
        assert not out.exists()


# -- what a run prints and writes --------------------------------------------------------------------
def test_summary_is_readable_and_progress_is_periodic_lines(tmp_path):
    out = tmp_path / "run"
    code, stdout, stderr = _call(["train", "--out", str(out), "--steps", "20", "--prompts-per-step", "4", "--group-size",
                                  "4", "--tensorboard", "off", "--eval-every", "10", "--eval-size", "8"])  # fmt: skip
    assert code == 0, stderr
    rows = pd.read_csv(out / "metrics.csv")
    assert stdout.startswith("finished: 20/20 updates in ")
    first, last = rows["reward_mean"][:10].mean(), rows["reward_mean"][-10:].mean()
    assert f"reward     {first:.3f} (mean of the first 10 updates) -> {last:.3f} (last 10)" in stdout
    evals = pd.read_csv(out / "eval.csv")
    assert list(evals["version"]) == [0, 10, 20]
    assert f"eval       {evals['eval_reward'][0]:.3f} at version 0 -> {evals['eval_reward'][2]:.3f} at version 20" in stdout
    assert "{" not in stdout  # not a JSON dump
    progress = [line for line in stderr.splitlines() if line.startswith("step ")]
    assert [int(line.split()[1].split("/")[0]) for line in progress] == list(range(2, 21, 2))  # every 10%
    assert "\r" not in stderr


def test_files_get_the_users_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        assert _call(["train", "--out", str(out), *FAST[:-1], "--checkpoint-every", "3", "--eval-every", "3"])[0] == 0
    finally:
        os.umask(old)
    paths = [p for p in out.rglob("*")]
    assert len(paths) > 10
    for p in paths:
        mode = p.stat().st_mode & 0o777
        assert mode == (0o755 if p.is_dir() else 0o644), (p, oct(mode))


def test_an_internal_failure_exits_1_with_a_short_message_and_a_traceback_log(tmp_path, monkeypatch):
    from llm_scale.learner import Learner

    real = Learner.update

    def update(self, batch, step):
        if step == 2:
            raise RuntimeError("boom in the learner")
        return real(self, batch, step)

    monkeypatch.setattr(Learner, "update", update)
    out = tmp_path / "run"
    code, _stdout, stderr = _call(["train", "--out", str(out), *FAST])
    assert code == 1
    error = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert error == [f"error: training failed at update 2: RuntimeError: boom in the learner (traceback: {out / 'error.log'})"]
    assert "Traceback" not in stderr
    log = (out / "error.log").read_text()
    assert log.startswith("Traceback") and "boom in the learner" in log and "def update" not in stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"
    assert len(pd.read_csv(out / "metrics.csv")) == 2  # the two finished updates are kept


def test_a_huge_learning_rate_is_recorded_as_diverged_not_crashed(tmp_path):
    """lr 1e30 at eta 0: the rollout policy's logits overflow; the run stops with status diverged (exit 3)."""
    out = tmp_path / "run"
    code, stdout, stderr = _call(["train", "--out", str(out), *FAST, "--task", "arithmetic", "--lr", "1e30", "--steps", "30"])
    assert code == 3, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and "non-finite logits" in summary["reason"]
    assert stdout.startswith(f"DIVERGED after {summary['steps']}/30 updates: the rollout policy")
    assert "Traceback" not in stderr and not (out / "error.log").exists()


def test_a_full_disk_is_refused_before_training_with_an_estimate(tmp_path, monkeypatch):
    import shutil

    from llm_scale import config

    real = shutil.disk_usage
    monkeypatch.setattr(config.shutil, "disk_usage", lambda p: real(p)._replace(free=100_000))
    out = tmp_path / "run"
    code, _, stderr = _call(["train", "--out", str(out), *FAST, "--checkpoint-every", "2"])
    assert code == 2 and not out.exists()
    assert "the disk holding it has 0 MB free; this run writes up to about" in stderr


def test_a_checkpoint_that_cannot_be_written_leaves_no_partial_directory(tmp_path, monkeypatch):
    import errno

    import safetensors.torch

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_model", full)
    out = tmp_path / "run"
    code, _, stderr = _call(["train", "--out", str(out), *FAST, "--checkpoint-every", "2"])
    assert code == 1
    assert "cannot write checkpoint" in stderr and "No space left on device" in stderr
    assert list((out / "checkpoints").iterdir()) == []  # neither step_0000002 nor its .tmp_ directory


def test_resume_auto_without_a_checkpoint_starts_fresh(tmp_path):
    out = tmp_path / "run"
    code, stdout, _ = _call(["train", "--out", str(out), *FAST, "--resume", "auto"])
    assert code == 0 and stdout.startswith("finished: 6/6")


@pytest.mark.integration
def test_sigkill_during_training_loses_and_duplicates_nothing_on_resume_auto(tmp_path):
    """Kill -9 a checkpointing run mid-way, resume with --resume auto: the same rows and weights as an uninterrupted run."""
    args = [*FAST[:-1], "--steps", "40", "--max-staleness", "2", "--lag-policy", "fixed", "--task", "arithmetic",
            "--checkpoint-every", "4", "--seed", "5", "--no-progress"]  # fmt: skip
    full = tmp_path / "full"
    assert _call(["train", "--out", str(full), *args])[0] == 0
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(cli.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "llm_scale", "train", "--out", str(out), *args], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    latest = out / "checkpoints" / "latest"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if latest.is_file() and latest.read_text().strip() >= "step_0000008":
            break
        time.sleep(0.005)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "summary.json").exists()
    with (out / "metrics.csv").open() as handle:
        killed_rows = len(list(csv.DictReader(handle)))
    code, _stdout, stderr = _call(["train", "--out", str(out), *args, "--resume", "auto"])
    assert code == 0, stderr
    a, b = pd.read_csv(full / "metrics.csv"), pd.read_csv(out / "metrics.csv")
    assert list(b["step"]) == list(range(40)) and killed_rows >= 8  # nothing lost, nothing twice
    cols = ["loss", "reward_mean", "grad_norm_raw", "lag_mean", "ratio_max"]
    pd.testing.assert_frame_equal(a[cols], b[cols], check_exact=True)
    from safetensors.torch import load_file

    ckpt_a = load_file(str(full / "checkpoints" / "step_0000040" / "model.safetensors"))
    ckpt_b = load_file(str(out / "checkpoints" / "step_0000040" / "model.safetensors"))
    assert all(torch.equal(ckpt_a[k], ckpt_b[k]) for k in ckpt_a)


def _children(pid: int) -> list[int]:
    kids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split() if (task / "children").exists() else []
        kids += [int(k) for k in text]
    return kids


def _alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


@pytest.mark.integration
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="needs Linux /proc")
def test_sigkill_of_the_trainer_leaves_no_orphan_rollout_process(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(cli.__file__).parents[1]), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "llm_scale", "train", "--out", str(out), "--mode", "process",
                             "--max-staleness", "2", "--steps", "100000", "--tensorboard", "off", "--no-progress"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "metrics.csv").is_file() and len((out / "metrics.csv").read_text().splitlines()) > 3:
            break
        time.sleep(0.05)
    kids = _children(proc.pid)  # the spawned rollout process (and multiprocessing's resource tracker)
    assert proc.poll() is None and kids, "the run should be training with its rollout process"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.05)
    assert not any(_alive(k) for k in kids)


@pytest.mark.parametrize("checkpoint", [True, False])
def test_an_interrupted_run_says_whether_a_rerun_resumes_or_starts_over(tmp_path, monkeypatch, capsys, checkpoint):
    from llm_scale.trainer import Trainer

    def interrupted(self):
        if checkpoint:
            (self.out / "checkpoints").mkdir(parents=True)
            (self.out / "checkpoints" / "latest").write_text("step_1\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "run", interrupted)
    argv = ["train", "--model", "tiny", "--task", "copy", "--steps", "2", "--out", str(tmp_path / "run"),
            "--tensorboard", "off", "--checkpoint-every", "1" if checkpoint else "0"]  # fmt: skip
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert ("--resume auto" in err) == checkpoint and ("starts over" in err) != checkpoint
