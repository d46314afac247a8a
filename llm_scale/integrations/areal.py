"""AReaL plugin: a stabilizer surrogate as the loss of AReaL's training engine, gradient transforms as optimizer hooks.

AReaL's public hook for a policy loss is the engine's ``TrainEngine.train_batch(input_, loss_fn,
loss_weight_fn)`` (``areal.api.engine_api``): ``loss_fn(logprobs, entropy, input_data)`` returns a
scalar loss normalised over one micro-batch's tokens, ``loss_weight_fn(input_data)`` that micro-batch's
weight (its number of loss tokens), and the engine weights the micro-batches into the global token mean.
AReaL's own ``PPOActor._ppo_update`` passes its ``grpo_loss_fn`` to that call, with no setting to name
another; `use_stabilizer` therefore wraps the actor's engine's ``train_batch`` (one instance, nothing
global) so that every call gets `make_loss_fn`'s loss instead, and everything else of AReaL's update
(micro-batches, weights, logging) stays AReaL's.

Mapping of AReaL's ``input_data`` onto `PolicyTerms` (packed 1D tokens, one row per sequence by ``cu_seqlens``):
``logprobs`` (the learner's, with grad) -> logp; ``input_data["logprobs"]`` (the inference engine's)
-> behavior_logp; ``input_data["prox_logp"]`` (the recomputed proximal policy, when AReaL computed it)
-> proximal_logp; ``advantages``; ``loss_mask``. The loss is the surrogate's per-token loss summed over
the mask and divided by the micro-batch's loss-token count, as AReaL's ``ppo_actor_loss_fn`` normalises:
so ``tb decoupled_ppo`` equals AReaL's decoupled loss with token-level ``rejection_sampling`` (mask,
ratio, upper = cap) number for number (tests/llm/test_llm_areal.py). Surrogates that act on whole
sequences (gspo, sequence-level tis, ...) would need AReaL's ``cu_seqlens`` and are refused in one line.

Gradient transforms: AReaL's FSDP engine clips, then calls its torch optimizer's ``step()``; the
transforms run in a step pre-hook on that optimizer (`hooks.TransformStep`, with the layout rule of
`sharding`: AReaL's FSDP2 gradients are DTensors), fed by the statistics of the loss calls since the
previous step.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from testbed.stabilizers import PolicyTerms, Recipe, build

from .hooks import TransformStep, needs_batch_stats

SEQUENCE_LEVEL = ("gspo", "m2po", "pmpo")  # surrogates that read whole sequences (need cu_seqlens)


def check_token_level(recipe: Recipe) -> None:
    """ValueError (one line) when the recipe's surrogate acts on whole sequences, which packed 1D input does not delimit."""
    name = recipe.surrogate.name
    level = getattr(recipe.surrogate, "level", "token")
    if name in SEQUENCE_LEVEL or level != "token":
        raise ValueError(f"recipe {recipe.spec!r}: surrogate {name} acts on whole sequences, which AReaL's packed 1D "
                         "loss input does not delimit in this plugin; use a token-level surrogate (ppo, decoupled_ppo, "
                         "tis, dg, ...)")  # fmt: skip


def unpack(t: Tensor, cu_seqlens: Tensor | None) -> Tensor:
    """AReaL's packed 1D tokens as `PolicyTerms` rows: one row per sequence (``cu_seqlens``: the start of each
    sequence and the end, AReaL's layout), right-padded with zeros; one row of all tokens without ``cu_seqlens``."""
    if cu_seqlens is None:
        return t.reshape(1, -1)
    cu = cu_seqlens.to(torch.long)
    lengths = cu[1:] - cu[:-1]
    cols = torch.arange(int(lengths.max()) if lengths.numel() else 0, device=t.device)
    valid = cols[None, :] < lengths[:, None]
    index = (cu[:-1, None] + cols[None, :]).clamp(max=max(t.numel() - 1, 0))
    rows = t.reshape(-1)[index]
    return torch.where(valid, rows, torch.zeros((), dtype=rows.dtype, device=rows.device))


def make_loss_fn(recipe: Recipe, step: TransformStep | None = None, sink: dict[str, list[float]] | None = None) -> Any:
    """AReaL's ``loss_fn(logprobs, entropy, input_data, **ignored) -> loss`` running ``recipe``'s surrogate.

    ``step`` (when given) collects each call's sequence statistics for the gradient transforms; ``sink``
    receives the surrogate's metrics per call (key -> list of floats)."""
    check_token_level(recipe)
    needs = needs_batch_stats(recipe)

    def loss_fn(logprobs: Tensor, entropy: Tensor, input_data: dict[str, Any], **_: Any) -> Tensor:
        mask = input_data["loss_mask"].bool()
        prox, cu = input_data.get("prox_logp"), input_data.get("cu_seqlens")
        if cu is None and step is not None and needs:
            raise ValueError(
                f"gradient transform {needs[0]} needs the batch's sequences, and AReaL passed no cu_seqlens"
            )
        rows = functools.partial(unpack, cu_seqlens=cu)
        terms, _ = PolicyTerms(rows(logprobs), rows(input_data["logprobs"]).detach(), rows(input_data["advantages"]),
                               rows(mask), proximal_logp=None if prox is None else rows(prox).detach()).checked("mask")  # fmt: skip
        mat, used, metrics = recipe.surrogate.per_token(terms)
        loss = torch.where(used, mat, torch.zeros((), dtype=mat.dtype, device=mat.device)).sum()
        loss = loss / mask.count_nonzero().clamp(min=1)
        if step is not None:
            step.collect(terms.logp, terms.behavior_logp, terms.mask)
        if sink is not None:
            for key, value in metrics.items():
                sink.setdefault(f"stabilizer/{key}", []).append(float(value))
        return loss

    loss_fn.__name__ = f"stabilizer_loss_{recipe.surrogate.name}"
    return loss_fn


def use_stabilizer(actor: Any, spec: str | Recipe) -> Recipe:
    """Make AReaL's ``actor`` (a ``PPOActor``, or anything with ``.engine``) train with ``spec``'s surrogate and
    gradient transforms. Returns the recipe (its ``state_dict`` holds e.g. gac's reference gradient).

    The engine's ``train_batch`` is wrapped on that instance: whatever loss_fn AReaL passes is replaced by the
    recipe's (the micro-batch weighting, ``loss_weight_fn``, stays AReaL's). Transforms run before each step of
    the engine's ``optimizer`` (which must exist, i.e. after the engine's ``initialize``)."""
    recipe = build(spec) if isinstance(spec, str) else spec
    engine = actor.engine
    step = TransformStep()
    loss_fn = make_loss_fn(recipe, step if recipe.transforms else None)
    original = engine.train_batch

    @functools.wraps(original)
    def train_batch(input_: Any, loss_fn_ignored: Any = None, loss_weight_fn: Any = None, **kw: Any) -> Any:
        kw.pop("loss_fn", None)
        weight = kw.pop("loss_weight_fn", loss_weight_fn)
        return original(input_, loss_fn=loss_fn, loss_weight_fn=weight, **kw)

    engine.train_batch = train_batch
    if recipe.transforms:
        optimizer = getattr(engine, "optimizer", None)
        if optimizer is None:
            raise ValueError("use_stabilizer: the engine has no optimizer yet; call it after the engine's initialize()")

        def pre(opt: Any, args: Any, kwargs: Any) -> None:
            step.before_step(recipe, opt)

        optimizer.register_step_pre_hook(pre)
        optimizer.register_step_post_hook(lambda opt, args, kwargs: step.after_step(opt))
    actor.stabilizer_recipe, actor.stabilizer_step = recipe, step
    return recipe
