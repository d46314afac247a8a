"""Small hand-checkable batches shared by the stabilizer unit tests."""

from __future__ import annotations

import math

import torch

from testbed.stabilizers import PolicyTerms

LN2 = math.log(2.0)


def hand_terms(**overrides) -> PolicyTerms:
    """B = 2 sequences of T = 2 tokens, every token valid, token-mean aggregation divides by N = 4.

    logp = [[-1, -2], [-0.5, -1.5]]; log-ratios [[ln 2, 0], [-ln 2, ln 4]], i.e. token ratios
    r = [[2, 1], [0.5, 4]] and sequence ratios R = [2 * 1, 0.5 * 4] = [2, 2]; A = [1, -2] per sequence.
    """
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -1.5]], dtype=torch.float64).requires_grad_()
    log_r = torch.tensor([[LN2, 0.0], [-LN2, 2 * LN2]], dtype=torch.float64)
    kwargs = dict(
        logp=logp,
        behavior_logp=(logp - log_r).detach(),
        advantages=torch.tensor([1.0, -2.0], dtype=torch.float64),
        mask=torch.ones(2, 2, dtype=torch.bool),
    )
    kwargs.update(overrides)
    return PolicyTerms(**kwargs)


def loss_and_grad(component, terms: PolicyTerms, agg: str = "token-mean"):
    """(loss float, d loss / d logp as a float64 tensor, metrics) for a surrogate on ``terms``."""
    out = component(terms, agg)
    (grad,) = torch.autograd.grad(out.loss, terms.logp, allow_unused=True)
    grad = torch.zeros_like(terms.logp) if grad is None else grad
    return float(out.loss.detach()), grad.to(torch.float64), out.metrics


def random_terms(B: int = 6, T: int = 5, seed: int = 0, scale: float = 0.5, proximal: bool = False) -> PolicyTerms:
    """A random batch with ragged masks (every row keeps at least one token)."""
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g) * 3 - 0.05).requires_grad_()
    blogp = logp.detach() + scale * torch.randn(B, T, generator=g)
    mask = torch.rand(B, T, generator=g) < 0.8
    mask[:, 0] = True
    prox = logp.detach() + 0.5 * scale * torch.randn(B, T, generator=g) if proximal else None
    return PolicyTerms(logp, blogp, torch.randn(B, generator=g), mask, proximal_logp=prox)
