"""The LLM commands' options: model, task and data declared once (`ModelAndTask`) for train, fingerprint and
budget, each command's own defaults kept; `parse` beside the config, so no module imports the CLI entry point."""

from __future__ import annotations

import ast
from dataclasses import asdict, fields
from pathlib import Path

import pytest

from llm_scale.budget import BudgetArgs
from llm_scale.config import ModelAndTask, TrainConfig, UsageError, parse
from llm_scale.fingerprint import FingerprintArgs

COMMANDS = {TrainConfig: "train", FingerprintArgs: "fingerprint", BudgetArgs: "budget"}
PACKAGE = Path(__file__).resolve().parents[2] / "llm_scale"


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_model_task_and_data_are_the_shared_fields_and_parse_alike(kind):
    assert issubclass(kind, ModelAndTask)
    assert [f.name for f in fields(kind)][:3] == ["model", "task", "data"]
    own = {name for name in vars(kind).get("__annotations__", {})}
    assert "data" not in own  # declared once, in ModelAndTask
    got = parse(kind, ["--model", "m", "--task", "countdown(n_numbers=4)", "--data", "d.jsonl"], "prog")
    assert (got.model, got.task, got.data) == ("m", "countdown(n_numbers=4)", "d.jsonl")


def test_each_command_keeps_its_defaults():
    assert (TrainConfig().model, TrainConfig().task, TrainConfig().data) == ("tiny", "copy", None)
    for kind in (FingerprintArgs, BudgetArgs):
        assert (kind().model, kind().task, kind().data) == ("smollm2-135m-instruct", "arithmetic(max_operand=20)", None)


def test_train_config_keeps_its_field_order():
    """config.json and checkpoints write the fields in this order."""
    assert list(asdict(TrainConfig())) == [
        "model", "task", "data", "recipe", "seed", "mode", "max_staleness", "lag_policy", "partial_chunk",
        "prompts_per_step", "group_size", "max_new_tokens", "temperature", "top_k", "top_p", "rollout_device",
        "rollout_threads", "learner_threads", "weights_via", "steps", "stop_after", "lr", "lr_schedule", "warmup_steps",
        "min_lr_ratio", "weight_decay", "max_grad_norm", "betas", "agg", "epochs", "minibatches", "minibatch_split",
        "micro_batch_size", "proximal", "kl_coef", "kl_estimator", "entropy_coef", "nan_policy", "grad_cosine",
        "grad_split_half", "dynamic_sampling", "device", "dtype", "autocast", "grad_checkpointing", "prompt_style", "out",
        "checkpoint_every", "keep_checkpoints", "resume", "eval_every", "eval_size", "tensorboard", "save_final",
        "scorecard", "progress", "tiny",
    ]  # fmt: skip


def test_a_parse_error_is_one_usage_error_line():
    with pytest.raises(UsageError) as info:
        parse(BudgetArgs, ["--prompts", "many"], "python -m llm_scale budget")
    message = str(info.value)
    assert "\n" not in message and "many" in message and message.endswith("(see python -m llm_scale budget --help)")


def test_no_module_imports_the_cli_entry_point():
    """Only ``python -m llm_scale`` (__main__.py) imports llm_scale.cli: the commands take `parse` from the config."""
    importers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module or ''}.{a.name}".lstrip(".") for a in node.names]
                if any(n in ("cli", "llm_scale.cli") or n.endswith(".cli") for n in names if node.level or n.startswith("llm_scale")):
                    importers.append(path.relative_to(PACKAGE).as_posix())
            elif isinstance(node, ast.Import) and any(a.name == "llm_scale.cli" for a in node.names):
                importers.append(path.relative_to(PACKAGE).as_posix())
    assert importers == ["__main__.py"]
