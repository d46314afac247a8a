"""Aggregation of a per-token loss matrix into a scalar, with verl's four mode names.

So that a loss computed here can be compared with verl's number for number:

* ``token-mean``:              sum_{i,t} m l / sum_{i,t} m
* ``seq-mean-token-mean``:     mean_i [ sum_t m l / sum_t m ]   (sequences with no token excluded)
* ``seq-mean-token-sum``:      mean_i [ sum_t m l ]
* ``seq-mean-token-sum-norm``: mean_i [ sum_t m l ] / S          (S = ``loss_scale_factor``, default T)

Sequences without any unmasked token are excluded from every sequence mean (as verl >= 0.9 does).

For data-parallel training the denominators can be the global ones (``global_tokens``,
``global_seqs``), so that summing the per-rank losses' gradients gives the global-batch gradient.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from .numerics import masked_sum

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
AGG_MODES: tuple[str, ...] = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")


def aggregate(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    global_tokens: float | None = None,
    global_seqs: float | None = None,
    loss_scale_factor: float | None = None,
) -> Tensor:
    """Reduce ``loss_mat`` [B, T] to a scalar; a fully masked batch gives an exact, finite 0."""
    if mode not in AGG_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; allowed: {', '.join(AGG_MODES)}")
    m = mask.to(torch.bool)
    if mode == "token-mean":
        denom = m.sum().to(loss_mat.dtype) if global_tokens is None else torch.tensor(float(global_tokens))
        return masked_sum(loss_mat, m) / denom.clamp(min=1.0)
    seq_sum = masked_sum(loss_mat, m, dim=-1)
    has_tokens = m.any(dim=-1)
    # seq-mean-token-mean divides each sequence's sum by its token count; seq-mean-token-sum does not
    seq_val = seq_sum / m.sum(dim=-1).to(loss_mat.dtype).clamp(min=1.0) if mode == "seq-mean-token-mean" else seq_sum
    n_seq = has_tokens.sum().to(loss_mat.dtype) if global_seqs is None else torch.tensor(float(global_seqs))
    loss = masked_sum(seq_val, has_tokens) / n_seq.clamp(min=1.0)
    if mode == "seq-mean-token-sum-norm":
        loss = loss / float(loss_mat.shape[-1] if loss_scale_factor is None else loss_scale_factor)
    return loss
