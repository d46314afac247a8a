"""Exact per-sample squared score norms ||grad_theta log pi_theta(tau_i)||^2, for VCPO's OPOB baseline.

    norms = score_sq_norms(model, seq_logp, obs, actions, mask)     # [B]
    adv = recipe.advantages(rewards, ..., score_sq_norms=norms)

``seq_logp(forward, *sample)`` returns the scalar log pi(tau) of *one* sample; it receives the
sample's tensors with a leading batch dimension of 1 and ``forward``, a callable that runs the
module (with the parameters being differentiated). ``method="vmap"`` computes all per-sample
gradients at once with torch.func (``chunk_size`` bounds the memory); ``method="loop"`` runs one
backward per sample (for modules torch.func cannot trace). Both give the same numbers. Only
parameters with ``requires_grad`` count. Parameters must be whole on this process (not sharded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad, vmap

SeqLogp = Callable[..., Tensor]


def score_sq_norms(
    module: nn.Module, seq_logp: SeqLogp, *inputs: Tensor, method: str = "vmap", chunk_size: int | None = None
) -> Tensor:
    """Per-sample ||grad log pi(tau_i)||^2 [B] (float32, detached); ``inputs`` share their first dim B."""
    if method not in ("vmap", "loop"):
        raise ValueError(f"score_sq_norms: method must be 'vmap' or 'loop', got {method!r}")
    if not inputs:
        raise ValueError("score_sq_norms needs at least one input tensor (the batch)")
    sizes = {x.shape[0] for x in inputs}
    if len(sizes) != 1:
        raise ValueError(f"score_sq_norms: inputs disagree on the batch size: {sorted(sizes)}")
    params = {k: v.detach() for k, v in module.named_parameters() if v.requires_grad}
    if not params:
        raise ValueError("score_sq_norms: the module has no parameter with requires_grad")
    if method == "loop":
        return _loop(module, seq_logp, inputs)
    buffers = {k: v.detach() for k, v in module.named_buffers()}

    def one(p: dict[str, Tensor], *sample: Tensor) -> Tensor:
        def forward(*args: Any, **kwargs: Any) -> Any:
            return functional_call(module, (p, buffers), args, kwargs)

        return seq_logp(forward, *(x.unsqueeze(0) for x in sample)).sum()

    grads = vmap(grad(one), in_dims=(None, *([0] * len(inputs))), chunk_size=chunk_size)(params, *inputs)
    return sum(g.to(torch.float32).pow(2).flatten(1).sum(1) for g in grads.values()).detach()


def _loop(module: nn.Module, seq_logp: SeqLogp, inputs: tuple[Tensor, ...]) -> Tensor:
    params = [p for p in module.parameters() if p.requires_grad]
    out = []
    for i in range(inputs[0].shape[0]):
        with torch.enable_grad():
            value = seq_logp(module, *(x[i : i + 1] for x in inputs)).sum()
            grads = torch.autograd.grad(value, params, allow_unused=True)
        zero = torch.zeros((), dtype=torch.float32, device=inputs[0].device)
        out.append(sum((g.to(torch.float32).pow(2).sum() for g in grads if g is not None), zero))
    return torch.stack(out).detach()
