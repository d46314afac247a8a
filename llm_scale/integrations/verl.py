"""verl plugin: every stabilizer surrogate as a verl policy loss, gradient transforms as optimizer hooks.

Importing this module registers each surrogate of ``testbed.stabilizers`` in verl's
``POLICY_LOSS_REGISTRY`` (through verl's own ``register_policy_loss``) as ``tb_<name>``
(``tb_dg``, ``tb_tis``, ``tb_ppo``, ``tb_decoupled_ppo``, ...). Each loss has verl's call signature::

    loss_fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config, rollout_is_weights)
        -> (scalar loss, {metric: float})

and aggregates with verl's own ``agg_loss``, including the global-batch normalisation
(``config.global_batch_info``: dp_size, batch_num_tokens, global_batch_size, loss_scale_factor)
when the installed verl has it, so a ``tb_*`` loss is normalised exactly like verl's built-ins. The loss returned is what verl's actor
logs as ``actor/pg_loss``: for a surrogate verl also has (below) it is verl's own value, number for
number; the surrogate's own value (without verl's rollout weights) is logged as
``actor/tb_surrogate_loss``.

Mapping of verl's quantities onto `PolicyTerms`: ``log_prob`` -> logp (learner, with grad);
``old_log_prob`` -> behavior_logp (in verl this is the policy recomputed at the start of the update,
i.e. AReaL's proximal policy, or the rollout engine's log-probs in verl's bypass mode; otherwise the
rollout engine's log-probs reach the loss only through ``rollout_is_weights``, which multiply the
per-token loss exactly as in verl's built-in losses, so ``tb_ppo`` with verl's rollout correction is
AReaL's decoupled objective).

verl's own settings, read by default where the surrogate has the same notion (`VERL_CLIP_MAPPING`),
so that a ``tb_*`` loss equals its verl counterpart under the same config:

* ``clip_ratio_low`` (``clip_ratio`` when null) -> ``eps_low`` of ppo, decoupled_ppo, gspo, cispo;
* ``clip_ratio_high`` (``clip_ratio`` when null) -> ``eps_high`` of the same;
* ``clip_ratio_c`` -> ``dual_clip`` of ppo and decoupled_ppo (verl's vanilla always applies it);
* ``loss_agg_mode`` -> the aggregation of every ``tb_*`` loss, gspo's included;
* ``global_batch_info`` -> verl's global-batch normalisation (``agg_loss``).

Counterparts under verl's default config: ``tb_ppo`` == ``vanilla``, ``tb_decoupled_ppo`` ==
``vanilla`` (verl's loss call has no proximal policy), ``tb_gspo`` == ``gspo``, ``tb_cispo`` ==
``cispo``, ``tb_pg`` == ``gpg``, ``tb_tis`` / ``tb_is`` / ``tb_mis`` == ``bypass_mode`` with
``rollout_correction.loss_type=reinforce`` and token-level TIS / an unbounded threshold / IcePop
bounds. ``tb_dg``, ``tb_kondo``, ``tb_m2po`` and ``tb_pmpo`` have none. Deliberate differences are named
parameters in ``stabilizer_params``, which win over verl's settings: ``{dual_clip: null}`` (PPO
without dual clip), ``{eps_low: 3e-4, eps_high: 4e-4}``, ``{agg: seq-mean-token-mean}`` (gspo with
the GSPO paper's aggregation whatever ``loss_agg_mode`` says). One known numerical difference:
verl's gspo saturates the sequence log-ratio at 10 (with no gradient beyond), the surrogate at 20;
they differ only on sequences whose mean token log-ratio exceeds 10.

Switching it on in a (multi-node) verl run: the module must be imported in every worker process.
Either install this package where the workers run (its ``verl.plugins`` entry point,
`llm_scale.integrations.verl_plugin`, makes ``import verl`` import it, and logs one error line with
the cause if it cannot), or set ``VERL_USE_EXTERNAL_MODULES=llm_scale.integrations.verl`` in the
workers' environment (e.g. Ray's runtime_env ``env_vars``), or name it in the model config's
``external_lib``. Then::

    actor_rollout_ref.actor.policy_loss._target_=llm_scale.integrations.verl.StabilizerPolicyLossConfig
    actor_rollout_ref.actor.policy_loss.loss_mode=tb_dg
    +actor_rollout_ref.actor.policy_loss.stabilizer_params.eta=1.0
    +actor_rollout_ref.actor.policy_loss.gradient_transforms='gac(t_low=0.1)'

or start from the ready config ``llm_scale/integrations/configs/tb_dg_gac.yaml`` (README).

Checkpoints: verl has no hook for extra actor state, so importing this module wraps the
``save_checkpoint`` / ``load_checkpoint`` of verl's FSDP and Megatron checkpoint managers (used by the
legacy FSDP / Megatron workers and the fsdp, veomni and megatron engines) and of the torchtitan and
automodel engines, which keep checkpointers of their own (each wrapped where it is importable;
`wrap_checkpointing` wraps any class with the same two methods): each rank writes
``stabilizer_state_world_size_W_rank_R.pt`` into the actor's checkpoint directory, beside
``model_world_size_W_rank_R.pt`` (the gradient transforms' state per spec: gac's reference gradient and
threshold history, ess_lr's; and the stateful surrogates': a gate's random stream) and reads it back on
``trainer.resume_mode``. A state restored before the worker built its recipe is applied when it does. A
resumed actor whose checkpoint holds no state while the run uses some logs one warning line.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
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

from .hooks import TransformStep, missing_state_warning, needs_batch_stats, read_state, write_state

LOGGER = logging.getLogger(__name__)

PREFIX = "tb_"


@dataclass
class StabilizerPolicyLossConfig(PolicyLossConfig):
    """verl's PolicyLossConfig plus the stabilizer's parameters (validated when the config is built).

    Attributes:
      stabilizer_params: keyword parameters of the surrogate named by ``loss_mode`` (``tb_<name>``);
        they win over verl's clip settings (see the module docstring).
      gradient_transforms: a spec of gradient transforms (``"gac+ess_lr"``) applied before each
        optimizer step that follows a ``tb_*`` loss; empty for none.
    """

    stabilizer_params: dict = field(default_factory=dict)
    gradient_transforms: str = ""

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        mode = str(self.loss_mode)
        if mode.startswith(PREFIX):
            name = mode[len(PREFIX) :]
            if name not in SURROGATES:
                raise ValueError(f"policy_loss.loss_mode={mode!r} is not a stabilizer loss; allowed: "
                                 f"{', '.join(PREFIX + n for n in sorted(SURROGATES))}")  # fmt: skip
            _surrogate(name, dict(self.stabilizer_params or {}))
        elif self.stabilizer_params:
            raise ValueError(f"policy_loss.stabilizer_params={dict(self.stabilizer_params)!r} needs a tb_* loss_mode, got {mode!r}")
        if self.gradient_transforms:
            recipe = _HOOKS.recipe(str(self.gradient_transforms))
            needs = needs_batch_stats(recipe)
            if needs and not mode.startswith(PREFIX):
                raise ValueError(f"policy_loss.gradient_transforms={self.gradient_transforms!r}: {needs[0]} needs the "
                                 f"batch's sequence log-ratios, which only a tb_* loss collects; loss_mode is {mode!r}")  # fmt: skip


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
_pending_surrogate_state: dict[str, Any] = {}  # restored from a checkpoint before the surrogate was first built


def _surrogate_key(key: tuple[str, tuple]) -> str:
    return f"{key[0]}{key[1]!r}"


def _surrogate(name: str, params: dict[str, Any]) -> Surrogate:
    """The surrogate ``name`` with ``params``, built through the shared registry (cached)."""
    key = (name, tuple(sorted((k, repr(v)) for k, v in params.items())))
    with _lock:
        if key not in _surrogates:
            args = ", ".join(f"{k}={v!r}" for k, v in params.items())
            try:
                _surrogates[key] = build(f"{name}({args})" if args else name).surrogate
            except ValueError as exc:
                raise ValueError(f"policy_loss.stabilizer_params for {PREFIX}{name}: {exc}") from None
            pending = _pending_surrogate_state.pop(_surrogate_key(key), None)
            if pending:
                _surrogates[key].load_state_dict(pending)
        return _surrogates[key]


# Surrogate parameter -> verl ActorConfig field, where the surrogate has verl's notion.
VERL_CLIP_MAPPING: dict[str, dict[str, str]] = {
    "ppo": {"eps_low": "clip_ratio_low", "eps_high": "clip_ratio_high", "dual_clip": "clip_ratio_c"},
    "decoupled_ppo": {"eps_low": "clip_ratio_low", "eps_high": "clip_ratio_high", "dual_clip": "clip_ratio_c"},
    "gspo": {"eps_low": "clip_ratio_low", "eps_high": "clip_ratio_high"},
    "cispo": {"eps_low": "clip_ratio_low", "eps_high": "clip_ratio_high"},
}


def host_params(name: str, config: Any, explicit: dict[str, Any]) -> dict[str, Any]:
    """The surrogate's parameters: ``explicit`` (stabilizer_params) plus verl's clip settings it does not set.

    ``config`` is verl's actor config; a config without ``clip_ratio`` (e.g. a distillation loss
    config) leaves the surrogate's own defaults.
    """
    params = dict(explicit)
    mapping = VERL_CLIP_MAPPING.get(name)
    if not mapping or config is None or _get(config, "clip_ratio") is None:
        return params
    written = set(explicit) | ({"eps_low", "eps_high"} if "eps" in explicit else set())
    clip = float(_get(config, "clip_ratio"))
    values = {
        "clip_ratio_low": _get(config, "clip_ratio_low", clip),
        "clip_ratio_high": _get(config, "clip_ratio_high", clip),
        "clip_ratio_c": _get(config, "clip_ratio_c", 3.0),
    }
    for param, key in mapping.items():
        if param not in written:
            params[param] = float(values[key])
    return params


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
        explicit = dict(_get(loss_cfg, "stabilizer_params", {}) or {})
        surrogate = _surrogate(name, host_params(name, config, explicit))
        terms, n_bad = PolicyTerms(log_prob, old_log_prob, advantages, response_mask.bool()).checked("mask")
        own_mat, used, metrics = surrogate.per_token(terms)
        own_mat = torch.where(used, own_mat, torch.zeros_like(own_mat))
        loss_mat = own_mat if rollout_is_weights is None else own_mat * rollout_is_weights.detach()
        # verl's mode by default (gspo too, as verl's gspo); stabilizer_params.agg is the deliberate exception
        agg = explicit.get("agg") or loss_agg_mode
        batch_info = _global_batch_info(config)
        loss = core_algos.agg_loss(loss_mat=loss_mat, loss_mask=used, loss_agg_mode=agg, **batch_info)
        with torch.no_grad():  # the surrogate's own value, without verl's rollout weights (verl logs `loss` as pg_loss)
            own = loss.detach() if rollout_is_weights is None else core_algos.agg_loss(loss_mat=own_mat, loss_mask=used, loss_agg_mode=agg, **batch_info)
        transforms = str(_get(loss_cfg, "gradient_transforms", "") or "")
        if transforms:
            _HOOKS.collect(transforms, terms)
        out = {f"actor/{PREFIX}{k}": float(v) for k, v in metrics.items()}
        out.update(host_metrics(name, metrics, terms))
        out[f"actor/{PREFIX}nonfinite_masked"] = float(n_bad)
        out[f"actor/{PREFIX}surrogate_loss"] = float(own)
        return loss, out

    policy_loss.__name__ = f"compute_policy_loss_{PREFIX}{name}"
    policy_loss.__doc__ = f"verl policy loss running the stabilizer surrogate {name!r}.\n\n{SURROGATES[name].__doc__ or ''}"
    return policy_loss


# Surrogates whose clip is verl's vanilla PPO clip (same ratio, same eps, dual clip): their clip_frac and dual_clip_frac
# are verl's actor/pg_clipfrac and actor/pg_clipfrac_lower.
HOST_CLIP_SURROGATES = ("ppo", "decoupled_ppo")


def host_metrics(name: str, metrics: dict[str, Any], terms: PolicyTerms) -> dict[str, float]:
    """verl's standard metric names, where the quantity is the same, so that dashboards keyed on them keep working:
    ``actor/ppo_kl`` = masked mean of old_log_prob - log_prob (every loss), and for `HOST_CLIP_SURROGATES`
    ``actor/pg_clipfrac`` (clipped branch active) and ``actor/pg_clipfrac_lower`` (dual clip active)."""
    with torch.no_grad():
        m = terms.mask.to(torch.float32)
        kl = float(((terms.behavior_logp - terms.logp.detach()) * m).sum() / m.sum().clamp(min=1.0))
    out = {"actor/ppo_kl": kl}
    if name in HOST_CLIP_SURROGATES:
        out["actor/pg_clipfrac"] = float(metrics["clip_frac"])
        out["actor/pg_clipfrac_lower"] = float(metrics["dual_clip_frac"])
    return out


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
        self.pending_state: dict[str, Any] = {}  # restored from a checkpoint before the recipe was first built
        self.stepped: set[int] = set()  # ids of the optimizers whose steps the transforms acted on

    def recipe(self, spec: str) -> Recipe:
        if spec not in self.recipes:
            recipe = build(spec)
            if not recipe.transforms:
                raise ValueError(f"gradient_transforms {spec!r} names no gradient transform")
            if spec in self.pending_state:
                recipe.load_state_dict(self.pending_state.pop(spec))
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
            self.stepped.add(id(optimizer))
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
    """Load `transform_state_dict`'s output; a recipe not built yet in this process gets its state when it is."""
    for spec, sub in state.items():
        if spec in _HOOKS.recipes:
            _HOOKS.recipes[spec].load_state_dict(sub)
        else:
            _HOOKS.pending_state[spec] = sub


