"""Per-step diagnostics: gradient alignment (GAC's signal and exact oracles), ESS, ratio statistics.

All cosines are between *loss* gradients (descent directions of the same sign convention), so a
positive cosine means "pushes the parameters the same way":

* ``grad_cos_prev``: cosine between this step's raw surrogate gradient (before gradient transforms)
  and the previous step's. GAC (arXiv 2603.01501): near zero (slightly negative) when synchronous,
  high when stale.
* ``cos_true_pg``: cosine to the exact expected policy gradient on the batch's contexts,
  -grad mean_x sum_a pi(a|x) r(x, a), by enumerating the actions (single-step tasks).
* ``cos_ce``: cosine to the supervised cross-entropy gradient on the batch's contexts (the label /
  best action as target): the oracle the DG paper compares against.
* ``ess``: normalised effective sample size (sum w)^2 / (B sum w^2) of the sequence ratios
  w = pi_theta / mu (1/B .. 1).
* ``behav_ratio_{min,mean,max}``: token ratios pi_theta / mu (saturated at exp(20));
  ``log_ratio_abs_mean``: mean |log pi_theta - log mu| per token.

Computing the oracles costs two more backward passes, so the runner only computes diagnostics on
logged steps (``log_every``); it keeps each run's previous flat gradient (`flat_grads`) for the cosine
that every optimizer step records (testbed/health.py).

The runner's policy holds S slots (testbed/tasks/stacked.py); the functions below that take the
policy return one row per slot.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call

from testbed.stabilizers import effective_sample_size
from testbed.stabilizers.numerics import ratio_metrics
from testbed.tasks import ExactOracle, stacked
from testbed.tasks.base import token_logp


def flat_grads(params: list[Tensor]) -> Tensor:
    """Every slot's concatenated ``.grad`` of stacked ``params`` (each [S, ...]; zeros where a parameter has
    none), detached: [S, P], row s slot s's flat gradient."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(p.shape[0], -1)
                      for p in params], 1)


def cosine(a: Tensor, b: Tensor, norm_a: Tensor | None = None) -> float:
    """cos(a, b); NaN when either is zero (undefined). Elementwise products and ATen reductions (not a
    BLAS dot, whose rounding can depend on memory alignment), so a slot's value does not depend on
    where its gradient sits in a stacked tensor. ``norm_a``: ``torch.linalg.vector_norm(a)``, when at hand."""
    na = torch.linalg.vector_norm(a) if norm_a is None else norm_a
    nb = torch.linalg.vector_norm(b)
    if float(na) == 0.0 or float(nb) == 0.0:
        return float("nan")
    return float((a * b).sum() / (na * nb))


def ratio_stats(token_log_ratio: Tensor, seq_log_ratio: Tensor) -> dict[str, float]:
    """ESS of the sequence ratios; min / mean / max of the token ratios; mean |log ratio|."""
    mask = torch.ones_like(token_log_ratio, dtype=torch.bool)
    return {
        "ess": float(effective_sample_size(seq_log_ratio)),
        **ratio_metrics(token_log_ratio, mask, prefix="behav_ratio"),
        "log_ratio_abs_mean": float(token_log_ratio.abs().mean()),
    }


def oracle_gradients(task: ExactOracle, policy: nn.Module, contexts: Tensor) -> tuple[Tensor, Tensor]:
    """(exact expected-PG loss gradient, supervised CE gradient) per slot at the policy's parameters, flat
    [S, P], on ``contexts`` [S, B]: the gradients of -mean_x sum_a pi(a|x) r(x, a) and of the mean
    cross-entropy to the rewarded action (slots are independent, so one backward serves all)."""
    params = list(policy.parameters())
    s = contexts.shape[0]
    with torch.enable_grad():
        neg_j = -task.expected_reward(policy, contexts).mean(-1).sum()
        g_pg = torch.autograd.grad(neg_j, params, allow_unused=True)
        ce = task.supervised_loss(policy, contexts).sum()
        g_ce = torch.autograd.grad(ce, params, allow_unused=True)

    def flat(gs: tuple) -> Tensor:
        return torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(s, -1) for g, p in zip(gs, params, strict=True)], 1)

    return flat(g_pg), flat(g_ce)


def _mlp_linears(policy: nn.Module) -> list[nn.Module] | None:
    """The `stacked.Linear` layers of ``policy`` when they hold every parameter of it (an MLP), else None."""
    linears = [m for m in policy.modules() if isinstance(m, stacked.Linear)]
    covered = {id(p) for m in linears for p in m.parameters(recurse=False)}
    return linears if linears and all(id(p) in covered for p in policy.parameters()) else None


