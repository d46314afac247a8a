"""TRL plugin: a ``GRPOTrainer`` whose loss is a stabilizer recipe's surrogate, and a ``TrainerCallback``
that applies the recipe's gradient transforms just before each optimizer step.

    from llm_scale.integrations.trl import StabilizerGRPOTrainer
    trainer = StabilizerGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(...), train_dataset=...,
                                    recipe="dg+gac(t_low=0.1)", agg="token-mean")
    trainer.train()

What maps to what: ``logp`` is TRL's recomputed per-token log-prob of the completion (with grad);
``behavior_logp`` is the log-prob the sampler recorded when TRL has it (vLLM's
``sampling_per_token_logps``), else TRL's ``old_per_token_logps`` (the policy that generated the
batch, present when a batch is reused over several steps), else the detached current log-prob
(exactly on-policy). Advantages are TRL's (group-normalised rewards, its ``scale_rewards`` option):
the recipe's advantage hook is not used here, since TRL does not pass rewards or ratios to the
loss; a recipe whose advantage is not the default gets a warning. The surrogate's loss is
aggregated with ``agg`` (verl's mode names) and divided by the gradient-accumulation steps as TRL
does; TRL's KL term (``beta > 0``) is added with the same aggregation. Gradient transforms run in
``on_pre_optimizer_step``, i.e. after TRL's own ``max_grad_norm`` clipping (set ``max_grad_norm=0``
to leave clipping to the recipe), with batch statistics (sequence log-ratios, hence ESS) gathered
from the loss calls of the accumulation window; their lr scale lasts for that step only.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor

try:
    from transformers import TrainerCallback
    from trl import GRPOTrainer
except ImportError as exc:  # pragma: no cover - exercised only without trl
    raise ImportError(f"llm_scale.integrations.trl needs trl (the 'trl' extra: pip install -e '.[trl]'): {exc}") from exc

from testbed.stabilizers import PolicyTerms, Recipe, aggregate, build

from .hooks import TransformStep

_MM_KEYS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)  # fmt: skip


class GradientTransformCallback(TrainerCallback):
    """Applies ``recipe``'s gradient transforms in ``on_pre_optimizer_step``; restores lr in ``on_optimizer_step``.

    ``step.collect(...)`` records the statistics of each loss call (the trainer below does it);
    ``step.history`` holds the transforms' metrics of every step, also appended to ``sink`` (e.g. a
    GRPOTrainer's ``_metrics["train"]``) so that they are logged with TRL's.
    """

    def __init__(self, recipe: Recipe, sink: dict[str, list[float]] | None = None) -> None:
        self.recipe = recipe
        self.sink = sink
        self.step = TransformStep()

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kw: Any) -> None:
        if model is None or optimizer is None:
            return
        metrics = self.step.before_step(self.recipe, optimizer, [p for p in model.parameters() if p.requires_grad])
        if self.sink is not None:
            for key, value in metrics.items():
                self.sink[f"stabilizer/{key}"].append(float(value))

    def on_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kw: Any) -> None:
        if optimizer is not None:
            self.step.after_step(optimizer)


class StabilizerGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with the policy loss replaced by ``recipe``'s surrogate (see the module docstring).

    Args (besides GRPOTrainer's):
      recipe: a spec for ``testbed.stabilizers.build`` or a `Recipe`.
      agg: aggregation mode of the surrogate's per-token loss (verl's names).
    """

    def __init__(self, *args: Any, recipe: str | Recipe = "pg", agg: str = "token-mean", **kwargs: Any) -> None:
        self.recipe = build(recipe) if isinstance(recipe, str) else recipe
        self.agg = agg
        if self.recipe.advantage.name not in ("auto", "group"):
            warnings.warn(
                f"recipe {self.recipe.spec!r} has advantage {self.recipe.advantage.name!r}; TRL computes its own "
                "group-normalised advantages, which are used instead",
                stacklevel=2,
            )
        super().__init__(*args, **kwargs)
        self.stabilizer_callback = GradientTransformCallback(self.recipe, sink=self._metrics["train"])
        if self.recipe.transforms:
            self.add_callback(self.stabilizer_callback)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Tensor:
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        logp, _, _ = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=False,
            **{k: inputs.get(k) for k in _MM_KEYS},
        )  # fmt: skip
        behavior = inputs.get("sampling_per_token_logps")
        if behavior is None:
            behavior = inputs.get("old_per_token_logps")
        if behavior is None:
            behavior = logp.detach()
        terms = PolicyTerms(logp, behavior, inputs["advantages"].reshape(-1), mask.bool())
        out = self.recipe.loss(terms, self.agg, nan_policy="mask")
        loss = out.loss
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            kl = torch.exp(ref - logp) - (ref - logp) - 1
            loss = loss + self.beta * aggregate(kl, terms.mask, self.agg)
        mode = "train" if self.model.training else "eval"
        if mode == "train":
            self.stabilizer_callback.step.collect(logp, behavior, terms.mask)
            loss = loss / getattr(self, "current_gradient_accumulation_steps", self.args.gradient_accumulation_steps)
        for key, value in out.metrics.items():
            self._metrics[mode][f"stabilizer/{key}"].append(float(value))
        return loss
