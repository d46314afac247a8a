"""The learner: one GRPO update on a rollout batch with a stabilizer recipe, and its optional terms.

``Learner.update(batch, step)`` on batch k (B = prompts x group_size sequences):

1. log-probs of the sampled tokens under the policy at the start of the batch (no gradient): the
   *proximal* policy (AReaL's pi_prox), which also feeds the advantage estimator;
2. ``recipe.advantages(rewards, group_ids, logp=proximal, behavior_logp, mask[, score norms])``;
3. ``epochs`` x ``minibatches`` optimizer steps: with ``minibatch_split="groups"`` (the default) each
   epoch cuts the batch, in order, into ``minibatches`` slices of whole prompt groups (verl's split: a
   group is never divided and consecutive minibatches hold disjoint prompts, so the cosine between their
   gradients measures the gradient signal, not shared contexts; `group_minibatches`);
   ``"random"`` cuts a fresh seeded permutation of the sequences instead; each step's
   loss is ``recipe.loss(PolicyTerms(current logp, behaviour logp, advantages, mask,
   proximal_logp))`` + ``kl_coef`` x KL(current || reference) - ``entropy_coef`` x entropy, all
   aggregated in the recipe's mode (verl's names), then ``recipe.step`` (gradient transforms, then
   AdamW with the transforms' lr scale for that step only). Three policies differ: behaviour (the
   rollout's, up to eta versions old), proximal (start of this batch) and current (moves with
   every optimizer step); with 1 x 1 steps current = proximal at the only step.

What an update logs, each named for what it measures:

* ``staleness_ess`` / ``staleness_ess_token``: normalised ESS of pi_prox / mu per sequence / per
  token (behaviour vs the policy at the start of the batch: staleness, plus any sampler mismatch);
  ``mismatch_abs_max`` / ``mismatch_abs_mean``: |log pi_prox - log mu| over the tokens sampled by the
  very weights the learner holds (NaN when there are none): the sampler / learner numerical gap;
* ``drift_ess`` (mean over the optimizer steps) and ``drift_ess_min``: the same ESS of pi_current /
  pi_prox on each step's minibatch, i.e. how far the K x N steps move the policy within the batch;
* the recipe's own metrics under their own names (e.g. ``ess`` of a transform such as ess_lr is the
  ESS of current vs behaviour on its minibatch);
* per optimizer step (``Learner.steps``, written to grad_steps.csv): the raw gradient norm and its
  cosine to the previous step's raw gradient, with the kind of pair (``within`` the batch,
  ``across`` batches, ``none`` for the first step); NaN when a gradient is zero. Per update:
  ``grad_cos_within`` / ``grad_cos_across`` (NaN-aware means), ``zero_grad_frac``; with
  ``grad_split_half`` each step's gradient is accumulated as two halves of its prompt groups (`split_halves`:
  one more backward pass, the sum equal to the one-pass gradient up to float rounding) and the step also logs
  ``grad_dot_prev`` (<g, previous step's g>) and ``grad_half_dot`` (<first half, second half>), the terms of
  the noise-free consecutive cosine `fingerprint.consecutive_cosine_split_half`;
* ``zero_adv_frac``: fraction of prompt groups whose rewards are all equal (`fingerprint.zero_advantage_frac`);
  with ``dynamic_sampling`` those groups are dropped before the update (DAPO, arXiv 2503.14476) and
  ``dropped_seq_frac`` says how many sequences went.

KL to a frozen reference (the initial weights), per token with r = log pi_ref - log pi_theta on the
sampled tokens (Schulman's estimators, "Approximating KL divergence", 2020): ``k1`` = -r (unbiased,
can be negative), ``k3`` = exp(r) - r - 1 (unbiased, >= 0, GRPO's choice). Entropy: of the full
tempered softmax at each completion position. Log-probs are those of the full softmax at the
sampling temperature (the behaviour log-probs record the top-k / top-p distribution actually
sampled, so the ratio corrects for the truncation).

Mixed precision: ``autocast="bf16"`` runs the learner's forwards under ``torch.autocast`` in
bfloat16 (weights, gradients and AdamW state stay float32; log-softmax in float32); the trainer's
`Sampler` generates under the same autocast, so both sides compute in the same precision.
``grad_checkpointing`` recomputes each decoder layer in the backward pass (transformers'
activation checkpointing; the model is put in train mode for those forwards, so configs with
dropout > 0 are refused by the trainer).
"""

