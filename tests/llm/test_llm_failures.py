"""A disk that fills during a run: one line on stderr, a non-empty error.log, status 'failed' in summary.json."""

from __future__ import annotations

import errno
import json
import pathlib

import pytest

from llm_scale import cli, metrics, trainer

pytestmark = pytest.mark.integration


def test_a_disk_that_fills_mid_run_gives_one_line_and_a_non_empty_error_log(tmp_path, monkeypatch, capsys):
    """Writes fail with ENOSPC from the third CSV row on, until the run's reserve is freed (a full disk)."""
    out = tmp_path / "run"
    rows = {"n": 0}
    log_row = metrics.CsvLog.log

    def full() -> bool:
        return (out / trainer.RESERVE_NAME).exists() and rows["n"] >= 2

    def csv_log(self, row):
        if full():
            raise OSError(errno.ENOSPC, "No space left on device")
        rows["n"] += 1
        return log_row(self, row)

    write_text = pathlib.Path.write_text

    def path_write_text(self, *args, **kwargs):
        if full():
            raise OSError(errno.ENOSPC, "No space left on device")
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(metrics.CsvLog, "log", csv_log)
    monkeypatch.setattr(pathlib.Path, "write_text", path_write_text)
    argv = ["train", "--model", "tiny", "--task", "copy", "--steps", "6", "--prompts-per-step", "2", "--group-size", "2",
            "--tensorboard", "off", "--no-progress", "--no-save-final", "--out", str(out)]  # fmt: skip
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "No space left on device" in errors[0] and "training failed at update" in errors[0]
    log = (out / "error.log").read_text()
    assert "OSError" in log and "No space left on device" in log
    assert json.loads((out / "summary.json").read_text())["status"] == "failed"
    assert not (out / trainer.RESERVE_NAME).exists()


def test_a_finished_run_leaves_no_reserve(tmp_path):
    argv = ["train", "--model", "tiny", "--task", "copy", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
            "--tensorboard", "off", "--no-progress", "--no-save-final", "--out", str(tmp_path / "ok")]  # fmt: skip
    assert cli.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "ok").iterdir()) == ["code.json", "config.json", "grad_steps.csv", "metrics.csv",
                                                                   "summary.json"]


def test_a_randomly_initialised_model_gets_no_budget_warning(tmp_path, capsys):
    """The budget warning is about a pretrained model's answers being cut; a randomly initialised model's first
    completions run to the budget because it has no answer format yet, so the README's tiny example says nothing."""
    from llm_scale.models import random_init

    assert random_init("tiny") and random_init("random:llama") and not random_init("smollm2-135m-instruct")
    argv = ["train", "--model", "tiny", "--task", "copy", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
            "--max-new-tokens", "2", "--tensorboard", "off", "--no-progress", "--no-save-final", "--out", str(tmp_path / "a")]  # fmt: skip
    assert cli.main(argv) == 0
    metrics = (tmp_path / "a" / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",")
    assert float(metrics[1].split(",")[header.index("truncated_frac")]) > 0.25  # cut, and still no warning
    assert "rewards may be wrong" not in capsys.readouterr().err
