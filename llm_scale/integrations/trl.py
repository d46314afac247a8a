"""TRL plugin: ``GRPOTrainer`` (and TRL's experimental ``AsyncGRPOTrainer``) with a stabilizer recipe's
surrogate as the policy loss, and a ``TrainerCallback`` applying the recipe's gradient transforms.

    from llm_scale.integrations.trl import StabilizerGRPOTrainer
    trainer = StabilizerGRPOTrainer(model=..., reward_funcs=..., args=GRPOConfig(loss_type="dapo", ...),
                                    train_dataset=..., recipe="dg+gac(t_low=0.1)")
    trainer.train()

The loss is TRL's own loss with exactly one part replaced: TRL's clipped-ratio term becomes the
recipe's per-token surrogate. Everything around it is TRL's code path, number for number:

* **Normalisation** follows ``GRPOConfig.loss_type`` for any gradient accumulation: ``grpo``
  (mean over sequences of the token mean), ``bnpo`` (token mean of the micro-batch), ``dr_grpo``
  (sum / (B * max_completion_length)), ``dapo`` and ``cispo`` (sum / the active tokens of the whole
  accumulation window, TRL's ``num_items_in_batch``), ``luspo`` (mean over sequences of the token
  sum), each divided by the accumulation steps where TRL divides. A recipe that reduces to TRL's
  loss (``ppo`` with TRL's clip range) therefore has TRL's gradient for every accumulation.
* **What multiplies the per-token loss**, in TRL's order: the off-policy sequence mask
  (``off_policy_mask_threshold``), the high-entropy token mask (``top_entropy_quantile``) and
  TRL's vLLM importance-sampling correction weights (``vllm_importance_sampling_*``); then the KL
  term (``beta``, with ``use_bias_correction_kl``'s ratio) is added per token; the entropy bonus
  (``entropy_coef``, ``use_adaptive_entropy``) and the MoE auxiliary loss are added as TRL adds them.
* **Clip settings** map to the recipe's surrogate and settings it cannot follow are **refused**: see
  `llm_scale.integrations.trl_settings` (`compose_recipe`, `GRPO_SETTINGS`), which imports without trl.

Behaviour policy (``behavior``): ``"old"`` (default) takes TRL's ``old_per_token_logps`` (the
trainer's log-probs of the policy that generated the batch; the detached current ones when TRL
skips them because the batch is on-policy) and TRL's vLLM correction weights multiply the loss on
top, the recipe's weights and TRL's combined as a product (as TRL and verl do). ``"sampler"`` takes
the rollout engine's own log-probs (vLLM's ``sampling_per_token_logps``), so the recipe's weights
correct staleness and the engine mismatch together; it requires
``vllm_importance_sampling_correction=False`` (otherwise the mismatch would be corrected twice).

Logged values: ``loss`` is TRL's (the value of the loss above, so with the ``ppo`` recipe and TRL's clip
range it equals ``GRPOTrainer``'s number for number); the surrogate's own value, normalised as
``loss_type`` says but before TRL's masks, vLLM weights and KL term, is ``stabilizer/surrogate_loss``
(in the asynchronous trainer: its mean over the step's tokens, the logged loss less the MoE auxiliary loss).

Gradient transforms run in ``on_pre_optimizer_step``, i.e. after TRL's own ``max_grad_norm``
clipping (set ``max_grad_norm=0`` to leave clipping to the recipe), with batch statistics
(sequence log-ratios, hence ESS) gathered from the loss calls of the accumulation window; their lr
scale lasts for that step only.

``StabilizerAsyncGRPOTrainer`` does the same for ``trl.experimental.async_grpo.AsyncGRPOTrainer``,
whose loss has no options beyond ``epsilon`` / ``epsilon_high`` and whose behaviour log-probs are
the rollout worker's (vLLM's): the packed tokens are unpacked into ``[completions, T]`` for the
surrogate (sequence-level recipes see whole completions) and the loss keeps that trainer's
normalisation (token sum / tokens per rank / accumulation steps).
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import textwrap
import time
import warnings
from collections.abc import Mapping
from typing import Any

import torch
from packaging.version import InvalidVersion, Version
from torch import Tensor

try:
    import trl
    from transformers import TrainerCallback
    from trl import GRPOTrainer
    from trl.trainer.utils import nanmax, nanmin
except ImportError as exc:  # pragma: no cover - exercised only without trl
    raise ImportError(f"llm_scale.integrations.trl needs trl (the 'trl' extra: pip install -e '.[trl]'): {exc}") from exc

from testbed.stabilizers import PolicyTerms, Recipe

from .hooks import TransformStep, load_recipe_state, missing_state_warning, needs_batch_stats, save_recipe_state
from .trl_settings import (
    CLIP_SURROGATES,
    GRPO_SETTINGS,
    HOST_CLIP_SURROGATES,
    LOSS_TYPES,
    PPO_FAMILY_LOSS_TYPES,
    REFUSED_LOSS_TYPES,
    SUPPORTED_TRL,
    TRAINING_ARGS_SETTINGS,
    TRL_CLIP_MAPPING,
    compose_recipe,
    config_of,
)

__all__ = [  # the settings are importable from here too (and StabilizerAsyncGRPOTrainer, built on first use)
    "CLIP_SURROGATES", "GRPO_SETTINGS", "HOST_CLIP_SURROGATES", "LOSS_TYPES", "PPO_FAMILY_LOSS_TYPES", "REFUSED_LOSS_TYPES",
    "SUPPORTED_TRL", "TRAINING_ARGS_SETTINGS", "TRL_CLIP_MAPPING", "UPSTREAM_SOURCES", "GradientTransformCallback",
    "StabilizerGRPOTrainer", "check_trl_version", "check_upstream", "compose_recipe",
    "resumed_checkpoint", "source_fingerprint", "stabilizer_async_loss", "unpack_segments", "uses_deepspeed",
]  # fmt: skip

# The sha256 of the source of each upstream function this module copies (inspect.getsource, dedented) in the
# supported TRL releases (trl_settings.SUPPORTED_TRL).
UPSTREAM_SOURCES = {
    "GRPOTrainer._compute_loss": "16c4f3917b9fd26418d16176fd0aeb02ae30f3a41708061a5f8aa5bb74e25b26",
    "AsyncGRPOTrainer.compute_loss": "4fad05bf0e8bb74090dc902b988afd9782b52bd42cf2931ffb690cb43381a255",
}


def source_fingerprint(fn: Any) -> str:
    """sha256 of ``fn``'s dedented source: changes whenever the upstream function's code does."""
    return hashlib.sha256(textwrap.dedent(inspect.getsource(fn)).encode()).hexdigest()


def check_trl_version(version: str | None = None) -> None:
    """ImportError (one line naming the supported range) unless ``version`` (default: the installed trl's) is in it."""
    version = trl.__version__ if version is None else version
    low, high = SUPPORTED_TRL
    try:
        supported = Version(low) <= Version(version) < Version(high)
    except InvalidVersion:
        supported = False
    if not supported:
        raise ImportError(f"llm_scale.integrations.trl supports trl >={low},<{high} (its loss mirrors that release's "
                          f"GRPOTrainer line for line); trl {version} is installed: pip install 'trl>={low},<{high}'")  # fmt: skip


def check_upstream(name: str, fn: Any) -> None:
    """ImportError (one line) when the installed trl's ``name`` is not the code this module mirrors."""
    got = source_fingerprint(fn)
    if got != UPSTREAM_SOURCES[name]:
        raise ImportError(f"trl {trl.__version__}'s {name} is not the code llm_scale.integrations.trl mirrors (source "
                          f"sha256 {got[:12]}, expected {UPSTREAM_SOURCES[name][:12]}): the plugin's loss could differ from "
                          f"TRL's; install trl >={SUPPORTED_TRL[0]},<{SUPPORTED_TRL[1]} as released")  # fmt: skip


check_trl_version()
check_upstream("GRPOTrainer._compute_loss", GRPOTrainer._compute_loss)

_MM_KEYS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)  # fmt: skip