from __future__ import annotations

import contextlib
import itertools
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from testbed.stabilizers import PolicyTerms, Recipe, aggregate
from testbed.stabilizers import fingerprint as fp
from testbed.stabilizers.gradient import global_dots
from testbed.util import seeding

from .generation import RolloutBatch, cache_argument, distinct_rows, hit_budget, position_ids, select_cache


def group_minibatches(group_ids: Tensor, minibatches: int) -> tuple[Tensor, ...]:
    """Row indices of ``minibatches`` slices of whole prompt groups, in batch order (verl's split).

    The groups (runs of equal ids in ``group_ids``, in order of appearance) are cut into ``minibatches``
    consecutive slices of as equal a count as `torch.tensor_split` gives; a slice holds every row of its
    groups and no row of another. With fewer groups than slices the last slices are empty."""
    _, group = torch.unique_consecutive(group_ids, return_inverse=True)
    n_groups = int(group.max()) + 1 if group.numel() else 0
    bounds = [int(c[0]) if c.numel() else n_groups for c in torch.tensor_split(torch.arange(n_groups), minibatches)]
    bounds.append(n_groups)
    rows = torch.arange(group_ids.numel(), device=group_ids.device)
    return tuple(rows[(group >= lo) & (group < hi)] for lo, hi in itertools.pairwise(bounds))