# -- the stabilizer's state beside verl's actor checkpoint ------------------------------------------

STATE_NAME = "stabilizer_state_world_size_{world_size}_rank_{rank}.pt"


def stabilizer_state_dict() -> dict[str, Any]:
    """Everything of the plugin that an exact resume needs in this process: the gradient transforms' state
    (gac's reference gradient and threshold history, per spec) and the stateful surrogates' (a gate's stream)."""
    with _lock:
        surrogates = {_surrogate_key(k): s.state_dict() for k, s in _surrogates.items() if s.state_dict()}
    return {"transforms": transform_state_dict(), "surrogates": surrogates}


def load_stabilizer_state_dict(state: dict[str, Any]) -> None:
    load_transform_state_dict(state.get("transforms", {}))
    with _lock:
        built = {_surrogate_key(k): s for k, s in _surrogates.items()}
        for key, sub in state.get("surrogates", {}).items():
            if key in built:
                built[key].load_state_dict(sub)
            else:
                _pending_surrogate_state[key] = sub


def _has_state() -> bool:
    return bool(_HOOKS.recipes) or any(s.state_dict() for s in list(_surrogates.values()))


def state_path(local_path: str, world_size: int, rank: int) -> str:
    """Where a rank's stabilizer state lives in verl's checkpoint directory (beside ``model_world_size_W_rank_R.pt``)."""
    return os.path.join(local_path, STATE_NAME.format(world_size=world_size, rank=rank))


