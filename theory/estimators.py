"""The real stabilizers' gradients on softmax policies, through autograd (the glue theory/ shares).

A policy over K actions at each of T positions has logits theta [T, K]; a sample is one action per
position. Every function here builds `PolicyTerms` from float64 log-softmax log-probs, calls the
recipe's real loss (`testbed.stabilizers.build(spec).loss`) and differentiates it with respect
to the logits, so what is checked is the code the testbed and llm_scale run, not a copy of it.
The log-softmax Jacobian is float64; only the per-sample scalars (weights, gates, advantages)
pass through the stabilizers' float32 arithmetic (`checks.f32_tol` bounds that rounding).

All returned gradients are *ascent* directions: minus the gradient of the loss.
"""

from __future__ import annotations

import numpy as np
import torch

from testbed.stabilizers import PolicyTerms, Recipe, build


def _ascent(
    spec: str | Recipe,
    theta: torch.Tensor,
    logp: torch.Tensor,
    advantages: np.ndarray,
    behavior_logp: np.ndarray | None,
    agg: str,
    **agg_kwargs: float,
) -> np.ndarray:
    """Minus the gradient w.r.t. ``theta`` of the recipe's real loss on these log-probs [B, T]."""
    recipe = build(spec) if isinstance(spec, str) else spec
    blogp = logp.detach() if behavior_logp is None else torch.as_tensor(np.asarray(behavior_logp, dtype=np.float64))
    terms = PolicyTerms(
        logp=logp,
        behavior_logp=blogp,
        advantages=torch.as_tensor(np.asarray(advantages, dtype=np.float64)),
        mask=torch.ones(logp.shape, dtype=torch.bool),
    )
    (grad,) = torch.autograd.grad(recipe.loss(terms, agg=agg, **agg_kwargs).loss, theta)
    return -grad.numpy()


def per_sample_ascent(
    spec: str | Recipe,
    logits: np.ndarray,
    actions: np.ndarray,
    advantages: np.ndarray,
    behavior_logp: np.ndarray | None = None,
) -> np.ndarray:
    """Ascent direction of the surrogate for each sample *alone* (a batch of one), [M, T, K].

    ``logits`` [M, T, K] (each sample's own copy, e.g. its context's logits), ``actions`` [M, T],
    ``advantages`` [M] (per sequence), ``behavior_logp`` [M, T] (default: on-policy). All samples go
    through one call with ``seq-mean-token-sum`` aggregation over a global sequence count of 1, i.e. the
    loss is the sum of the per-sample losses, so row m of the gradient is sample m's own gradient. Valid for
    surrogates whose per-sample terms do not couple across the batch (pg, is, tis, mis, dg without
    whitening); coupled ones (whitening, Kondo's batch quantile) need `batch_ascent`.
    """
    theta = torch.tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    acts = torch.as_tensor(np.asarray(actions), dtype=torch.long)
    logp = torch.log_softmax(theta, dim=-1).gather(-1, acts[..., None])[..., 0]
    return _ascent(spec, theta, logp, advantages, behavior_logp, "seq-mean-token-sum", global_seqs=1.0)


def batch_ascent(
    spec: str | Recipe,
    logits: np.ndarray,
    actions: np.ndarray,
    advantages: np.ndarray,
    behavior_logp: np.ndarray | None = None,
    agg: str = "seq-mean-token-sum",
) -> np.ndarray:
    """Ascent direction of the surrogate on one batch drawn from a single policy, [T, K].

    ``logits`` [T, K] shared by the batch, ``actions`` [B, T], ``advantages`` [B]. With the default
    ``seq-mean-token-sum`` aggregation this is the batch mean of the per-sample terms.
    """
    theta = torch.tensor(np.asarray(logits, dtype=np.float64), requires_grad=True)
    acts = torch.as_tensor(np.asarray(actions), dtype=torch.long)
    logp = torch.log_softmax(theta, dim=-1)[torch.arange(acts.shape[1])[None, :], acts]  # [B, T]
    return _ascent(spec, theta, logp, advantages, behavior_logp, agg)


def bandit_term_table(
    spec: str | Recipe, logits: np.ndarray, advantages: np.ndarray, behavior_logp: np.ndarray | None = None
) -> np.ndarray:
    """Per-action ascent terms of a multi-context bandit: [N, K, K], entry [n, a] = the gradient on
    context n's logits of a batch holding the single sample (context n, action a).

    ``logits`` [N, K]; ``advantages`` [N, K] (advantage of action a in context n); ``behavior_logp``
    [N, K] (the log-probability recorded for that sample; default on-policy).
    """
    n_ctx, k = np.shape(logits)
    rows = np.repeat(np.asarray(logits, dtype=np.float64), k, axis=0)[:, None, :]  # [N*K, 1, K]
    actions = np.tile(np.arange(k), n_ctx)[:, None]
    blogp = None if behavior_logp is None else np.asarray(behavior_logp, dtype=np.float64).reshape(-1, 1)
    g = per_sample_ascent(spec, rows, actions, np.asarray(advantages, dtype=np.float64).reshape(-1), blogp)
    return g.reshape(n_ctx, k, k)


def expected_bandit_ascent(
    spec: str | Recipe,
    logits: np.ndarray,
    sampling_probs: np.ndarray,
    advantages: np.ndarray,
    behavior_logp: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact expectation of the surrogate's per-sample ascent when context n's action is drawn from
    ``sampling_probs[n]``: sum_a q_n(a) term[n, a], [N, K]; and sum_a q_n(a) |term[n, a]| (for
    rounding bounds). Infinite samples, by enumeration.
    """
    table = bandit_term_table(spec, logits, advantages, behavior_logp)
    q = np.asarray(sampling_probs, dtype=np.float64)[:, :, None]
    return (q * table).sum(axis=1), (q * np.abs(table)).sum(axis=1)
