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
logged steps (``log_every``); the previous gradient is kept every step (one flat vector).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from testbed.stabilizers import effective_sample_size
from testbed.stabilizers.numerics import ratio_metrics


def flat_grad(params: list[Tensor]) -> Tensor:
    """The concatenated ``.grad`` of ``params`` (zeros where a parameter has none), detached."""
    return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1) for p in params])


def cosine(a: Tensor, b: Tensor) -> float:
    """cos(a, b); NaN when either is zero (undefined)."""
    na, nb = a.norm(), b.norm()
    if float(na) == 0.0 or float(nb) == 0.0:
        return float("nan")
    return float(torch.dot(a, b) / (na * nb))


def ratio_stats(token_log_ratio: Tensor, seq_log_ratio: Tensor) -> dict[str, float]:
    """ESS of the sequence ratios; min / mean / max of the token ratios; mean |log ratio|."""
    mask = torch.ones_like(token_log_ratio, dtype=torch.bool)
    return {
        "ess": float(effective_sample_size(seq_log_ratio)),
        **ratio_metrics(token_log_ratio, mask, prefix="behav_ratio"),
        "log_ratio_abs_mean": float(token_log_ratio.abs().mean()),
    }


def oracle_gradients(runner: Any, contexts: Tensor) -> tuple[Tensor, Tensor]:
    """(exact expected-PG loss gradient, supervised CE gradient) at the runner's current parameters,
    both flat, on ``contexts``; the task must implement ``expected_reward`` and ``supervised_loss``."""
    params = {k: v.detach().requires_grad_(True) for k, v in runner.params.items()}
    names = list(params)
    with torch.enable_grad():
        neg_j = -runner.apply(params, runner.task.expected_reward, contexts).mean()
        g_pg = torch.autograd.grad(neg_j, [params[n] for n in names], allow_unused=True)
        ce = runner.apply(params, runner.task.supervised_loss, contexts)
        g_ce = torch.autograd.grad(ce, [params[n] for n in names], allow_unused=True)

    def flat(gs: tuple) -> Tensor:
        return torch.cat([(g if g is not None else torch.zeros_like(params[n])).reshape(-1) for g, n in zip(gs, names, strict=True)])

    return flat(g_pg), flat(g_ce)


def linear_score_sq_norms(policy: torch.nn.Module, token_logp: Any) -> Tensor | None:
    """Per-sample ||grad_theta sum_t log pi(a_t|...)||^2 [B] in one backward pass, or None if not applicable.

    Applies when every trainable parameter belongs to an ``nn.Linear`` called once per forward, with
    the batch as the first dimension and samples independent (MLPs). For a layer with inputs a_{i,s}
    and output gradients d_{i,s} over positions s, the per-sample weight gradient is
    sum_s d_{i,s} a_{i,s}^T, whose squared Frobenius norm is sum_{s,s'} (a_s . a_s')(d_s . d_s')
    (Goodfellow 2015's trick); the bias adds ||sum_s d_{i,s}||^2. ``token_logp()`` runs the forward
    and returns the [B, T] log-probs with gradients.
    """
    linears = [m for m in policy.modules() if isinstance(m, torch.nn.Linear)]
    covered = {id(p) for m in linears for p in m.parameters(recurse=False)}
    if not linears or any(id(p) not in covered for p in policy.parameters() if p.requires_grad):
        return None
    calls: list[tuple[torch.nn.Module, Tensor, Tensor]] = []

    def hook(module: torch.nn.Module, inputs: tuple, output: Tensor) -> None:
        calls.append((module, inputs[0].detach(), output))

    handles = [m.register_forward_hook(hook) for m in linears]
    try:
        with torch.enable_grad():
            logp = token_logp()
    finally:
        for h in handles:
            h.remove()
    if len(calls) != len(linears) or len({id(m) for m, _, _ in calls}) != len(linears):
        return None  # a layer called twice or not at all: cross terms this formula does not cover
    deltas = torch.autograd.grad(logp.sum(), [out for _, _, out in calls], allow_unused=True)
    total = torch.zeros(logp.shape[0], dtype=torch.float32)
    for (module, a, _), d in zip(calls, deltas, strict=True):
        if d is None:
            continue
        b = a.shape[0]
        a3, d3 = a.reshape(b, -1, a.shape[-1]).float(), d.reshape(b, -1, d.shape[-1]).float()
        if a3.shape[1] == 1:
            total += a3.pow(2).sum((1, 2)) * d3.pow(2).sum((1, 2))
        else:
            total += (a3 @ a3.transpose(1, 2) * (d3 @ d3.transpose(1, 2))).sum((1, 2))
        if module.bias is not None:
            total += d3.sum(1).pow(2).sum(1)
    return total.detach()