def _rank(manager: Any) -> tuple[int, int]:
    """(world size, rank) of a checkpoint manager, or of the process group for an engine that does not keep them."""
    if hasattr(manager, "world_size") and hasattr(manager, "rank"):
        return int(manager.world_size), int(manager.rank)
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def _optimizer_ids(optimizer: Any) -> set[int]:
    """The torch optimizers behind ``optimizer`` (torchtitan's container holds several in ``optimizers``)."""
    inner = getattr(optimizer, "optimizers", None)
    return {id(o) for o in inner} if isinstance(inner, (list, tuple)) else {id(optimizer)}


def save_checkpoint_state(manager: Any, local_path: str) -> str | None:
    """Write this rank's stabilizer state into ``local_path`` for ``manager`` (a verl checkpoint manager or
    engine).

    Nothing is written when the process holds no stabilizer state, or when the manager's optimizer is
    not one the transforms acted on (a colocated critic's) while some other optimizer is.
    """
    if local_path is None or not _has_state():
        return None
    optimizer = getattr(manager, "optimizer", None)
    if _HOOKS.stepped and optimizer is not None and not _optimizer_ids(optimizer) & set(_HOOKS.stepped):
        return None
    path = state_path(local_path, *_rank(manager))
    write_state(path, stabilizer_state_dict())
    return path


