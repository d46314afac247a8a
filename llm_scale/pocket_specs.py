"""The pocket LMs' names and specs (`PocketSpec`): what ``python -m llm_scale models`` lists and what
`llm_scale.pocket.build_pocket` builds. Data only: the model cache (`llm_scale.models`) reads the names here and the
builder reads the specs, so neither imports the other's module for them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PocketSpec:
    """Everything that determines a pocket LM's bytes."""

    summary: str
    """one line for ``python -m llm_scale models``"""
    task: str = "arithmetic(max_operand=20)"
    """the task whose text it is trained on (an llm_scale task spec)"""
    hidden_size: int = 160
    num_layers: int = 4
    num_heads: int = 5
    intermediate_size: int = 448
    max_positions: int = 256
    known_fraction: float = 0.45
    """fraction of the task's operand pairs whose equations appear in the training text"""
    pretrain_steps: int = 400
    sft_steps: int = 250
    batch_size: int = 32
    """sequences per optimizer step (both phases)"""
    pretrain_length: int = 128
    """tokens per packed pretraining sequence"""
    lr: float = 3e-3
    """peak learning rate of pretraining"""
    sft_lr: float = 1e-3
    """peak learning rate of fine-tuning"""
    min_lr_ratio: float = 0.1
    warmup_steps: int = 30
    weight_decay: float = 0.01
    seed: int = 0


POCKET_MODELS: dict[str, PocketSpec] = {
    "pocket-arithmetic": PocketSpec(
        summary="pocket LM, task-pretrained (not web-pretrained): Llama, 4 layers, width 160, 1.3M parameters, "
                "character tokenizer with a chat template, pretrained and fine-tuned on arithmetic(max_operand=20) "
                "text on a CPU (python -m llm_scale models build pocket-arithmetic)",
    ),
    "pocket-tiny": PocketSpec(
        summary="pocket LM for tests, task-pretrained: Llama, 1 layer, width 32, built in seconds",
        hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64, pretrain_steps=12, sft_steps=8,
        batch_size=8, pretrain_length=32, warmup_steps=4, sft_lr=3e-3,
    ),
}  # fmt: skip
