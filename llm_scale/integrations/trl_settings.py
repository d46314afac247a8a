"""The TRL plugin's settings, importable without trl: how each ``GRPOConfig`` / ``TrainingArguments`` field
meets a stabilizer recipe (`GRPO_SETTINGS`, `TRAINING_ARGS_SETTINGS`), the supported TRL releases, and
`compose_recipe`, which applies TRL's clip settings to a recipe's surrogate or refuses them. The trainers that
use them are in `llm_scale.integrations.trl` (which needs trl).

* **Clip settings** go to the recipe's surrogate where it has the same notion (`TRL_CLIP_MAPPING`):
  ``epsilon`` -> ``eps_low`` and ``epsilon_high`` (default ``epsilon``) -> ``eps_high`` of ppo,
  decoupled_ppo, gspo and cispo; ``delta`` -> ppo's ``dual_clip`` (TRL's two-sided clip is PPO's
  dual clip when ``delta >= 1 + epsilon_high``); with ``loss_type="cispo"``, TRL's cap
  ``epsilon_high`` is cispo's ``1 + eps_high`` (no lower bound), so the cispo recipe is TRL's cispo.
  A parameter written in the recipe spec (``ppo(eps=0.1)``) is a deliberate difference and wins
  over TRL's default; both set to different values is an error.
* **Refused** (one ValueError naming the setting and what is allowed), see `GRPO_SETTINGS`:
  ``loss_type`` ``sapo`` / ``vespo`` (TRL surrogates of their own that the recipe would replace) and
  ``cispo`` unless the recipe's surrogate is cispo; ``importance_sampling_level="sequence"`` unless
  the surrogate is gspo (TRL's sequence level *is* GSPO's length-normalised ratio); a non-default
  ``epsilon`` / ``epsilon_high`` / ``delta`` for a surrogate without ratio clipping; a recipe
  advantage other than the default (TRL computes the advantages: ``scale_rewards`` etc.).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from testbed.stabilizers import NAMED_RECIPES, SURROGATES, Recipe, build, parse_spec

# The TRL releases whose loss the trainers mirror, as [lowest, first unsupported).
SUPPORTED_TRL = ("1.16.0", "1.17.0")

# TRL loss types whose surrogate is PPO's clipped ratio: the recipe replaces that surrogate and the
# normalisation is kept. "cispo" is accepted only with the cispo recipe; the rest is refused.
PPO_FAMILY_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")
LOSS_TYPES = (*PPO_FAMILY_LOSS_TYPES, "cispo")
REFUSED_LOSS_TYPES = ("sapo", "vespo")

# Surrogates with a clipped (or bounded) ratio and the parameters TRL's settings map to.
CLIP_SURROGATES = {"ppo": ("eps", "eps_low", "eps_high", "dual_clip"), "decoupled_ppo": ("eps", "eps_low", "eps_high", "dual_clip"),
                   "gspo": ("eps_low", "eps_high"), "cispo": ("eps_low", "eps_high")}  # fmt: skip

TRL_CLIP_MAPPING = {
    "epsilon": "eps_low of ppo / decoupled_ppo / gspo / cispo",
    "epsilon_high": "eps_high of ppo / decoupled_ppo / gspo / cispo (default: epsilon); with loss_type='cispo' "
    "cispo's 1 + eps_high (TRL's absolute cap; eps_low = 1, no lower bound)",
    "delta": "dual_clip of ppo / decoupled_ppo (equal to TRL's two-sided clip when delta >= 1 + epsilon_high)",
}

# Every GRPOConfig field that is not a plain transformers TrainingArguments field, and what the plugin
# does with it. "honoured": used exactly as GRPOTrainer uses it (upstream of the loss or replicated in
# it); "composed": combined with the recipe as stated; "refused": a ValueError when it would change
# TRL's loss in a way the recipe cannot follow; "no effect on the loss": sampling, vLLM transport,
# logging or data-loading options.
GRPO_SETTINGS: dict[str, str] = {
    # loss and gradient
    "loss_type": "composed: its normalisation is kept for every accumulation; its surrogate is the recipe's. "
    "grpo/bnpo/dr_grpo/dapo/luspo accepted; cispo only with the cispo recipe (then it is TRL's cispo); "
    "sapo/vespo refused",
    "epsilon": "composed: " + TRL_CLIP_MAPPING["epsilon"] + "; refused (non-default) for other surrogates",
    "epsilon_high": "composed: " + TRL_CLIP_MAPPING["epsilon_high"] + "; refused (set) for other surrogates",
    "delta": "composed: " + TRL_CLIP_MAPPING["delta"] + "; refused for other surrogates or delta < 1 + epsilon_high",
    "importance_sampling_level": "composed: 'sequence' is GSPO's ratio, accepted only with the gspo recipe "
    "(refused otherwise); also sets the KL bias-correction ratio as in TRL",
    "beta": "honoured: TRL's k3 KL to the reference model added per token before the normalisation",
    "use_bias_correction_kl": "honoured: the KL term is multiplied by TRL's ratio to old_per_token_logps",
    "top_entropy_quantile": "honoured: TRL's high-entropy mask multiplies the recipe's per-token loss",
    "entropy_coef": "honoured: TRL's entropy bonus (mean entropy / accumulation steps)",
    "use_adaptive_entropy": "honoured: TRL's adaptive entropy controller, same state and update",
    "entropy_coef_min": "honoured (adaptive entropy)",
    "entropy_coef_max": "honoured (adaptive entropy)",
    "entropy_coef_delta": "honoured (adaptive entropy)",
    "entropy_target": "honoured (adaptive entropy)",
    "off_policy_mask_threshold": "honoured: TRL's off-policy sequence mask multiplies the recipe's per-token loss",
    "vllm_importance_sampling_correction": "composed: TRL's weights multiply the recipe's per-token loss "
    "(behavior='old'); must be False with behavior='sampler'",
    "vllm_importance_sampling_mode": "honoured: TRL computes the correction weights with it",
    "vllm_importance_sampling_clip_max": "honoured: TRL computes the correction weights with it",
    "vllm_importance_sampling_clip_min": "honoured: TRL computes the correction weights with it",
    "vllm_importance_sampling_cap": "honoured (deprecated alias of vllm_importance_sampling_clip_max)",
    "router_aux_loss_coef": "honoured: the MoE auxiliary loss is added as in TRL",
    "max_completion_length": "honoured: generation length and dr_grpo's normaliser",
    "mask_truncated_completions": "honoured: TRL zeroes the completion mask the recipe receives",
    "num_iterations": "honoured: batches reused; old_per_token_logps become the behaviour policy",
    "steps_per_generation": "honoured: off-policy micro-batches get TRL's old_per_token_logps",
    "generation_batch_size": "honoured (as steps_per_generation)",
    "scale_rewards": "honoured: TRL computes the advantages the recipe uses",
    "reward_weights": "honoured: TRL computes the advantages the recipe uses",
    "multi_objective_aggregation": "honoured: TRL computes the advantages the recipe uses",
    "num_generations": "honoured: TRL's group size for its advantages",
    "temperature": "honoured: sampling and TRL's log-prob recomputation",
    "sync_ref_model": "honoured: TRL's reference-model update (KL term)",
    "ref_model_mixup_alpha": "honoured: TRL's reference-model update (KL term)",
    "ref_model_sync_steps": "honoured: TRL's reference-model update (KL term)",
    "cast_lm_head_to_fp32": "honoured: model setting, the same log-probs",
    "disable_dropout": "honoured: model setting, the same log-probs",
    "use_liger_kernel": "honoured: model setting (layer kernels), the same loss path",
    "sapo_temperature_neg": "no effect: read only by loss_type='sapo', which is refused",
    "sapo_temperature_pos": "no effect: read only by loss_type='sapo', which is refused",
    "vespo_k_pos": "no effect: read only by loss_type='vespo', which is refused",
    "vespo_lambda_pos": "no effect: read only by loss_type='vespo', which is refused",
    "vespo_k_neg": "no effect: read only by loss_type='vespo', which is refused",
    "vespo_lambda_neg": "no effect: read only by loss_type='vespo', which is refused",
    # sampling (changes the data, not how the loss treats it; as in TRL)
    **dict.fromkeys(
        ("top_p", "top_k", "min_p", "repetition_penalty", "generation_kwargs", "chat_template_kwargs", "cache_implementation",
         "max_tool_calling_iterations", "num_generations_eval", "use_transformers_continuous_batching",
         "transformers_continuous_batching_config", "use_transformers_paged", "vllm_structured_outputs_regex"),
        "no effect on the loss: sampling options (the data), used by TRL as usual",
    ),
    # vLLM transport and placement
    **dict.fromkeys(
        ("use_vllm", "vllm_mode", "vllm_model_impl", "vllm_enable_sleep_mode", "vllm_server_base_url", "vllm_server_host",
         "vllm_server_port", "vllm_server_timeout", "vllm_group_port", "vllm_gpu_memory_utilization",
         "vllm_max_model_length", "vllm_tensor_parallel_size", "ds3_gather_for_generation"),
        "no effect on the loss: where and how completions are generated",
    ),
    # data, model loading, logging
    **dict.fromkeys(
        ("model_init_kwargs", "trust_remote_code", "remove_unused_columns", "shuffle_dataset", "pad_to_multiple_of",
         "log_completions", "log_multimodal", "num_completions_to_print", "log_unique_prompts",
         "log_completions_hub_repo", "logging_steps", "gradient_checkpointing", "bf16", "lr_scheduler_kwargs",
         "torch_empty_cache_steps", "learning_rate"),
        "no effect on the loss: data, model loading, logging or optimizer schedule, used by TRL as usual",
    ),
}

# Surrogates that clip the ratio current / behaviour with (eps_low, eps_high) as TRL's loss does: for them TRL's
# clip_ratio/* (low_mean, high_mean, region_mean, low_min, high_max) measure the same thing and are logged too.
HOST_CLIP_SURROGATES = ("ppo",)

# The TrainingArguments fields that touch the gradient or the step.
TRAINING_ARGS_SETTINGS: dict[str, str] = {
    "gradient_accumulation_steps": "honoured: TRL's normaliser for every loss_type (see loss_type)",
    "max_grad_norm": "composed: TRL clips first, then the recipe's gradient transforms run (0 leaves it to the recipe)",
    "learning_rate": "composed: a transform's lr scale multiplies every param group's lr for that step only",
    "lr_scheduler_type": "composed: the scheduler sets lr; a transform's scale multiplies it for one step",
    "optim": "composed: any torch optimizer; transforms act on its gradients before its step",
    "weight_decay": "honoured by the optimizer",
}


# -- composing a recipe with TRL's settings ---------------------------------------------------------


def _get(args: Any, name: str, default: Any = None) -> Any:
    return getattr(args, name, default)


def _explicit_surrogate_params(recipe: Recipe) -> dict[str, Any]:
    """The surrogate parameters that the recipe's spec writes out (its own or a bundle's), by name.

    For a `Recipe` assembled by hand (its spec does not rebuild its surrogate), every parameter that
    differs from the class default counts as written out.
    """
    surrogate = recipe.surrogate
    sname = surrogate.name
    init_fields = [f for f in dataclasses.fields(SURROGATES[sname]) if f.init and not f.name.startswith("_")]
    allowed = {f.name for f in init_fields}
    try:
        terms = parse_spec(recipe.spec)
        rebuilt = build(recipe.spec).surrogate == surrogate
    except ValueError:
        terms, rebuilt = [], False
    if not rebuilt:
        return {f.name: getattr(surrogate, f.name) for f in init_fields if getattr(surrogate, f.name) != f.default}
    out: dict[str, Any] = {}
    for name, params in terms:
        if name in NAMED_RECIPES:
            for part in NAMED_RECIPES[name]:
                if part.kind == "surrogate" and part.name == sname:
                    out.update(part.params)
        elif name != sname:
            continue
        for key, value in params.items():
            target, _, leaf = key.rpartition(".")
            if leaf in allowed and target in ("", sname):
                out[leaf] = value
    return out


def _refuse(setting: str, value: Any, why: str) -> ValueError:
    return ValueError(f"GRPOConfig.{setting}={value!r} {why}")


def compose_recipe(recipe: str | Recipe, args: Any, behavior: str = "old") -> Recipe:
    """The recipe with TRL's clip settings applied to its surrogate; ValueError for a setting it cannot follow.

    ``args`` is a ``GRPOConfig`` (or ``AsyncGRPOConfig``: only its epsilon settings exist). Returns a
    new `Recipe`; a `Recipe` passed in is not modified.
    """
    base = build(recipe) if isinstance(recipe, str) else recipe
    sname = base.surrogate.name
    if behavior not in ("old", "sampler"):
        raise ValueError(f"behavior={behavior!r} is not allowed; allowed: 'old' (TRL's old_per_token_logps), 'sampler' (vLLM's log-probs)")
    if base.advantage.name != "auto" and not (base.advantage.name == "group" and _get(args, "scale_rewards", "group") == "group"):
        raise ValueError(
            f"recipe {base.spec!r} sets advantage {base.advantage.name!r}, which cannot run inside TRL: TRL computes the "
            "advantages itself (GRPOConfig.scale_rewards, reward_weights, multi_objective_aggregation); use a recipe "
            "whose advantage is the default (e.g. 'tis(level=sequence, c=8)+ess_lr' instead of 'vcpo')"
        )
    loss_type = _get(args, "loss_type", "dapo")
    if loss_type in REFUSED_LOSS_TYPES:
        raise _refuse("loss_type", loss_type, f"is a surrogate of its own, which the recipe {base.spec!r} would replace; "
                      f"allowed: {', '.join(PPO_FAMILY_LOSS_TYPES)} (they differ only in normalisation), or 'cispo' with the cispo recipe")  # fmt: skip
    if loss_type not in LOSS_TYPES:
        raise _refuse("loss_type", loss_type, f"is unknown; allowed: {', '.join(LOSS_TYPES)}")
    if loss_type == "cispo" and sname != "cispo":
        raise _refuse("loss_type", loss_type, f"is TRL's CISPO surrogate, but the recipe's surrogate is {sname!r}; use the "
                      f"cispo recipe, or a normalisation-only loss_type: {', '.join(PPO_FAMILY_LOSS_TYPES)}")  # fmt: skip
    level = _get(args, "importance_sampling_level", "token")
    if level not in ("token", "sequence"):
        raise _refuse("importance_sampling_level", level, "is unknown; allowed: 'token', 'sequence'")
    if level == "sequence" and sname != "gspo":
        raise _refuse("importance_sampling_level", level, f"is GSPO's length-normalised sequence ratio, which recipe "
                      f"{base.spec!r} (surrogate {sname!r}) does not have; use recipe 'gspo' or importance_sampling_level='token'")  # fmt: skip
    if behavior == "sampler" and _get(args, "use_vllm", False) and _get(args, "vllm_importance_sampling_correction", True):
        raise _refuse("vllm_importance_sampling_correction", True, "would correct the engine mismatch a second time "
                      "with behavior='sampler' (the recipe's weights already use vLLM's log-probs); set it to False")  # fmt: skip

    epsilon = _get(args, "epsilon", 0.2)
    epsilon_high = _get(args, "epsilon_high", None)
    delta = _get(args, "delta", None)
    high = epsilon if epsilon_high is None else epsilon_high
    if sname not in CLIP_SURROGATES:
        for setting, value, default in (("epsilon", epsilon, 0.2), ("epsilon_high", epsilon_high, None), ("delta", delta, None)):
            if value != default:
                raise _refuse(setting, value, f"sets ratio clipping, which recipe {base.spec!r} (surrogate {sname!r}) does "
                              f"not have; leave it at its default ({default!r}) or use ppo, decoupled_ppo, gspo or cispo")  # fmt: skip
        return base

    wanted: dict[str, Any] = {}
    trl_set: dict[str, tuple[str, Any]] = {}  # parameter -> (TRL setting, value) when TRL's is not its default
    if loss_type == "cispo":
        if high < 1.0:
            raise _refuse("epsilon_high", epsilon_high, f"is TRL's CISPO cap on the ratio (epsilon={epsilon} when unset) "
                          "and must be >= 1 for the cispo recipe (TRL recommends 5.0)")  # fmt: skip
        wanted = {"eps_low": 1.0, "eps_high": float(high) - 1.0}
        if epsilon_high is not None:
            trl_set["eps_high"] = ("epsilon_high", epsilon_high)
    else:
        wanted = {"eps_low": float(epsilon), "eps_high": float(high)}
        if epsilon != 0.2:
            trl_set["eps_low"] = ("epsilon", epsilon)
        if epsilon_high is not None or epsilon != 0.2:
            trl_set["eps_high"] = ("epsilon_high" if epsilon_high is not None else "epsilon", high)
    if delta is not None:
        if "dual_clip" not in CLIP_SURROGATES[sname]:
            raise _refuse("delta", delta, f"is a dual clip on the ratio, which surrogate {sname!r} does not have; "
                          "use ppo or decoupled_ppo, or leave delta unset")  # fmt: skip
        if delta < 1.0 + high:
            raise _refuse("delta", delta, f"must be >= 1 + epsilon_high = {1.0 + high} for the recipe's dual clip "
                          "(below it TRL's two-sided clip is not a dual clip)")  # fmt: skip
        wanted["dual_clip"] = float(delta)
        trl_set["dual_clip"] = ("delta", delta)

    explicit = _explicit_surrogate_params(base)
    if sname == "gspo" and explicit.get("agg") is not None:
        raise ValueError(f"recipe {base.spec!r} sets gspo's agg={explicit['agg']!r}; inside TRL the normalisation is "
                         "GRPOConfig.loss_type ('grpo' is seq-mean-token-mean, 'dapo' token-mean over the window)")  # fmt: skip
    if "eps" in explicit:  # ppo's eps sets both bounds unless they are written out
        explicit.setdefault("eps_low", explicit["eps"])
        explicit.setdefault("eps_high", explicit["eps"])
    current = base.surrogate
    changes = {}
    for param, value in wanted.items():
        if param in explicit:
            mine = explicit[param]
            if param in trl_set and (mine is None or not math.isclose(float(mine), float(value))):
                setting, trl_value = trl_set[param]
                raise _refuse(setting, trl_value, f"conflicts with {param}={mine!r} written in recipe {base.spec!r}; "
                              "set the clip range in one place")  # fmt: skip
            continue
        changes[param] = value
    try:
        surrogate = dataclasses.replace(current, **changes) if changes else current
    except ValueError as exc:
        raise ValueError(f"GRPOConfig clip settings (epsilon={epsilon}, epsilon_high={epsilon_high}, delta={delta}) "
                         f"do not fit recipe {base.spec!r}: {exc}") from None  # fmt: skip
    return Recipe(base.spec, base.advantage, surrogate, base.transforms)


def config_of(args: tuple, kwargs: dict) -> Any:
    """The ``args`` (config) argument of a GRPOTrainer call, positional (third) or keyword."""
    if "args" in kwargs:
        return kwargs["args"]
    return args[2] if len(args) > 2 else None
