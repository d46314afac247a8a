"""Layers whose parameters carry a leading *slot* dimension S: S independent models in one module.

The runner trains S >= 1 runs that share a model shape as one computation (testbed/runner.py). A
task's policy is therefore built for S slots: every parameter has shape ``[S, ...]`` and every
input ``[S, ...]``, and slot s of the output depends only on slot s of the parameters and inputs.
Slot s is initialised from ``generators[s]`` alone, consumed in the same order whatever S is, so a
run's initial weights do not depend on the runs it is batched with.

Exactness. Each layer computes slot s with the same kernels, shapes and reduction order whatever S
is: matrix products are ``torch.baddbmm`` / ``torch.bmm`` (one GEMM per slot, of the slot's own
shape), normalisation and softmax act on rows, embeddings gather rows. So a run batched with others
produces, bit for bit, what it produces alone (tests/integration/test_one_loop.py checks every
logged number and every parameter). S = 1 is the ordinary case, not a special one.

This is the same construction as vectorised ensembles (one batched GEMM per layer for S members),
written as plain modules so a task's model reads like any torch model.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _slots(generators: Sequence[torch.Generator]) -> int:
    if not generators:
        raise ValueError("a stacked layer needs one generator per slot (at least one)")
    return len(generators)


class _Affine(torch.autograd.Function):
    """out[s] = bias[s] + x[s] @ weight[s].T for every slot s, as one ``baddbmm``.

    The backward computes each gradient in its parameter's own layout: grad_x = g @ W,
    grad_W = g^T @ x ([S, out, in] directly, not the transpose of x^T @ g that autograd's rule for
    a transposed operand would produce and then copy), grad_b = the sum of g over rows.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
        ctx.save_for_backward(x, weight)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        gx = torch.bmm(g, weight) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(g.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        gb = g.sum(1) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


class Linear(nn.Module):
    """y[s] = x[s] @ weight[s].T + bias[s]; weight [S, out, in], bias [S, out].

    ``init``: ``"uniform"`` draws weight then bias from U(-1/sqrt(in), 1/sqrt(in)) (torch's Linear
    default bound); ``"normal"`` draws weight from N(0, std^2) and sets the bias to zero;
    ``"zeros"`` sets both to zero. Each slot draws from its own generator.
    """

    def __init__(self, n_in: int, n_out: int, generators: Sequence[torch.Generator], init: str = "uniform",
                 std: float = 0.02) -> None:
        super().__init__()
        s = _slots(generators)
        self.n_in, self.n_out = n_in, n_out
        self.weight = nn.Parameter(torch.empty(s, n_out, n_in))
        self.bias = nn.Parameter(torch.empty(s, n_out))
        with torch.no_grad():
            for i, gen in enumerate(generators):
                if init == "uniform":
                    bound = 1.0 / math.sqrt(n_in)
                    self.weight[i].uniform_(-bound, bound, generator=gen)
                    self.bias[i].uniform_(-bound, bound, generator=gen)
                elif init == "normal":
                    self.weight[i].normal_(0.0, std, generator=gen)
                    self.bias[i].zero_()
                elif init == "zeros":
                    self.weight[i].zero_()
                    self.bias[i].zero_()
                else:
                    raise ValueError(f"init must be 'uniform', 'normal' or 'zeros', got {init!r}")

    def forward(self, x: Tensor) -> Tensor:
        s = x.shape[0]
        out = _Affine.apply(x.reshape(s, -1, self.n_in), self.weight, self.bias)
        return out.reshape(*x.shape[:-1], self.n_out)


class LayerNorm(nn.Module):
    """Layer normalisation over the last dimension with per-slot gain and bias (ones and zeros)."""

    def __init__(self, d: int, generators: Sequence[torch.Generator], eps: float = 1e-5) -> None:
        super().__init__()
        s = _slots(generators)
        self.d, self.eps = d, eps
        self.weight = nn.Parameter(torch.ones(s, d))
        self.bias = nn.Parameter(torch.zeros(s, d))

    def forward(self, x: Tensor) -> Tensor:
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (self.d,)
        return F.layer_norm(x, (self.d,), eps=self.eps) * self.weight.view(shape) + self.bias.view(shape)


class Embedding(nn.Module):
    """Row lookup in a per-slot table [S, n, d], initialised N(0, std^2) (std = 0: zeros, nothing drawn)."""

    def __init__(self, n: int, d: int, generators: Sequence[torch.Generator], std: float = 1.0) -> None:
        super().__init__()
        s = _slots(generators)
        self.weight = nn.Parameter(torch.zeros(s, n, d))
        with torch.no_grad():
            for i, gen in enumerate(generators):
                if std:
                    self.weight[i].normal_(0.0, std, generator=gen)

    def forward(self, idx: Tensor) -> Tensor:
        s = idx.shape[0]
        slot = torch.arange(s, device=idx.device).view(s, *([1] * (idx.dim() - 1)))
        return self.weight[slot, idx]


class Table(nn.Module):
    """A free parameter per (slot, row, column): ``weight`` [S, n, k] ~ N(0, std^2); ``forward(idx [S, ...])``
    returns the rows ``weight[s, idx[s]]`` [S, ..., k] (a tabular policy's logits)."""

    def __init__(self, n: int, k: int, generators: Sequence[torch.Generator], std: float = 0.0) -> None:
        super().__init__()
        s = _slots(generators)
        self.weight = nn.Parameter(torch.zeros(s, n, k))
        with torch.no_grad():
            for i, gen in enumerate(generators):
                self.weight[i].copy_(std * torch.randn((n, k), generator=gen))

    def forward(self, idx: Tensor) -> Tensor:
        flat = idx.reshape(idx.shape[0], -1, 1).expand(-1, -1, self.weight.shape[-1])
        return torch.gather(self.weight, 1, flat).reshape(*idx.shape, self.weight.shape[-1])


@functools.lru_cache(maxsize=64)
def _causal_mask(n_q: int, n_k: int) -> Tensor:
    """True where query i (the last n_q of n_k positions) may not attend key j: j > i + n_k - n_q."""
    return torch.ones(n_q, n_k, dtype=torch.bool).triu(diagonal=n_k - n_q + 1)


def attention(q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
    """softmax(q k^T / sqrt(d)) v on [..., n, d] tensors (every leading index on its own). ``causal``: the
    n_q queries are the last n_q of the n_k key positions and attend only up to their own position.

    Written out (matmuls, a masked softmax) rather than with ``scaled_dot_product_attention``: for the
    short sequences here (n <= 2H) it is faster on a CPU forward and backward, and it takes queries for
    a suffix of the positions (the last layer of the learner's pass, the cached decoding step)."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    if causal and q.shape[-2] > 1:
        scores = scores.masked_fill(_causal_mask(q.shape[-2], k.shape[-2]), float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def concat(modules: Sequence[nn.Module]) -> nn.Module:
    """One module holding the slots of ``modules`` (same class and shapes) in order: a copy of the first
    whose every parameter is the concatenation over ``modules`` along the slot dimension."""
    import copy

    out = copy.deepcopy(modules[0])
    with torch.no_grad():
        for name, p in out.named_parameters():
            p.data = torch.cat([m.get_parameter(name).detach() for m in modules])
    return out


def slot_count(module: nn.Module) -> int:
    """S, the leading dimension shared by every parameter of ``module``."""
    sizes = {p.shape[0] for p in module.parameters()}
    if len(sizes) != 1:
        raise ValueError(f"parameters of {type(module).__name__} disagree on the slot dimension: {sorted(sizes)}")
    return sizes.pop()
