"""Shared helpers for the llm_scale tests: small trainer configs on the tiny local model (CPU, no downloads)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers", reason="llm_scale needs the 'llm' extra: pip install -e '.[llm]'")

from llm_scale.config import TrainConfig


def tiny_config(tmp_path, name: str = "run", **overrides) -> TrainConfig:
    base = dict(
        model="tiny", task="copy", recipe="pg", steps=6, prompts_per_step=4, group_size=4,
        out=str(tmp_path / name), tensorboard="off", progress=False, seed=3, save_final=False,
        max_grad_norm=0.0,  # the tiny model's tests are calibrated without clipping (its lr is 1e-3)
    )  # fmt: skip
    base.update(overrides)
    return TrainConfig(**base)