def load_checkpoint_state(manager: Any, local_path: str) -> bool:
    """Restore this rank's stabilizer state from ``local_path``; a loud warning line when a run that uses
    stabilizer state resumes from a checkpoint without it (verl's ``critic`` directory is not the actor's)."""
    if local_path is None:
        return False
    path = state_path(local_path, *_rank(manager))
    payload = read_state(path)
    if payload is None:
        if _has_state() and os.path.basename(os.path.normpath(local_path)) != "critic":
            LOGGER.warning(missing_state_warning("verl actor", local_path, ", ".join(_HOOKS.recipes) or "tb_* loss"))
        return False
    load_stabilizer_state_dict(payload)
    return True


def wrap_checkpointing(cls: type) -> None:
    """Make ``cls.save_checkpoint(local_path, ...)`` / ``load_checkpoint(local_path, ...)`` (a verl checkpoint
    manager's or engine's) save / load the stabilizer state in ``local_path`` too; wrapping twice is a no-op."""
    if getattr(cls.save_checkpoint, "_stabilizer_state", False):
        return
    save, load = cls.save_checkpoint, cls.load_checkpoint

    @functools.wraps(save)
    def save_checkpoint(self: Any, local_path: str, *args: Any, **kwargs: Any) -> Any:
        out = save(self, local_path, *args, **kwargs)
        save_checkpoint_state(self, local_path)
        return out

    @functools.wraps(load)
    def load_checkpoint(self: Any, local_path: str, *args: Any, **kwargs: Any) -> Any:
        out = load(self, local_path, *args, **kwargs)
        load_checkpoint_state(self, local_path)
        return out

    save_checkpoint._stabilizer_state = load_checkpoint._stabilizer_state = True  # type: ignore[attr-defined]
    cls.save_checkpoint, cls.load_checkpoint = save_checkpoint, load_checkpoint