class GradientTransformCallback(TrainerCallback):
    """Applies ``recipe``'s gradient transforms in ``on_pre_optimizer_step``; restores lr in ``on_optimizer_step``;
    keeps the recipe's state in the trainer's checkpoints.

    ``step.collect(...)`` records the statistics of each loss call (the trainers below do it);
    ``step.history`` holds the transforms' metrics of every step, also appended to ``sink`` (e.g. a
    GRPOTrainer's ``_metrics["train"]``) so that they are logged with TRL's.

    Checkpoints: ``on_save`` writes ``recipe.state_dict()`` (gac's reference gradient and threshold
    history, a gate's random stream) to ``checkpoint-N/stabilizer_state.pt`` beside the trainer's own
    files; `restore` loads it (the plugin's trainers call it from ``_load_from_checkpoint``, i.e. on
    ``train(resume_from_checkpoint=...)``). With a plain ``GRPOTrainer`` the callback finds the state of
    ``output_dir/checkpoint-N`` itself at ``on_train_begin``; a resumed run without one prints one
    warning line. transformers' ``ExportableState`` is not used: it stores callback state as JSON in
    ``trainer_state.json`` and rebuilds callbacks from JSON arguments (only with
    ``restore_callback_states_from_checkpoint``), neither of which suits a gradient-sized tensor.
    """

    def __init__(self, recipe: Recipe, sink: dict[str, list[float]] | None = None, batch_stats: bool = False) -> None:
        """``batch_stats``: whether the trainer hands each loss call's log-ratios to `collect` (the plugin's trainers
        do; TRL's own GRPOTrainer does not, so a transform that needs them, ess_lr, is refused here)."""
        needs = needs_batch_stats(recipe)
        if needs and not batch_stats:
            raise ValueError(f"gradient transform {needs[0]} of recipe {recipe.spec!r} needs each batch's sequence "
                             "log-ratios, which TRL's GRPOTrainer does not hand to callbacks: use "
                             "llm_scale.integrations.trl.StabilizerGRPOTrainer(recipe=...), which collects them")  # fmt: skip
        self.recipe = recipe
        self.sink = sink
        self.step = TransformStep()
        self.restored_from: str | None = None

    @property
    def active(self) -> bool:
        """Whether the recipe has gradient transforms to apply (state is saved either way)."""
        return bool(self.recipe.transforms)

    def collect(self, logp: Tensor, behavior_logp: Tensor, mask: Tensor) -> None:
        if self.active:
            self.step.collect(logp, behavior_logp, mask)

    def restore(self, checkpoint: str | os.PathLike) -> bool:
        """Load the recipe's state saved in ``checkpoint``; warn (one line) and return False when it has none."""
        found = load_recipe_state(self.recipe, checkpoint)
        self.restored_from = str(checkpoint)
        if not found:
            warnings.warn(missing_state_warning("TRL trainer", checkpoint, self.recipe.spec), stacklevel=2)
        return found

    def on_train_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if self.active and uses_deepspeed(args):
            raise ValueError(f"gradient transforms of recipe {self.recipe.spec!r} cannot run under DeepSpeed: it steps "
                             "the optimizer inside backward, before TRL's on_pre_optimizer_step; train with FSDP "
                             "(accelerate config fsdp_version: 2) or without deepspeed")  # fmt: skip
        if state.global_step > 0 and self.restored_from is None:  # resumed by a trainer that did not call restore
            self.restore(resumed_checkpoint(args, state))

    def on_save(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if args.should_save:
            save_recipe_state(self.recipe, os.path.join(args.output_dir, f"checkpoint-{state.global_step}"))

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None, **kw: Any) -> None:
        if model is None or optimizer is None or not self.active:
            return
        metrics = self.step.before_step(self.recipe, optimizer, [p for p in model.parameters() if p.requires_grad])
        if self.sink is not None:
            for key, value in metrics.items():
                self.sink[f"stabilizer/{key}"].append(float(value))

    def on_optimizer_step(self, args: Any, state: Any, control: Any, optimizer: Any = None, **kw: Any) -> None:
        if optimizer is not None:
            self.step.after_step(optimizer)


