"""Helpers for tensors with a leading slot dimension (one slot per run of the loop: testbed/tasks/stacked.py)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call


def cat(tensors: list[Tensor]) -> Tensor:
    return tensors[0] if len(tensors) == 1 else torch.cat(tensors)


def stack(tensors: list[Tensor]) -> Tensor:
    return tensors[0].unsqueeze(0) if len(tensors) == 1 else torch.stack(tensors)


def call_with(module: nn.Module, params: dict[str, Tensor], *args: Any, **kwargs: Any) -> Any:
    return functional_call(module, params, args, kwargs)


def take_rows(x: Tensor, idx: Tensor) -> Tensor:
    """Rows ``idx[s]`` of every slot s of ``x`` [S, B, ...] -> [S, b, ...]."""
    return torch.stack([x[s].index_select(0, idx[s]) for s in range(x.shape[0])])
