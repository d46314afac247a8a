"""verl plugin: every stabilizer surrogate as a verl policy loss, gradient transforms as optimizer hooks.

Importing this module registers each surrogate of ``testbed.stabilizers`` in verl's
``POLICY_LOSS_REGISTRY`` (through verl's own ``register_policy_loss``) as ``tb_<name>``
(``tb_dg``, ``tb_tis``, ``tb_ppo``, ``tb_decoupled_ppo``, ...). Each loss has verl's call signature::

    loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
        -> (scalar loss, {metric: float})

and aggregates with verl's own ``agg_loss``, including the global-batch normalisation
(``config.global_batch_info``: dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
when the installed verl has it, so a ``tb_*`` loss is normalised exactly like verl's built-ins.

Mapping of verl's quantities onto `PolicyTerms`: ``log_prob`` -> logp (learner, with grad);
``old_log_prob`` -> behavior_logp (in verl this is the policy recomputed at the start of the update,
i.e. AReaL's proximal policy; the rollout engine's log-probs reach the loss only through
``rollout_is_weights``, which multiply the per-token loss exactly as in verl's built-in losses, so
``tb_ppo`` with verl's rollout correction is AReaL's decoupled objective).

Extra parameters go through `StabilizerPolicyLossConfig` (a subclass of verl's ``PolicyLossConfig``):
``stabilizer_params`` (the surrogate's parameters, e.g. ``{eta: 0.5}`` for dg) and
``gradient_transforms`` (a spec such as ``"gac(t_low=0.1)+ess_lr"``). Gradient transforms run as a
global ``torch.optim`` step pre-hook that acts only on an optimizer step preceded by a ``tb_*`` loss
(so a critic's optimizer is untouched): it applies the transforms to that optimizer's gradients
with the batch statistics (sequence log-ratios, hence ESS) gathered by the loss calls since the
previous step, scales every param group's lr for that step (a scale of 0 skips the step), and a post-hook restores it.

Switching it on in a (multi-node) verl run: the module must be imported in every worker process.
Either install this package where the workers run (its ``verl.plugins`` entry point makes verl
import it automatically), or set ``VERL_USE_EXTERNAL_MODULES=llm_scale.integrations.verl`` in the
workers' environment (e.g. Ray's runtime_env ``env_vars``), or name it in the model config's
``external_lib``. Then::

    actor_rollout_ref.actor.policy_loss._target_=llm_scale.integrations.verl.StabilizerPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=tb_dg
    +actor_rollout_ref.actor.policy_loss.stabilizer_params.eta=1.0
    +actor_rollout_ref.actor.policy_loss.gradient_transforms='gac(t_low=0.1)'
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

try:
    from verl.trainer.ppo import core_algos
    from verl.workers.config import PolicyLossConfig
except ImportError as exc:  # pragma: no cover - exercised only without verl
    raise ImportError(
        f"llm_scale.integrations.verl needs verl (pip install verl, or the 'verl' extra); importing it failed: {exc}"
    ) from exc

from testbed.stabilizers import SURROGATES, PolicyTerms, Recipe, build
from testbed.stabilizers.base import Surrogate

from .hooks import TransformStep

PREFIX = "tb_"


@dataclass
class StabilizerPolicyLossConfig(PolicyLossConfig):
    """verl's PolicyLossConfig plus the stabilizer's parameters.

    Attributes:
      stabilizer_params: keyword parameters of the surrogate named by ``loss_mode`` (``tb_<name>``).
      gradient_transforms: a spec of gradient transforms (``"gac+ess_lr"``) applied before each
        optimizer step that follows a ``tb_*`` loss; empty for none.
    """

    stabilizer_params: dict = field(default_factory=dict)
    gradient_transforms: str = ""


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    try:
        value = config.get(key, default) if hasattr(config, "get") else getattr(config, key, default)
    except Exception:  # omegaconf struct mode raises on unknown keys
        return default
    return default if value is None else value


def _policy_loss_config(config: Any) -> Any:
    """verl passes the actor config (with ``.policy_loss``) or, in some paths, the loss config itself."""
    inner = _get(config, "policy_loss")
    return inner if inner is not None else config


_lock = threading.Lock()
_surrogates: dict[tuple[str, tuple], Surrogate] = {}


def _surrogate(name: str, params: dict[str, Any]) -> Surrogate:
    """The surrogate ``name`` with ``params``, built through the shared registry (cached)."""
    key = (name, tuple(sorted((k, repr(v)) for k, v in params.items())))
    with _lock:
        if key not in _surrogates:
            args = ", ".join(f"{k}={v!r}" for k, v in params.items())
            _surrogates[key] = build(f"{name}({args})" if args else name).surrogate
        return _surrogates[key]


def _global_batch_info(config: Any) -> dict[str, Any]:
    info = _get(config, "global_batch_info")
    return {k: v for k, v in dict(info).items()} if info else {}


def make_policy_loss(name: str) -> Any:
    """verl policy-loss function for the registered surrogate ``name``."""
    if name not in SURROGATES:
        raise ValueError(f"unknown surrogate {name!r}; allowed: {', '.join(sorted(SURROGATES))}")

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        loss_cfg = _policy_loss_config(config)
        surrogate = _surrogate(name, dict(_get(loss_cfg, "stabilizer_params", {}) or {}))
        terms, n_bad = PolicyTerms(log_prob, old_log_prob, advantages, response_mask.bool()).checked("mask")
        loss_mat, used, metrics = surrogate.per_token(terms)
        if rollout_is_weights is not None:
            loss_mat = loss_mat * rollout_is_weights.detach()
        loss_mat = torch.where(used, loss_mat, torch.zeros_like(loss_mat))
        agg = getattr(surrogate, "agg", None) or loss_agg_mode  # e.g. gspo fixes seq-mean-token-mean, as verl's gspo
        loss = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=used, loss_agg_mode=agg, **_global_batch_info(config))
        transforms = str(_get(loss_cfg, "gradient_transforms", "") or "")
        if transforms:
            _HOOKS.collect(transforms, terms)
        out = {f"actor/{PREFIX}{k}": float(v) for k, v in metrics.items()}
        out[f"actor/{PREFIX}nonfinite_masked"] = float(n_bad)
        return loss, out

    policy_loss.__name__ = f"compute_policy_loss_{PREFIX}{name}"
    policy_loss.__doc__ = f"verl policy loss running the stabilizer surrogate {name!r}.\n\n{SURROGATES[name].__doc__ or ''}"
    return policy_loss


def register(prefix: str = PREFIX) -> list[str]:
    """Register every surrogate under ``prefix + name`` with verl's ``register_policy_loss``; return the names."""
    names = []
    for name in sorted(SURROGATES):
        core_algos.register_policy_loss(prefix + name)(make_policy_loss(name))
        names.append(prefix + name)
    return names