def uses_deepspeed(args: Any) -> bool:
    """Whether the run trains under DeepSpeed: TrainingArguments.deepspeed, or ``accelerate launch`` with a DeepSpeed
    config (ACCELERATE_USE_DEEPSPEED)."""
    return bool(getattr(args, "deepspeed", None)) or os.environ.get("ACCELERATE_USE_DEEPSPEED", "").lower() == "true"


def resumed_checkpoint(args: Any, state: Any, depth: int = 8) -> str:
    """The checkpoint a resumed run loaded. Callbacks are not told it: transformers' training loop holds it as its
    local ``resume_from_checkpoint``, read here from the calling frames (up to ``depth``); where no frame holds a
    directory by that name, ``output_dir/checkpoint-<global_step>``."""
    frame = sys._getframe(1)
    for _ in range(depth):
        if frame is None:
            break
        path = frame.f_locals.get("resume_from_checkpoint")
        if isinstance(path, str | os.PathLike) and os.path.isdir(path):
            return str(path)
        frame = frame.f_back
    return os.path.join(args.output_dir, f"checkpoint-{state.global_step}")


# -- the synchronous trainer ------------------------------------------------------------------------


class StabilizerGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` with the policy loss's surrogate replaced by ``recipe``'s (see the module docstring).

    Args (besides GRPOTrainer's):
      recipe: a spec for ``testbed.stabilizers.build`` or a `Recipe`.
      behavior: ``"old"`` (TRL's old_per_token_logps; vLLM weights multiply on top) or ``"sampler"``
        (vLLM's log-probs; needs ``vllm_importance_sampling_correction=False``).
    """

    def __init__(self, *args: Any, recipe: str | Recipe = "pg", behavior: str = "old", **kwargs: Any) -> None:
        if "agg" in kwargs:
            raise TypeError(
                f"agg={kwargs['agg']!r} is not a StabilizerGRPOTrainer argument: the normalisation is TRL's, set by "
                "GRPOConfig.loss_type (token-mean: 'dapo' or 'bnpo', seq-mean-token-mean: 'grpo', "
                "seq-mean-token-sum: 'luspo', seq-mean-token-sum-norm: 'dr_grpo')"
            )
        config = config_of(args, kwargs)
        self.behavior = behavior
        self.recipe = compose_recipe(recipe, config, behavior) if config is not None else None
        super().__init__(*args, **kwargs)
        if self.recipe is None:
            self.recipe = compose_recipe(recipe, self.args, behavior)
        self.stabilizer_callback = GradientTransformCallback(self.recipe, sink=self._metrics["train"], batch_stats=True)
        self.add_callback(self.stabilizer_callback)  # it saves the recipe's state even without transforms

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        self.stabilizer_callback.restore(resume_from_checkpoint)

    def _behavior_logp(self, inputs: Mapping[str, Any], old: Tensor) -> Tensor:
        if self.behavior == "sampler" and inputs.get("sampling_per_token_logps") is not None:
            sampled = inputs["sampling_per_token_logps"]
            return torch.where(torch.isfinite(sampled), sampled, old)  # tokens vLLM could not score: as TRL, no correction
        return old

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Tensor:
        # Mirrors GRPOTrainer._compute_loss (trl 1.16) line for line except the per-token surrogate.
        prompt_ids, prompt_mask = inputs["prompt_ids"], inputs["prompt_mask"]
        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
        attention_mask = torch.cat([prompt_mask, completion_mask], dim=1)
        mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        logp, entropies, aux_loss = self._get_per_token_logps_and_entropies(
            model, input_ids, attention_mask, completion_ids.size(1), compute_entropy=True,
            compute_aux_loss=self.aux_loss_enabled, **{k: inputs.get(k) for k in _MM_KEYS},
        )  # fmt: skip
        entropy_mask = None
        if self.top_entropy_quantile < 1.0:
            entropy_mask = self.get_high_entropy_mask(entropies, mask, 1 - self.top_entropy_quantile)
        advantages = inputs["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        old = inputs.get("old_per_token_logps")
        old = logp.detach() if old is None else old
        if self.off_policy_mask_threshold is not None:
            sampling = inputs.get("sampling_per_token_logps", old)
            off_policy_mask = self.get_off_policy_mask(advantages, logp, sampling, mask, self.off_policy_mask_threshold)

        # the recipe's surrogate, on TRL's tokens
        behavior = self._behavior_logp(inputs, old)
        terms, n_bad = PolicyTerms(logp, behavior, advantages.expand_as(logp), mask.bool()).checked("mask")
        loss_mat, used, metrics = self.recipe.surrogate.per_token(terms)
        per_token_loss = torch.where(used, loss_mat, torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device))
        per_token_loss = per_token_loss.to(logp.dtype)
        metrics["nonfinite_masked"] = float(n_bad)
        own_loss = per_token_loss.detach()  # the surrogate's own value, before TRL's masks, weights and KL

        if self.off_policy_mask_threshold is not None:
            per_token_loss = per_token_loss * off_policy_mask
        if entropy_mask is not None:
            per_token_loss = per_token_loss * entropy_mask
        if self.use_vllm and self.vllm_importance_sampling_correction:
            per_token_loss = per_token_loss * inputs["importance_sampling_ratio"]
        if self.beta != 0.0:
            ref = inputs["ref_per_token_logps"]
            per_token_kl = torch.exp(ref - logp) - (ref - logp) - 1
            if self.args.use_bias_correction_kl:
                log_ratio = logp - old
                if self.importance_sampling_level == "sequence":
                    log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
                per_token_kl = per_token_kl * torch.exp(log_ratio)
            per_token_loss = per_token_loss + self.beta * per_token_kl

        mode = "train" if self.model.training else "eval"
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        loss = self._normalise(per_token_loss, mask, inputs, mode)
        unscale = 1.0 if self.loss_type in ("dapo", "cispo") else accumulation
        policy_loss = loss.detach() * unscale
        with torch.no_grad():
            metrics["surrogate_loss"] = float(self.accelerator.gather(self._normalise(own_loss, mask, inputs, mode) * unscale).nanmean())

        if self._entropy_bonus_enabled:
            loss = loss - self._entropy_bonus(entropies, mask, entropy_mask, mode, accumulation)
            self._metrics[mode]["policy_loss"].append(self.accelerator.gather(policy_loss).nanmean().item())
        if self.aux_loss_enabled:
            loss = loss + self.router_aux_loss_coef * aux_loss / accumulation
            self._metrics[mode]["aux_loss"].append(self.accelerator.gather_for_metrics(aux_loss).mean().item())

        def global_masked_mean(x: Tensor) -> float:
            totals = self.accelerator.reduce(torch.stack([(x * mask).sum(), mask.sum().float()]), reduction="sum")
            return (totals[0] / totals[1].clamp(min=1.0)).item()

        if self.beta != 0.0:
            self._metrics[mode]["kl"].append(global_masked_mean(per_token_kl.expand_as(logp)))
        self._metrics[mode]["entropy"].append(global_masked_mean(entropies))
        if self.recipe.surrogate.name in HOST_CLIP_SURROGATES:  # TRL's clip_ratio/*: where the surrogate's clip binds
            ratio, adv = torch.exp(logp.detach() - behavior), advantages.expand_as(logp)
            low = (ratio < 1 - self.recipe.surrogate.lo_eps) & (adv < 0)
            high = (ratio > 1 + self.recipe.surrogate.hi_eps) & (adv > 0)
            for key, flags in (("low_mean", low), ("high_mean", high), ("region_mean", low | high)):
                self._metrics[mode][f"clip_ratio/{key}"].append(global_masked_mean(flags.float()))
            per_seq = [(f.float() * mask).sum(-1) / mask.sum(-1) for f in (low, high)]  # NaN for an empty sequence, as TRL
            self._metrics[mode]["clip_ratio/low_min"].append(nanmin(self.accelerator.gather(per_seq[0])).item())
            self._metrics[mode]["clip_ratio/high_max"].append(nanmax(self.accelerator.gather(per_seq[1])).item())
        if mode == "train":
            self.stabilizer_callback.collect(logp, behavior, terms.mask)
        for key, value in metrics.items():
            self._metrics[mode][f"stabilizer/{key}"].append(float(value))
        return loss

    def _normalise(self, per_token_loss: Tensor, mask: Tensor, inputs: Mapping[str, Any], mode: str) -> Tensor:
        """TRL's aggregation for ``self.loss_type``, including its gradient-accumulation scaling."""
        accumulation = self.current_gradient_accumulation_steps if mode == "train" else 1.0
        if self.loss_type == "grpo":
            return ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
        if self.loss_type == "bnpo":
            return (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0) / accumulation
        if self.loss_type == "dr_grpo":
            return (per_token_loss * mask).sum() / (per_token_loss.size(0) * self.max_completion_length) / accumulation
        if self.loss_type in ("dapo", "cispo"):
            normaliser = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            if mode == "train":
                normaliser = normaliser * self.current_gradient_accumulation_steps / self.args.steps_per_generation
            return (per_token_loss * mask).sum() / normaliser
        if self.loss_type == "luspo":
            return (per_token_loss * mask).sum(-1).mean() / accumulation
        raise ValueError(f"GRPOConfig.loss_type={self.loss_type!r} is unknown; allowed: {', '.join(LOSS_TYPES)}")

    def _entropy_bonus(self, entropies: Tensor, mask: Tensor, entropy_mask: Tensor | None, mode: str, accumulation: float) -> Tensor:
        """TRL's entropy bonus (coefficient times mean entropy), with its adaptive controller's update."""
        effective_mask = mask if entropy_mask is None else mask * entropy_mask
        entropy_loss = (entropies * effective_mask).sum() / effective_mask.sum().clamp(min=1.0) / accumulation
        if self.use_adaptive_entropy:
            coef = self.entropy_coef if self._last_world_entropy <= self.args.entropy_target else 0.0
        else:
            coef = self.entropy_coef
        if self.use_adaptive_entropy and mode == "train":
            stats = torch.stack([(entropies * effective_mask).sum(), effective_mask.sum()]).detach()
            self._entropy_window_stats = stats if self._entropy_window_stats is None else self._entropy_window_stats + stats
            if self.accelerator.sync_gradients:
                window = self.accelerator.reduce(self._entropy_window_stats, reduction="sum")
                world_entropy = (window[0] / window[1].clamp(min=1.0)).item()
                step = self.args.entropy_coef_delta
                if world_entropy <= self.args.entropy_target:
                    self.entropy_coef = min(self.entropy_coef + step, self.args.entropy_coef_max)
                else:
                    self.entropy_coef = max(self.entropy_coef - step, self.args.entropy_coef_min)
                self._last_world_entropy = world_entropy
                self._entropy_window_stats = None
        if mode == "train" and self.accelerator.sync_gradients:
            self._metrics[mode]["entropy_coef"].append(self.entropy_coef)
        return coef * entropy_loss


# -- the asynchronous trainer (trl.experimental) ----------------------------------------------------


def unpack_segments(values: Tensor, segment_id: Tensor, n_seq: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Scatter flat per-token ``values`` [N] into ``[n_seq, T]`` by ``segment_id`` (order kept within a segment).

    Returns (padded values, mask, row index [N], column index [N]); differentiable in ``values``.
    """
    n = values.numel()
    order = torch.sort(segment_id, stable=True).indices
    counts = torch.bincount(segment_id, minlength=n_seq)
    starts = torch.cumsum(counts, 0) - counts
    col = torch.empty(n, dtype=torch.long, device=values.device)
    col[order] = torch.arange(n, device=values.device) - starts[segment_id[order]]
    width = int(counts.max()) if n else 0
    padded = values.new_zeros((n_seq, width)).index_put((segment_id, col), values)
    mask = torch.zeros((n_seq, width), dtype=torch.bool, device=values.device)
    mask[segment_id, col] = True
    return padded, mask, segment_id, col


def _async_trainer_class() -> type:
    try:
        from trl.experimental.async_grpo import AsyncGRPOTrainer
    except ImportError as exc:  # pragma: no cover - depends on the installed trl
        raise ImportError(f"StabilizerAsyncGRPOTrainer needs trl.experimental.async_grpo (trl >= 1.x): {exc}") from exc
    check_upstream("AsyncGRPOTrainer.compute_loss", AsyncGRPOTrainer.compute_loss)
    return AsyncGRPOTrainer


def _make_async_trainer() -> type:
    base = _async_trainer_class()

    class StabilizerAsyncGRPOTrainer(base):  # type: ignore[misc, valid-type]
        """``trl.experimental.async_grpo.AsyncGRPOTrainer`` with the surrogate replaced by ``recipe``'s.

        The behaviour log-probs are the rollout worker's (``old_log_probs``, vLLM's); the loss keeps
        this trainer's normalisation and MoE auxiliary loss; ``epsilon`` / ``epsilon_high`` map as in
        `compose_recipe`. Gradient transforms run through `GradientTransformCallback`.
        """

        def __init__(self, *args: Any, recipe: str | Recipe = "pg", **kwargs: Any) -> None:
            config = config_of(args, kwargs)  # AsyncGRPOTrainer(model, reward_funcs, args, ...)
            self.recipe = compose_recipe(recipe, config) if config is not None else None
            super().__init__(*args, **kwargs)
            if self.recipe is None:
                self.recipe = compose_recipe(recipe, self.args)
            self.stabilizer_callback = GradientTransformCallback(self.recipe, sink=self._metrics["train"], batch_stats=True)
            self.add_callback(self.stabilizer_callback)

        def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
            super()._load_from_checkpoint(resume_from_checkpoint, model)
            self.stabilizer_callback.restore(resume_from_checkpoint)

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Tensor:
            return stabilizer_async_loss(self, model, inputs)

    return StabilizerAsyncGRPOTrainer


def stabilizer_async_loss(trainer: Any, model: Any, inputs: dict[str, Any]) -> Tensor:
    """AsyncGRPOTrainer.compute_loss (trl 1.16) with ``trainer.recipe``'s surrogate in place of its clipped ratio."""
    mask_bool = inputs["attention_mask"].bool()
    selected = inputs["token_index"] >= 0
    token_index = inputs["token_index"][selected]
    old_log_probs = inputs["old_log_probs"][selected]
    advantages = inputs["advantages"][selected]
    segment_id = inputs["segment_id"][selected].long()
    tree_kwargs = {key: inputs[key][inputs[key] >= 0] for key in ("tree_kv_index", "tree_cu_seqlens_q", "tree_cu_seqlens_k")}
    tree_kwargs["tree_max_seqlen_q"], tree_kwargs["tree_max_seqlen_k"] = inputs["tree_max_seqlens"][0].tolist()
    router_kwargs = {"output_router_logits": True} if trainer.aux_loss_enabled else {}
    forward_start = time.time()
    outputs = model(
        input_ids=inputs["input_ids"][mask_bool].unsqueeze(0), position_ids=inputs["position_ids"][mask_bool].unsqueeze(0),
        shift_labels=inputs["shift_labels"][mask_bool].unsqueeze(0), fused_lm_head=True, **router_kwargs, **tree_kwargs,
    )  # fmt: skip
    trainer._last_forward_time_s = time.time() - forward_start
    log_probs = outputs.log_probs.flatten()[token_index]
    entropy = outputs.entropy.flatten()[token_index]

    n_seq = int(segment_id.max()) + 1 if segment_id.numel() else 0
    logp, mask, row, col = unpack_segments(log_probs, segment_id, n_seq)
    behavior, _, _, _ = unpack_segments(old_log_probs.to(log_probs.dtype), segment_id, n_seq)
    adv, _, _, _ = unpack_segments(advantages.to(log_probs.dtype), segment_id, n_seq)
    terms, n_bad = PolicyTerms(logp, behavior, adv, mask).checked("mask")
    loss_mat, used, metrics = trainer.recipe.surrogate.per_token(terms)
    loss_mat = torch.where(used, loss_mat, torch.zeros((), dtype=loss_mat.dtype, device=loss_mat.device))
    per_token_loss = loss_mat[row, col].to(log_probs.dtype)

    global_n_tokens = inputs["global_n_tokens"][0]
    tokens_per_rank = (global_n_tokens / trainer.accelerator.num_processes).clamp(min=1.0)
    loss = per_token_loss.sum() / tokens_per_rank.to(torch.float32) / trainer.current_gradient_accumulation_steps
    if trainer.aux_loss_enabled:
        loss = loss + trainer.router_aux_loss_coef * outputs.aux_loss / trainer.current_gradient_accumulation_steps

    with torch.no_grad():
        stats = trainer.accelerator.reduce(torch.stack([entropy.sum(), torch.tensor(float(entropy.numel()), device=entropy.device)]), reduction="sum")
        trainer._metrics["train"]["entropy"].append((stats[0] / stats[1].clamp(min=1.0)).item())
        # the surrogate's own value: its mean over the step's tokens on every rank (the logged loss, less the
        # MoE auxiliary loss and the accumulation scaling)
        own = trainer.accelerator.reduce(per_token_loss.detach().float().sum(), reduction="sum")
        metrics["surrogate_loss"] = float(own / global_n_tokens.to(torch.float32).clamp(min=1.0))
    metrics["nonfinite_masked"] = float(n_bad)
    for key, value in metrics.items():
        trainer._metrics["train"][f"stabilizer/{key}"].append(float(value))
    trainer.stabilizer_callback.collect(logp, behavior, terms.mask)
    # the trainer's per-step accounting, as in AsyncGRPOTrainer.compute_loss
    n_forward_tokens = float(inputs["global_n_forward_tokens"][0])
    mean_seq_len = float(inputs["mean_seq_len"][0])
    trainer._step_forward_tokens += n_forward_tokens
    trainer._step_trained_tokens += float(global_n_tokens)
    trainer._step_seq_len_weighted += mean_seq_len * n_forward_tokens
    trainer._step_samples += n_forward_tokens / mean_seq_len
    trainer._step_forward_s += trainer._last_forward_time_s
    return loss


def __getattr__(name: str) -> Any:
    # The asynchronous trainer is built on first use: importing trl.experimental warns and is not needed otherwise.
    if name == "StabilizerAsyncGRPOTrainer":
        cls = _make_async_trainer()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