def _hooked_forward(linears: list[nn.Module], forward: Callable[[], Tensor]) -> tuple[Tensor, list[tuple[Tensor, Tensor]] | None]:
    """``forward()`` (with autograd) and the (input, output) of each of ``linears`` in it; None in their place
    when a layer was called twice or not at all (cross terms the ghost-norm formula does not cover)."""
    calls: list[tuple[Tensor, Tensor]] = []

    def hook(module: nn.Module, inputs: tuple, output: Tensor) -> None:
        calls.append((inputs[0].detach(), output))

    handles = [m.register_forward_hook(hook) for m in linears]
    try:
        with torch.enable_grad():
            out = forward()
    finally:
        for h in handles:
            h.remove()
    return out, calls if len(calls) == len(linears) else None


def _ghost_norms(logp: Tensor, calls: list[tuple[Tensor, Tensor]], keep_graph: bool) -> Tensor:
    """Per-sample ||grad log pi(tau)||^2 [S, B] from the token log-probs ``logp`` [S, B, T] and the (input,
    output) of every linear layer of the forward that made them (`_hooked_forward`).

    For a layer with inputs a_p and output gradients d_p over the positions p of one sample, the
    per-sample weight gradient is sum_p d_p a_p^T, whose squared Frobenius norm is
    sum_{p,p'} (a_p . a_p')(d_p . d_p') (Goodfellow 2015), and the bias adds ||sum_p d_p||^2: one
    backward pass for the whole batch instead of one per sample. ``keep_graph``: leave the forward's graph
    for a later backward through it.
    """
    deltas = torch.autograd.grad(logp.sum(), [out for _, out in calls], allow_unused=True, retain_graph=keep_graph)
    s, b = logp.shape[:2]
    total = torch.zeros((s, b), dtype=torch.float32)
    for (a, _), d in zip(calls, deltas, strict=True):
        if d is None:
            continue
        a3 = a.reshape(s * b, -1, a.shape[-1]).float()
        d3 = d.reshape(s * b, -1, d.shape[-1]).float()
        if a3.shape[1] == 1:
            w = a3.pow(2).sum((1, 2)) * d3.pow(2).sum((1, 2))
        else:
            w = (torch.bmm(a3, a3.transpose(1, 2)) * torch.bmm(d3, d3.transpose(1, 2))).sum((1, 2))
        total += (w + d3.sum(1).pow(2).sum(1)).reshape(s, b)
    return total.detach()


def score_sq_norms(task: Any, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
    """Per-sample ||grad_theta log pi(tau_i)||^2 [S, B] of every slot's batch (OPOB needs it), exact: by
    `_ghost_norms` for MLPs, else `_slotwise_norms`."""
    linears = _mlp_linears(policy)
    if linears is not None:
        logp, calls = _hooked_forward(linears, lambda: token_logp(task.logits(policy, contexts, actions), actions))
        if calls is not None:
            return _ghost_norms(logp, calls, keep_graph=False)
    return _slotwise_norms(task, policy, contexts, actions)


def score_sq_norms_and_logits(task: Any, policy: nn.Module, contexts: Tensor, actions: Tensor) -> tuple[Tensor, Tensor]:
    """(`score_sq_norms`, ``task.logits(policy, contexts, actions)`` with its autograd graph): a learner's
    forward of a batch that also needs the norms, made once for both; the same numbers, bit for bit, as
    the two computed apart."""
    linears = _mlp_linears(policy)
    if linears is not None:
        logits, calls = _hooked_forward(linears, lambda: task.logits(policy, contexts, actions))
        if calls is not None:
            with torch.enable_grad():
                logp = token_logp(logits, actions)
            return _ghost_norms(logp, calls, keep_graph=True), logits
    with torch.enable_grad():
        logits = task.logits(policy, contexts, actions)
    return _slotwise_norms(task, policy, contexts, actions), logits


def _slotwise_norms(task: Any, policy: nn.Module, contexts: Tensor, actions: Tensor) -> Tensor:
    """`score_sq_norms` for any policy, slot by slot: every sample of the batch becomes a slot of its own (the
    slot's parameters repeated B times), so one backward pass gives the B per-sample gradients (the
    construction of per-sample gradients by vectorisation, written with the policy's own slot dimension)."""
    s, b = contexts.shape[:2]
    out = []
    for i in range(s):
        params = {k: v[i].detach().unsqueeze(0).repeat(b, *([1] * (v.dim() - 1))).requires_grad_(True)
                  for k, v in policy.named_parameters()}

        def view(*args: Any, params: dict[str, Tensor] = params, **kwargs: Any) -> Any:
            return functional_call(policy, params, args, kwargs)

        x, a = contexts[i].unsqueeze(1), actions[i].unsqueeze(1)  # [B, 1, ...]: one sample per slot
        with torch.enable_grad():
            logp = token_logp(task.logits(view, x, a), a).sum()
            grads = torch.autograd.grad(logp, list(params.values()))
        out.append(sum(g.reshape(b, -1).pow(2).sum(1) for g in grads))
    return torch.stack(out).detach()