CHECKPOINTING = (
    ("verl.utils.checkpoint.fsdp_checkpoint_manager", "FSDPCheckpointManager"),
    ("verl.utils.checkpoint.megatron_checkpoint_manager", "MegatronCheckpointManager"),
    ("verl.workers.engine.torchtitan.transformer_impl", "TorchTitanEngine"),
    ("verl.workers.engine.automodel.transformer_impl", "AutomodelEngine"),
)


def wire_checkpoints() -> list[str]:
    """Wrap verl's checkpoint managers and the engines with checkpointers of their own (`CHECKPOINTING`, those
    importable here); return their names."""
    wired = []
    for module, name in CHECKPOINTING:
        try:
            cls = getattr(importlib.import_module(module), name)
        except ModuleNotFoundError as exc:
            if exc.name and not exc.name.startswith("verl"):  # the backend's own package (Megatron, torchtitan) is
                LOGGER.debug("verl %s not wired: %s is not installed", name, exc.name)  # absent: unusable anyway
                continue
            WIRING_FAILURES[name] = _wiring_failure(module, name, exc)
            continue
        except Exception as exc:  # the module is there but does not import, or the class moved
            WIRING_FAILURES[name] = _wiring_failure(module, name, exc)
            continue
        wrap_checkpointing(cls)
        wired.append(name)
    return wired


WIRING_FAILURES: dict[str, str] = {}  # checkpointer -> the line logged when it could not be wired


def _wiring_failure(module: str, name: str, exc: Exception) -> str:
    line = (f"llm_scale.integrations.verl: stabilizer state will NOT be saved with verl's {name} checkpoints: "
            f"{module}.{name} failed to import ({type(exc).__name__}: {' '.join(str(exc).split())[:200]})")  # fmt: skip
    LOGGER.warning(line)
    return line


# -- verl's rollout-correction bypass mode --------------------------------------------------------

def bypass_refusal(loss_mode: str) -> str:
    """The one line that refuses a ``tb_*`` loss under ``algorithm.rollout_correction.bypass_mode=true``."""
    return (f"policy_loss.loss_mode={loss_mode!r} cannot run with algorithm.rollout_correction.bypass_mode=true: verl "
            "then replaces the loss by its own 'bypass_mode' loss (and old_log_probs by the rollout's); set "
            "algorithm.rollout_correction.bypass_mode=false (the trainer recomputes old_log_probs, the proximal "
            "policy; rollout_is=token brings in the rollout's log-probs), as configs/tb_async/fully_async_decoupled_ppo.yaml does")  # fmt: skip


def check_bypass(config: Any) -> None:
    """ValueError (`bypass_refusal`) when a full verl config asks for a ``tb_*`` actor loss under bypass mode."""
    mode = str(_get(_get(_get(_get(config, "actor_rollout_ref"), "actor"), "policy_loss"), "loss_mode", ""))
    bypass = bool(_get(_get(_get(config, "algorithm"), "rollout_correction"), "bypass_mode", False))
    if bypass and mode.startswith(PREFIX):
        raise ValueError(bypass_refusal(mode))


def guard_bypass_mode() -> bool:
    """Wrap verl's ``apply_bypass_mode`` (where verl rewrites the actor's loss_mode) so that it refuses a ``tb_*`` loss
    instead of silently replacing it; False where verl has no such function."""
    try:
        from verl.trainer.ppo import rollout_corr_helper as helper
    except ImportError as exc:
        WIRING_FAILURES["apply_bypass_mode"] = _wiring_failure("verl.trainer.ppo.rollout_corr_helper", "apply_bypass_mode", exc)
        return False
    original = getattr(helper, "apply_bypass_mode", None)
    if original is None or getattr(original, "_stabilizer_guard", False):
        return original is not None

    @functools.wraps(original)
    def apply_bypass_mode(batch: Any, rollout_corr_config: Any = None, policy_loss_config: Any = None) -> Any:
        mode = str(_get(policy_loss_config, "loss_mode", ""))
        if mode.startswith(PREFIX):
            raise ValueError(bypass_refusal(mode))
        return original(batch, rollout_corr_config, policy_loss_config)

    apply_bypass_mode._stabilizer_guard = True  # type: ignore[attr-defined]
    helper.apply_bypass_mode = apply_bypass_mode
    return True


REGISTERED = register()
WIRED_CHECKPOINTS = wire_checkpoints()
GUARDED_BYPASS = guard_bypass_mode()