@dataclass
class LearnerSettings:
    temperature: float = 1.0
    agg: str = "token-mean"
    epochs: int = 1
    minibatches: int = 1
    minibatch_split: str = "groups"  # groups | random
    micro_batch_size: int = 0  # 0: a whole minibatch per forward
    proximal: bool = True
    nan_policy: str = "mask"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    entropy_coef: float = 0.0
    autocast: str = "off"  # off | bf16
    grad_checkpointing: bool = False
    grad_cosine: bool = True
    grad_split_half: bool = False  # each step's gradient as two halves of its groups (`split_halves`)
    seed: int = 0
    dynamic_sampling: bool = False  # drop the prompt groups whose rewards are all equal (DAPO)
    max_grad_norm: float = 0.0  # clip the global gradient norm before the recipe's transforms; 0: off
    share_prompts: bool = False  # one forward per distinct prompt, its keys/values repeated for its group (`shared_prompt_logits`)


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref) from samples: k1 = logp - ref, k3 = exp(ref - logp) - (ref - logp) - 1."""
    r = ref_logp - logp
    if estimator == "k1":
        return -r
    if estimator == "k3":
        return torch.expm1(r.clamp(max=20.0)) - r  # exp(r) - 1 - r, clamped: no overflow for a far-off policy
    raise ValueError(f"unknown KL estimator {estimator!r}; allowed: k1, k3")


def lr_multiplier(step: int, *, total: int, warmup: int, schedule: str, min_ratio: float = 0.0) -> float:
    """The learning-rate factor for update ``step`` of ``total``: linear warm-up over ``warmup`` updates, then the schedule.

    Warm-up: (step + 1) / (warmup + 1) for step < warmup. After it, with progress
    p = (step - warmup) / max(1, total - warmup): ``constant`` 1; ``linear`` 1 - (1 - m) p;
    ``cosine`` m + (1 - m) (1 + cos(pi p)) / 2, m = ``min_ratio``.
    """
    if step < warmup:
        return (step + 1) / (warmup + 1)
    p = min(1.0, (step - warmup) / max(1, total - warmup))
    if schedule == "constant":
        return 1.0
    if schedule == "linear":
        return 1.0 - (1.0 - min_ratio) * p
    if schedule == "cosine":
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))
    raise ValueError(f"unknown lr schedule {schedule!r}; allowed: constant, linear, cosine")


class Learner:
    """Owns the trained model, its optimizer and scheduler, the recipe and the frozen reference."""

    def __init__(
        self, model: torch.nn.Module, recipe: Recipe, optimizer: torch.optim.Optimizer,
        scheduler: torch.optim.lr_scheduler.LRScheduler, settings: LearnerSettings,
        reference: torch.nn.Module | None = None, eos_ids: list[int] | None = None,
    ) -> None:  # fmt: skip
        self.model, self.recipe, self.optimizer, self.scheduler = model, recipe, optimizer, scheduler
        self.s, self.reference = settings, reference
        self.eos_ids = eos_ids or []
        self.device = next(model.parameters()).device
        self.prev_grad: list[Tensor] | None = None
        self.steps: list[dict[str, Any]] = []  # the last update's optimizer steps (gradient norm, cosine, kind)
        if settings.grad_checkpointing:
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.20
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})

    # -- log-probs --------------------------------------------------------------------------------
    def _autocast(self) -> Any:
        if self.s.autocast == "bf16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def token_logp(
        self, batch: RolloutBatch, rows: Tensor | slice, model: torch.nn.Module | None = None, entropy: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """(log pi(token) [b, T], entropy [b, T] or None) for the completion tokens of ``rows``, at the sampling temperature."""
        model = self.model if model is None else model
        comp = batch.completion_ids[rows]
        ids = torch.cat([batch.prompt_ids[rows], comp], dim=1)
        attn = torch.cat([batch.prompt_mask[rows].long(), batch.completion_mask[rows].long()], dim=1)
        kwargs = {"input_ids": ids, "attention_mask": attn, "position_ids": position_ids(attn), "use_cache": False}
        checkpointing = self.s.grad_checkpointing and torch.is_grad_enabled() and model is self.model
        if checkpointing:
            model.train()  # transformers checkpoints layers only in train mode (no dropout: checked at start)
        try:
            with self._autocast():
                shared = None
                if self.s.share_prompts and not checkpointing:
                    shared = shared_prompt_logits(model, batch.prompt_ids[rows], attn, comp)
                if shared is not None:
                    logits = shared
                else:
                    try:
                        logits = model(**kwargs, logits_to_keep=comp.shape[1] + 1).logits
                    except TypeError:  # models without logits_to_keep
                        logits = model(**kwargs).logits
                    logits = logits[:, -comp.shape[1] - 1 : -1]
        finally:
            if checkpointing:
                model.eval()
        logits = logits.float() / self.s.temperature
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, comp[..., None])[..., 0]
        ent = -(logp_all.exp() * logp_all).sum(-1) if entropy else None
        return logp, ent

    def _all_logp(self, batch: RolloutBatch, model: torch.nn.Module) -> Tensor:
        n = batch.completion_ids.shape[0]
        micro = self.s.micro_batch_size or n
        with torch.no_grad():
            return torch.cat([self.token_logp(batch, slice(i, i + micro), model)[0] for i in range(0, n, micro)])

    def _score_sq_norms(self, batch: RolloutBatch) -> Tensor:
        """||grad log pi(tau_i)||^2 per sequence (one backward per sequence; for OPOB)."""
        from testbed.stabilizers import score_sq_norms

        def seq_logp(forward: Any, prompt: Tensor, pmask: Tensor, comp: Tensor, cmask: Tensor) -> Tensor:
            ids = torch.cat([prompt, comp], dim=1)
            attn = torch.cat([pmask.long(), cmask.long()], dim=1)
            with self._autocast():
                logits = forward(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn), use_cache=False).logits
            logits = logits[:, -comp.shape[1] - 1 : -1].float() / self.s.temperature
            lp = F.log_softmax(logits, dim=-1).gather(-1, comp[..., None])[..., 0]
            return (lp * cmask).sum()

        return score_sq_norms(
            self.model, seq_logp, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
            batch.completion_mask.to(torch.float32), method="loop",
        ).to(self.device)  # fmt: skip

    def _grad_stats(self, same_batch: bool, first_half: dict[int, Tensor] | None = None) -> dict[str, float]:
        """Norm of the raw gradient and its cosine with the previous optimizer step's raw gradient, the cosine by
        `global_dots` (the products GAC acts on); one host synchronisation for each, not one per parameter.

        The pair's kind is ``within`` when the previous step was taken on the same rollout batch,
        ``across`` when it was the last step on the previous batch. The cosine is NaN when either
        gradient is zero (undefined, as `fingerprint.cosine`) or there is no previous step. With ``first_half``
        (the gradient after the minibatch's first half of groups, `split_halves`) also ``grad_half_dot`` =
        <first half, second half> and ``grad_dot_prev`` = <g, previous g> (NaN with no previous step).
        """
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        sq = float(torch.stack([g.detach().double().pow(2).sum() for g in grads]).sum()) if grads else 0.0
        out = {"grad_norm_raw": math.sqrt(sq)}
        if not self.s.grad_cosine:
            return out
        cos = dot = float("nan")
        if first_half is not None:  # a parameter without a gradient after the first half had a zero one
            pairs = [(first_half[id(p)], p.grad.detach().float() - first_half[id(p)]) for p in self.model.parameters()
                     if p.grad is not None and id(p) in first_half]
            out["grad_half_dot"] = global_dots(pairs)[0] if pairs else 0.0
        if self.prev_grad is not None and len(self.prev_grad) == len(grads):
            dot, g_sq, prev_sq = global_dots(list(zip(grads, self.prev_grad, strict=True)))
            if g_sq > 0 and prev_sq > 0 and math.isfinite(dot):
                cos = dot / math.sqrt(g_sq * prev_sq)
            for h, g in zip(self.prev_grad, grads, strict=True):
                h.copy_(g)
            kind = "within" if same_batch else "across"
        else:
            self.prev_grad = [g.detach().float().clone() for g in grads]
            kind = "none"
        out["grad_cos_prev"] = cos
        if first_half is not None:
            out["grad_dot_prev"] = dot
        out["grad_cos_kind"] = kind  # type: ignore[assignment]  # popped by update()
        return out

    # -- the update -------------------------------------------------------------------------------
    def clip_gradients(self) -> float:
        """Scale the gradient so that its global norm is at most ``max_grad_norm`` (Pascanu et al. 2013; TRL's
        ``max_grad_norm``, verl's ``actor.grad_clip``); nothing when it is 0. Returns the norm before clipping."""
        grads = [p for p in self.model.parameters() if p.grad is not None]
        if self.s.max_grad_norm <= 0 or not grads:
            return math.nan
        return float(torch.nn.utils.clip_grad_norm_(grads, self.s.max_grad_norm))

    def update(self, batch: RolloutBatch, step: int) -> dict[str, float]:
        """Learner update ``step`` on ``batch``: epochs x minibatches optimizer steps; returns the update's metrics."""
        s, recipe = self.s, self.recipe
        zero_adv = fp.zero_advantage_frac(batch.rewards, batch.group_ids)
        health: dict[str, float] = {"zero_adv_frac": zero_adv}
        if s.dynamic_sampling:
            keep = informative_rows(batch.rewards, batch.group_ids)
            health["dropped_seq_frac"] = 1.0 - float(keep.float().mean())
            if not bool(keep.any()):  # nothing to learn from: no optimizer step, the schedule still advances
                self.steps = []
                self.scheduler.step()
                return {**health, "optimizer_steps": 0.0, **self._batch_metrics(batch, step)}
            full, batch = batch, select_rows(batch, keep)
        else:
            full = batch
        n = batch.completion_ids.shape[0]
        mask, blogp = batch.completion_mask, batch.behavior_logp
        micro = s.micro_batch_size or n
        halves = s.grad_split_half and s.grad_cosine
        one_pass = (s.epochs == 1 and s.minibatches == 1 and micro >= n and s.kl_coef == 0 and s.entropy_coef == 0
                    and not halves)
        logp_first = None
        if one_pass:  # the only forward gives the proximal log-probs and the gradient
            logp_first, _ = self.token_logp(batch, slice(None))
            proximal = logp_first.detach()
        else:
            proximal = self._all_logp(batch, self.model)
        ref = self._all_logp(batch, self.reference) if self.reference is not None and s.kl_coef else None
        norms = self._score_sq_norms(batch) if recipe.needs_score_norms else None
        adv = recipe.advantages(
            batch.rewards, group_ids=batch.group_ids, logp=proximal, behavior_logp=blogp, mask=mask, score_sq_norms=norms
        )
        metrics: dict[str, float] = {**health, **self._staleness(batch, proximal, step)}
        pooled: list[tuple[dict[str, float], float]] = []
        self.steps = []
        for epoch in range(s.epochs):
            if s.minibatch_split == "random" and s.minibatches > 1:
                order = torch.randperm(n, generator=seeding.generator(s.seed, "llm", "minibatch", step, epoch))
                slices = torch.tensor_split(order.to(self.device), s.minibatches)
            else:
                slices = group_minibatches(batch.group_ids, s.minibatches)
            for mb, rows in enumerate(slices):
                size = rows.numel()
                if size == 0:  # dynamic sampling left fewer sequences than minibatches
                    continue
                self.optimizer.zero_grad(set_to_none=True)
                n_tok = float(mask[rows].sum())
                n_seq = float(mask[rows].any(-1).sum())
                detached, loss_total, first_half = [], 0.0, None
                parts = split_halves(batch.group_ids[rows]) if halves else (torch.arange(size, device=rows.device),)
                for j, i in ((j, i) for j, part in enumerate(parts) for i in range(0, part.numel(), micro)):
                    if halves and j == 1 and first_half is None:  # the first half's gradient, before the second's
                        first_half = {id(p): p.grad.detach().float().clone() for p in self.model.parameters() if p.grad is not None}
                    sub = rows[parts[j][i : i + micro]]
                    whole = sub.numel() == size
                    if logp_first is not None:
                        logp, ent = logp_first, None
                    else:
                        logp, ent = self.token_logp(batch, sub, entropy=s.entropy_coef != 0 or s.kl_coef != 0)
                    terms = PolicyTerms(
                        logp, blogp[sub], adv[sub], mask[sub], proximal_logp=proximal[sub] if s.proximal else None,
                        versions=batch.versions[sub], group_ids=batch.group_ids[sub], rewards=batch.rewards[sub],
                    )  # fmt: skip
                    extra = {} if whole else {"global_tokens": n_tok, "global_seqs": n_seq}
                    out = recipe.loss(terms, s.agg, nan_policy=s.nan_policy, **extra)
                    loss = out.loss
                    part: dict[str, float] = {k: float(v) for k, v in out.metrics.items()}
                    if ref is not None:
                        kl = kl_penalty(logp, ref[sub], s.kl_estimator)
                        loss = loss + s.kl_coef * aggregate(kl, mask[sub], s.agg, **extra)
                        part["kl"] = float((kl.detach() * mask[sub]).sum() / mask[sub].sum().clamp(min=1))
                    if ent is not None:
                        if s.entropy_coef:
                            loss = loss - s.entropy_coef * aggregate(ent, mask[sub], s.agg, **extra)
                        part["entropy"] = float((ent.detach() * mask[sub]).sum() / mask[sub].sum().clamp(min=1))
                    loss.backward()
                    loss_total += float(loss.detach())
                    pooled.append((part, float(mask[sub].sum())))
                    detached.append(logp.detach())
                grad = self._grad_stats(same_batch=bool(self.steps), first_half=first_half)
                kind = grad.pop("grad_cos_kind", "none")
                current = torch.cat(detached)
                drift = fp.staleness_stats(current, proximal[rows], mask[rows], lag=0).ess_seq
                stats = PolicyTerms(current, blogp[rows], adv[rows], mask[rows])
                self.clip_gradients()  # the hosts' order: clip, then the recipe's transforms, then the step
                step_metrics = {k: float(v) for k, v in recipe.step(self.model, self.optimizer, stats).items()}
                pooled.append(({**step_metrics, "loss": loss_total, "drift_ess": drift, "drift_ess_min": drift}, 1.0))
                self.steps.append({"update": step, "epoch": epoch, "minibatch": mb, "kind": kind, **grad})
        metrics.update(pool(pooled))
        metrics.update(step_summary(self.steps))
        metrics["lr"] = float(self.optimizer.param_groups[0]["lr"])
        metrics["optimizer_steps"] = float(s.epochs * s.minibatches)
        self.scheduler.step()
        metrics.update(self._batch_metrics(full, step))
        return metrics

    def _staleness(self, batch: RolloutBatch, proximal: Tensor, step: int) -> dict[str, float]:
        """Behaviour vs proximal (the policy at the start of this batch): staleness plus any sampler mismatch.

        ``staleness_ess`` / ``staleness_ess_token``: normalised ESS of the sequence / token ratios
        pi_prox / mu (`fingerprint.staleness_stats`). ``mismatch_abs_max`` / ``mismatch_abs_mean``:
        |log pi_prox - log mu| over the tokens sampled by the very weights the learner holds (lag
        0), where the two must agree up to numerics; NaN when no token has lag 0.
        """
        mask = batch.completion_mask
        stats = fp.staleness_stats(proximal, batch.behavior_logp, mask, lag=0)
        same = mask & (batch.versions == step)
        gap = (proximal - batch.behavior_logp).abs()[same]
        nan = float("nan")
        return {
            "staleness_ess": stats.ess_seq,
            "staleness_ess_token": stats.ess_token,
            "mismatch_abs_max": float(gap.max()) if gap.numel() else nan,
            "mismatch_abs_mean": float(gap.mean()) if gap.numel() else nan,
        }

    def _batch_metrics(self, batch: RolloutBatch, step: int) -> dict[str, float]:
        mask = batch.completion_mask
        n = mask.shape[0]
        lag = (step - batch.versions)[mask]
        lengths = mask.sum(-1).float()
        return {
            "reward_mean": float(batch.rewards.mean()),
            "reward_std": float(batch.rewards.std()) if n > 1 else math.nan,
            "length_mean": float(lengths.mean()),
            "length_max": float(lengths.max()),
            "truncated_frac": float(hit_budget(batch.completion_ids, mask, self.eos_ids).float().mean()),
            "lag_mean": float(lag.float().mean()) if lag.numel() else math.nan,
            "lag_max": float(lag.max()) if lag.numel() else math.nan,
            "versions_per_seq": float(distinct_per_row(batch.versions, mask).float().mean()),
        }

    def finite(self) -> bool:
        """True while every parameter is finite."""
        return bool(torch.stack([torch.isfinite(p.detach()).all() for p in self.model.parameters()]).all())


def shared_prompt_logits(model: torch.nn.Module, prompt_ids: Tensor, attn: Tensor, comp: Tensor) -> Tensor | None:
    """The logits [b, T, V] that predict the completion tokens ``comp`` [b, T] after ``prompt_ids`` [b, P] (``attn``
    [b, P + T] the mask of both), with one forward per distinct prompt row: the prompt's keys and values are computed
    once and repeated for every row that shares it (a prompt group), then the completions run on that cache. None when
    the rows' prompts are all distinct or the model's cache cannot repeat rows.

    The same function as the forward of every row: a row's values do not depend on its batch, and the gradient that
    reaches a shared prompt is the sum of its copies' gradients, which the repeat's backward adds before the prompt's
    backward rather than inside the weight gradients' products. Only that order of float32 additions differs, so
    log-probs agree with the full forward and gradients agree to float32 rounding of their sums, not bit for bit.
    The prompt is computed once instead of once per sample: a group of G samples of a P-token prompt costs P + G T
    positions instead of G (P + T).
    """
    P = prompt_ids.shape[1]
    first, inverse = distinct_rows(prompt_ids, attn[:, :P])
    if first.numel() == prompt_ids.shape[0]:
        return None
    name = cache_argument(type(model).forward)
    sub = attn[first, :P]
    kwargs = {"input_ids": prompt_ids[first], "attention_mask": sub, "position_ids": position_ids(sub), "use_cache": True}
    try:
        out = model(**kwargs, logits_to_keep=1)
    except TypeError:  # models without logits_to_keep
        out = model(**kwargs)
    past = select_cache(getattr(out, name), inverse)
    if past is None:
        return None
    last = out.logits[:, -1:][inverse]  # predicts the first completion token
    if comp.shape[1] == 1:
        return last
    cut = attn[:, : P + comp.shape[1] - 1]
    rest = model(input_ids=comp[:, :-1], attention_mask=cut, position_ids=position_ids(cut)[:, P:], use_cache=True,
                 **{name: past}).logits  # fmt: skip
    return torch.cat([last, rest], dim=1)


def informative_rows(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """[B] bool: the sequences whose prompt group has rewards that are not all equal.

    DAPO's dynamic sampling (arXiv 2503.14476) drops the other groups: their group-normalised
    advantages are all zero, so they cost a forward and backward and add no gradient.
    """
    constant, group = fp.constant_reward_groups(rewards, group_ids)
    return ~constant[group]


def select_rows(batch: RolloutBatch, rows: Tensor) -> RolloutBatch:
    """The sub-batch of ``rows`` (a [B] bool mask or indices): every per-sequence tensor sliced alike."""
    from dataclasses import fields

    values = {f.name: getattr(batch, f.name) for f in fields(batch)}
    return type(batch)(**{k: v[rows] if isinstance(v, Tensor) and v.dim() >= 1 else v for k, v in values.items()})


def split_halves(group_ids: Tensor) -> tuple[Tensor, Tensor]:
    """Positions of the first and second half of the prompt groups in ``group_ids`` (runs of equal ids, in order;
    the first half holds floor(k / 2) of the k groups): two independent halves of a minibatch's gradient."""
    first, second = group_minibatches(group_ids, 2)
    return first, second


def step_summary(steps: list[dict[str, Any]]) -> dict[str, float]:
    """Per update: NaN-aware means of the optimizer steps' gradient cosines, by the kind of pair.

    ``grad_cos_within``: mean cosine to the previous step's raw gradient over the steps whose previous
    step was on the same batch; ``grad_cos_across``: over the (at most one) step whose previous step
    was on the previous batch. NaN cosines (a zero gradient) are left out; no defined cosine: NaN.
    """
    out: dict[str, float] = {}
    for kind in ("within", "across"):
        values = [r["grad_cos_prev"] for r in steps if r.get("kind") == kind and math.isfinite(r.get("grad_cos_prev", math.nan))]
        out[f"grad_cos_{kind}"] = sum(values) / len(values) if values else math.nan
    norms = [r["grad_norm_raw"] for r in steps if "grad_norm_raw" in r]
    if norms:
        out["grad_norm_raw"] = sum(norms) / len(norms)
        out["zero_grad_frac"] = sum(v == 0.0 for v in norms) / len(norms)
    return out


def distinct_per_row(versions: Tensor, mask: Tensor) -> Tensor:
    """Number of distinct policy versions among each sequence's tokens (1 unless partial rollouts)."""
    v = torch.where(mask, versions, versions.new_full((), -1))
    changes = (v[:, 1:] != v[:, :-1]) & mask[:, 1:] & mask[:, :-1]
    return 1 + changes.sum(-1)


def pool(items: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Combine per-micro-batch metrics: max of ``*_max``, min of ``*_min``, else a weighted mean."""
    out: dict[str, float] = {}
    weights: dict[str, float] = {}
    for metrics, w in items:
        for key, value in metrics.items():
            value = float(value)
            if key not in out:
                out[key], weights[key] = value * (1 if key.endswith(("_max", "_min")) else w), w
            elif key.endswith("_max"):
                out[key] = max(out[key], value)
            elif key.endswith("_min"):
                out[key] = min(out[key], value)
            else:
                out[key] += value * w
                weights[key] += w
    return {k: v if k.endswith(("_max", "_min")) else v / max(weights[k], 1e-12) for k, v in out.items()}
