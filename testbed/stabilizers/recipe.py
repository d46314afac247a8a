"""A recipe: one advantage estimator, one surrogate and a chain of gradient transforms.

This is the object the testbed, llm_scale and the verl/TRL plugins all apply, unchanged::

    recipe = build("dg+gac(t_low=0.1)")
    adv = recipe.advantages(rewards, group_ids=gid, logp=logp.detach(), behavior_logp=blogp, mask=m)
    out = recipe.loss(PolicyTerms(logp, blogp, adv, m), agg="token-mean")
    out.loss.backward()
    metrics = recipe.step(model, optimizer, terms)   # transforms, then optimizer.step()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import Tensor

from .base import Advantage, BatchStats, GradientTransform, Surrogate, component_params
from .numerics import sequence_log_ratio
from .terms import LossOutput, NanPolicy, PolicyTerms


class Recipe:
    """A named (advantage, surrogate, [gradient transforms]) triple with its parameters."""

    def __init__(
        self,
        spec: str,
        advantage: Advantage,
        surrogate: Surrogate,
        transforms: Iterable[GradientTransform] = (),
    ) -> None:
        self.spec = spec
        self.advantage = advantage
        self.surrogate = surrogate
        self.transforms = list(transforms)

    def __repr__(self) -> str:
        def show(c: Any) -> str:
            params = ", ".join(f"{k}={v!r}" for k, v in component_params(c).items())
            return f"{c.name}({params})"

        parts = [show(self.advantage), show(self.surrogate), *map(show, self.transforms)]
        return f"Recipe({self.spec!r}: {' | '.join(parts)})"

    @property
    def needs_score_norms(self) -> bool:
        """True when `advantages` wants per-sequence squared score norms (OPOB)."""
        return self.advantage.needs_score_norms

    # -- hook 1: advantages -------------------------------------------------------------------
    def advantages(
        self,
        rewards: Tensor,
        *,
        group_ids: Tensor | None = None,
        logp: Tensor | None = None,
        behavior_logp: Tensor | None = None,
        mask: Tensor | None = None,
        score_sq_norms: Tensor | None = None,
    ) -> Tensor:
        """Per-sequence advantages [B] (detached). Log-probs are needed only by off-policy baselines."""
        seq_lr = None
        if self.advantage.needs_log_ratio and logp is not None and behavior_logp is not None:
            m = torch.ones_like(logp, dtype=torch.bool) if mask is None else mask
            seq_lr = sequence_log_ratio(logp.detach(), behavior_logp, m)
        with torch.no_grad():
            return self.advantage(
                rewards.to(torch.float32),
                group_ids=group_ids,
                seq_log_ratio=seq_lr,
                score_sq_norms=score_sq_norms,
            ).detach()

    # -- hook 2: the loss ----------------------------------------------------------------------
    def loss(
        self, terms: PolicyTerms, agg: str = "token-mean", *, nan_policy: NanPolicy = "raise", **agg_kwargs: Any
    ) -> LossOutput:
        """The surrogate's scalar loss under aggregation ``agg`` (verl's mode names) and its metrics."""
        terms, n_bad = terms.checked(nan_policy)
        out = self.surrogate(terms, agg, **agg_kwargs)
        if nan_policy == "mask":
            out.metrics["nonfinite_masked"] = float(n_bad)
        return out

    # -- hook 3: gradients ---------------------------------------------------------------------
    def transform_gradients(
        self, params: Iterable[torch.nn.Parameter], terms_or_stats: PolicyTerms | BatchStats | None = None
    ) -> tuple[float, dict[str, Tensor | float]]:
        """Apply every gradient transform in order; return the product of lr scales and metrics."""
        lr_scale, metrics = 1.0, {}
        if not self.transforms:
            metrics["lr_scale"] = lr_scale
            return lr_scale, metrics
        stats = terms_or_stats if isinstance(terms_or_stats, BatchStats) else BatchStats.from_terms(terms_or_stats)
        params = [p for p in params if p.grad is not None]
        for transform in self.transforms:
            result = transform(params, stats)
            lr_scale *= result.lr_scale
            metrics.update(result.metrics)
        metrics["lr_scale"] = lr_scale
        return lr_scale, metrics

    def step(
        self,
        model_or_params: torch.nn.Module | Iterable[torch.nn.Parameter],
        optimizer: torch.optim.Optimizer,
        terms_or_stats: PolicyTerms | BatchStats | None = None,
    ) -> dict[str, Tensor | float]:
        """Transform gradients, then ``optimizer.step()`` with the learning rate scaled for this step only.

        Scaling the step's lr (not the gradient) keeps Adam's moments fed by the unscaled gradient, as
        VCPO prescribes for its ESS rule. An lr scale of exactly 0 (gac's skip) skips
        ``optimizer.step()`` altogether, so the optimizer's state (moments, step count) is untouched.
        """
        params = model_or_params.parameters() if isinstance(model_or_params, torch.nn.Module) else model_or_params
        lr_scale, metrics = self.transform_gradients(params, terms_or_stats)
        if lr_scale != 0.0:
            with scaled_lr(optimizer, lr_scale):
                optimizer.step()
        return metrics

    @staticmethod
    def step_groups(optimizer: torch.optim.Optimizer,
                    entries: Sequence[tuple[Recipe, dict[str, Any], PolicyTerms | BatchStats | None]]) -> list[dict]:
        """`step` for several recipes sharing one optimizer, each owning one param group: every recipe
        transforms its group's gradients, then *one* ``optimizer.step()`` runs with each group's lr scaled by
        its recipe's lr scale for this step only. A scale of exactly 0 drops the group's gradients, so the
        optimizer skips that group (its moments and step count are untouched), as `step` skips the step.
        Returns each recipe's metrics, in order. (One call of a fused optimizer for all groups costs much
        less than one optimizer per recipe when the groups are small.)"""
        out, saved = [], []
        for recipe, group, terms_or_stats in entries:
            lr_scale, metrics = recipe.transform_gradients(group["params"], terms_or_stats)
            out.append(metrics)
            if lr_scale == 0.0:
                for p in group["params"]:
                    p.grad = None
            elif lr_scale != 1.0:
                saved.append((group, group["lr"]))
                group["lr"] = group["lr"] * lr_scale
        try:
            if any(p.grad is not None for _, group, _ in entries for p in group["params"]):
                optimizer.step()
        finally:
            for group, lr in saved:
                group["lr"] = lr
        return out

    # -- state ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "spec": self.spec,
            "surrogate": self.surrogate.state_dict(),
            "transforms": [t.state_dict() for t in self.transforms],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("spec") != self.spec:
            raise ValueError(f"state is for recipe {state.get('spec')!r}, not {self.spec!r}")
        self.surrogate.load_state_dict(state.get("surrogate", {}))
        for transform, s in zip(self.transforms, state["transforms"], strict=True):
            transform.load_state_dict(s)


class scaled_lr:
    """Context manager multiplying every param group's ``lr`` by ``scale``, restored on exit."""

    def __init__(self, optimizer: torch.optim.Optimizer, scale: float) -> None:
        self.optimizer, self.scale = optimizer, scale
        self.saved: list[Any] = []

    def __enter__(self) -> None:
        if self.scale == 1.0:
            return
        for group in self.optimizer.param_groups:
            self.saved.append(group["lr"])
            group["lr"] = group["lr"] * self.scale

    def __exit__(self, *exc: object) -> None:
        for group, lr in zip(self.optimizer.param_groups, self.saved, strict=False):
            group["lr"] = lr
        self.saved.clear()
