"""`python -m testbed run`'s flags are derived from `RunConfig`'s fields (testbed/cli.py, testbed/config.FLAGS)."""

import dataclasses

import pytest

from testbed import cli
from testbed.config import FLAGS, RunConfig


def _flags() -> dict[str, object]:
    return {a.dest: a for a in cli._run_parser()._actions}


def test_every_field_is_a_flag_with_its_default():
    actions = _flags()
    for f in dataclasses.fields(RunConfig):
        if f.name == "task_args":
            assert f.name not in actions  # the task's options and --task-arg stand for it
            continue
        assert actions[f.name].default == f.default, f.name
        assert actions[f.name].option_strings[0] == FLAGS.get(f.name, {}).get("flags", ("--" + f.name.replace("_", "-"),))[0]
    assert set(FLAGS) <= {f.name for f in dataclasses.fields(RunConfig)}  # no flag for a field that is gone
    assert actions["frictions"].option_strings == ["--friction", "--frictions"]


def test_run_flags_make_the_configs(monkeypatch):
    seen = {}
    monkeypatch.setattr(cli, "_execute", lambda configs, out, args, meta: seen.setdefault("configs", configs) and 0)
    argv = ["--task", "token_reversal", "--H", "3", "--recipe", "tis(c=2)", "--delay", "fixed:1", "--friction",
            "none", "--steps", "7", "--seeds", "2", "--seed", "3", "--batch-size", "8", "--lr", "0.01",
            "--n-actors", "2", "--group-size", "2", "--epochs", "2", "--minibatches", "2", "--log-every", "1",
            "--agg", "seq-mean-token-sum", "--optimizer", "sgd", "--proximal", "none", "--regime", "one_step",
            "--minibatch-split", "random"]
    cli._cmd_run(argv)
    common = dict(task="token_reversal", recipe="tis(c=2)", delay="fixed:1", frictions="none", steps=7,
                  batch_size=8, lr=0.01, n_actors=2, group_size=2, epochs=2, minibatches=2, log_every=1,
                  agg="seq-mean-token-sum", optimizer="sgd", proximal="none", regime="one_step",
                  minibatch_split="random", task_args={"H": 3})
    assert seen["configs"] == [RunConfig(seed=3, **common), RunConfig(seed=4, **common)]
    seen.clear()
    cli._cmd_run([])
    assert seen["configs"] == [RunConfig()]  # every default the dataclass's


@pytest.mark.parametrize(("argv", "message"), [
    (["--seed", "-1"], "--seed must be an integer >= 0, got '-1'"),
    (["--steps", "0"], "--steps must be an integer >= 1, got '0'"),
    (["--lr", "0"], "--lr must be a finite number > 0, got '0'"),
])
def test_bad_values_are_one_line(argv, message, capsys):
    assert cli.main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: {message}"