class _TransformHooks:
    """Gradient transforms as torch.optim step hooks (`TransformStep`: pre-hook transforms and scales lr,
    post-hook restores it).

    Installed globally (the default, lazily on the first loss call naming transforms), the pre-hook
    acts only when some ``tb_*`` loss recorded statistics since the last step, so optimizers not fed
    by a ``tb_*`` loss (a critic's) are untouched. Installed on one optimizer
    (`install_gradient_transforms`), it acts on every step of that one.
    """

    def __init__(self) -> None:
        self.recipes: dict[str, Recipe] = {}
        self.spec: str | None = None
        self.step = TransformStep()
        self.handles: list[Any] = []
        self.explicit = False
        self.lock = threading.Lock()

    def recipe(self, spec: str) -> Recipe:
        if spec not in self.recipes:
            recipe = build(spec)
            if not recipe.transforms:
                raise ValueError(f"gradient_transforms {spec!r} names no gradient transform")
            self.recipes[spec] = recipe
        return self.recipes[spec]

    def collect(self, spec: str, terms: PolicyTerms) -> None:
        with self.lock:
            self.recipe(spec)
            self.spec = spec
            self.step.collect(terms.logp, terms.behavior_logp, terms.mask)
            if not self.explicit and not self.handles:
                self.handles = [register_optimizer_step_pre_hook(self.pre_hook),
                                register_optimizer_step_post_hook(self.post_hook)]  # fmt: skip

    def pre_hook(self, optimizer: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        with self.lock:
            if self.spec is None or (not self.step.pending and not self.explicit):
                return
            self.step.before_step(self.recipe(self.spec), optimizer)

    def post_hook(self, optimizer: torch.optim.Optimizer, args: Any = (), kwargs: Any = None) -> None:
        self.step.after_step(optimizer)

    @property
    def last_metrics(self) -> dict[str, float]:
        return self.step.history[-1] if self.step.history else {}

    def reset(self) -> None:
        """Remove every hook and forget pending statistics (the recipes, with their state, are kept)."""
        for handle in self.handles:
            handle.remove()
        self.handles, self.explicit, self.spec = [], False, None
        self.step = TransformStep()


_HOOKS = _TransformHooks()


def install_gradient_transforms(optimizer: torch.optim.Optimizer, spec: str) -> Recipe:
    """Apply the gradient transforms of ``spec`` before every step of ``optimizer`` (when you hold it).

    Replaces the global hook. Batch statistics (ESS) come from the ``tb_*`` loss calls since the
    previous step when their config names ``gradient_transforms``; otherwise transforms see none.
    Returns the recipe whose transforms run (its ``state_dict`` holds e.g. gac's reference gradient).
    """
    recipe = _HOOKS.recipe(spec)
    _HOOKS.reset()
    _HOOKS.spec, _HOOKS.explicit = spec, True
    _HOOKS.handles = [optimizer.register_step_pre_hook(_HOOKS.pre_hook), optimizer.register_step_post_hook(_HOOKS.post_hook)]
    return recipe


def transform_state_dict() -> dict[str, Any]:
    """State of the gradient transforms in this process (e.g. gac's reference), for checkpoints."""
    return {spec: recipe.state_dict() for spec, recipe in _HOOKS.recipes.items()}


def load_transform_state_dict(state: dict[str, Any]) -> None:
    for spec, sub in state.items():
        _HOOKS.recipe(spec).load_state_dict(sub)


REGISTERED = register()
