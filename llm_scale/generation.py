"""Sampling with recorded behaviour log-probs: what a rollout batch is and how its tokens are drawn.

`sample_completions` draws each token from the sampling distribution mu = softmax of the logits
at ``temperature``, restricted to the ``top_k`` most likely tokens and then to the smallest
top set of probability mass >= ``top_p`` (the order Hugging Face's generate uses), renormalised,
and records log mu(token): the behaviour log-prob is that of the distribution actually sampled,
from the same logits. The learner's log-prob is that of the full tempered softmax, so with top-k /
top-p the importance ratio pi / mu is the kept mass (<= 1) at each token. Each token also records
the policy version of the weights that produced it. Non-finite logits raise `NonFiniteRollout`.

This module knows nothing of workers, weights in flight or tasks: `sampler.Sampler` turns a task
into prompts and rewards around it, and `rollout` runs samplers ahead of the learner.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

Refresh = Callable[[], "int | None"]


class NonFiniteRollout(RuntimeError):
    """The rollout policy produced NaN or inf logits (its weights have diverged)."""


@dataclass
class RolloutBatch:
    """One batch of B = prompts x group_size trajectories, with everything the learner needs."""

    index: int  # batch k, consumed by learner update k
    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P] 1 for real prompt tokens
    completion_ids: Tensor  # [B, T] right-padded
    completion_mask: Tensor  # [B, T] bool: generated tokens up to and including eos
    behavior_logp: Tensor  # [B, T] float32, log mu(token) of the distribution sampled
    versions: Tensor  # [B, T] int64, policy version that produced each token
    rewards: Tensor  # [B] float32
    group_ids: Tensor  # [B] int64, prompt group
    gen_seconds: float = 0.0

    @property
    def n_tokens(self) -> int:
        return int(self.completion_mask.sum())

    def to(self, device: torch.device | str) -> RolloutBatch:
        moved = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, value in moved.items():
            if isinstance(value, Tensor):
                moved[key] = value.to(device)
        return RolloutBatch(**moved)

    def state(self) -> dict[str, Any]:
        return self.to("cpu").__dict__.copy()


def position_ids(mask: Tensor) -> Tensor:
    """Positions counted over real tokens only (left padding gets position 0)."""
    return (mask.long().cumsum(-1) - 1).clamp(min=0)


def sampling_logprobs(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """log mu over the vocabulary: tempered softmax, then top-k, then top-p, renormalised (-inf outside).

    top-k keeps the k largest logits (0: all); top-p keeps the smallest set of most likely tokens
    whose probability reaches ``top_p`` (1: all), always at least one token.
    """
    scaled = logits.float() / temperature
    if top_k and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        probs, order = torch.sort(F.softmax(scaled, dim=-1), dim=-1, descending=True)
        before = probs.cumsum(-1) - probs  # mass of the more likely tokens
        drop = before >= top_p
        drop[..., 0] = False
        scaled = scaled.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return F.log_softmax(scaled, dim=-1)


def hit_budget(ids: Tensor, mask: Tensor, stop_ids: list[int]) -> Tensor:
    """[B] true where a completion (``ids``, ``mask`` [B, T]) holds no stop token among its tokens: it ended
    because the budget of new tokens ran out, not because it was finished."""
    stop = torch.tensor(stop_ids, dtype=ids.dtype, device=ids.device)
    return ~(torch.isin(ids, stop) & mask).any(-1)


@functools.cache
def cache_argument(forward: Callable[..., Any]) -> str:
    """The name under which ``forward`` takes and returns the key/value cache: ``cache`` in the transformers
    releases that renamed it (where ``past_key_values`` still works but warns on every call, until 5.40), else
    ``past_key_values``."""
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


def _forward(model: torch.nn.Module, ids: Tensor, attn: Tensor, pos: Tensor, past: Any, last: bool = False) -> tuple[Tensor, Any]:
    """(logits of the last position [B, V] in float32, the cache) of one forward; ``last``: the model computes the
    logits of that position only (where it takes ``logits_to_keep``)."""
    name = cache_argument(type(model).forward)
    kwargs = {"input_ids": ids, "attention_mask": attn, "position_ids": pos, "use_cache": True, name: past}
    try:
        out = model(**kwargs, logits_to_keep=1) if last else model(**kwargs)
    except TypeError:  # models without logits_to_keep
        out = model(**kwargs)
    return out.logits[:, -1].float(), getattr(out, name)


def distinct_rows(ids: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """(first, inverse): ``first`` [U] indexes one row of each distinct (``ids``, ``mask``) row [B, P] and ``inverse``
    [B] maps every row to its distinct row, so that ``ids[first][inverse] == ids`` (and the same for ``mask``)."""
    _, inverse = torch.unique(torch.cat([ids, mask.to(ids.dtype)], dim=1), dim=0, return_inverse=True)
    rows = torch.arange(inverse.numel(), device=inverse.device)
    first = torch.empty(int(inverse.max()) + 1, dtype=torch.long, device=inverse.device).scatter_(0, inverse, rows)
    return first, inverse


def select_cache(past: Any, index: Tensor) -> Any:
    """The key/value cache of rows ``index`` (repeated or dropped rows alike), or None when the cache cannot reorder its
    rows (a legacy tuple cache)."""
    if not hasattr(past, "reorder_cache"):
        return None
    past.reorder_cache(index)
    return past


# A matrix product of fewer rows than this takes another kernel path in MKL (the CPU's BLAS) whose rounding differs, so
# the shortcuts below never run a forward on fewer rows than this (or than the whole batch, when it is smaller)
MIN_ROWS = 4


def _prefill(model: torch.nn.Module, prompt_ids: Tensor, attn: Tensor, shortcuts: bool = True) -> tuple[Tensor, Any]:
    """The prompt's forward, on a CPU once per distinct prompt row and with the logits of the last position only: a
    group of identical prompts (one prompt sampled ``group_size`` times) shares one forward, whose cache rows and last
    logits are then repeated for each copy. A row's result does not depend on the other rows of its batch when both
    have at least `MIN_ROWS` rows, so this equals the plain forward of every row bit for bit."""
    if not shortcuts or prompt_ids.device.type != "cpu" or prompt_ids.shape[0] < MIN_ROWS:
        return _forward(model, prompt_ids, attn, position_ids(attn), None)
    first, inverse = distinct_rows(prompt_ids, attn)
    if first.numel() == prompt_ids.shape[0] or first.numel() < MIN_ROWS:
        return _forward(model, prompt_ids, attn, position_ids(attn), None, last=True)
    sub = attn[first]
    logits, past = _forward(model, prompt_ids[first], sub, position_ids(sub), None, last=True)
    repeated = select_cache(past, inverse)
    if repeated is None:
        return _forward(model, prompt_ids, attn, position_ids(attn), None, last=True)
    return logits[inverse], repeated


def _still_held(done: Tensor) -> Tensor | None:
    """Which of the held rows (``done`` [H]: finished or not) the next decoding forwards keep, or None to keep them all:
    once an eighth of them has finished, the live rows, topped up with finished ones to `MIN_ROWS`."""
    live = ~done
    n_live = int(live.sum())
    if 8 * n_live > 7 * done.numel() or done.numel() <= MIN_ROWS:
        return None
    if n_live < MIN_ROWS:
        live[done.nonzero()[: MIN_ROWS - n_live, 0]] = True
    return live.nonzero()[:, 0]


@torch.no_grad()
def sample_completions(
    model: torch.nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    max_new_tokens: int,
    temperature: float,
    eos_ids: list[int],
    pad_id: int,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    version: int = 0,
    refresh: Refresh | None = None,
    chunk: int = 0,
    shortcuts: bool = True,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sample up to ``max_new_tokens`` per row; return (ids, mask, behaviour log-probs, versions), each [B, T].

    ``temperature == 0`` decodes greedily (log-probs then of the untempered softmax). ``refresh``
    (called every ``chunk`` tokens when both are given) may swap the model's weights and returns
    the new version, or None for no change; the cache is then rebuilt under the new weights.

    On a CPU, unless ``shortcuts`` is False, the forwards skip work whose result is discarded, without changing
    a bit of what is returned: identical prompt rows share one prefill (`_prefill`), and the rows that have
    finished drop out of the decoding forwards once they are an eighth of the rows still held (`_still_held`;
    their later tokens are padding whatever the model says), and the prefill computes the logits of the last
    prompt position only. Every step still draws the noise of all B rows from ``generator`` (the logits of a
    finished row stay those of its last forward), so the tokens drawn for the live rows are those of the full
    batch. A finished row's forwards are not checked for non-finite logits once it has been dropped.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    attn = prompt_mask.long()
    logits, past = _prefill(model, prompt_ids, attn, shortcuts)
    next_pos = position_ids(attn)[:, -1:] + 1
    eos = torch.tensor(sorted(set(eos_ids)), device=device, dtype=torch.long)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    held = torch.arange(batch, device=device)  # the rows the cache holds, in batch order
    toks, lps, vers, keep = [], [], [], []
    for t in range(max_new_tokens):
        if refresh is not None and chunk > 0 and t > 0 and t % chunk == 0:
            new_version = refresh()
            if new_version is not None and new_version != version:
                version = new_version
                ids = torch.cat([prompt_ids, *toks], dim=1)[held]
                sub = attn[held]
                logits[held], past = _forward(model, ids, sub, position_ids(sub), None)
        live = ~done
        logp_all = sampling_logprobs(logits, temperature, top_k, top_p) if temperature > 0 else F.log_softmax(logits, dim=-1)
        # NaN anywhere, or +inf (from logits too large for float32), means the weights have diverged
        if bool((torch.isnan(logp_all) | (logp_all == float("inf"))).any()):
            raise NonFiniteRollout(
                f"the rollout policy (version {version}) produced non-finite logits at completion token {t}"
            )
        if temperature > 0:
            tok = torch.multinomial(logp_all.exp(), 1, generator=generator)
        else:
            tok = logp_all.argmax(dim=-1, keepdim=True)
        tok = torch.where(live[:, None], tok, torch.full_like(tok, pad_id))
        toks.append(tok)
        lps.append(torch.where(live[:, None], logp_all.gather(-1, tok), torch.zeros_like(tok, dtype=torch.float32)))
        vers.append(torch.full_like(tok, version))
        keep.append(live[:, None])
        done = done | torch.isin(tok[:, 0], eos)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones_like(tok)], dim=1)
        index = _still_held(done[held]) if shortcuts and device.type == "cpu" else None
        if index is not None and index.numel() < held.numel():
            kept = select_cache(past, index)
            if kept is not None:
                past, held = kept, held[index]
        logits[held], past = _forward(model, tok[held], attn[held], next_pos[held], past)
        next_pos = next_pos + 1
    return torch.cat(toks, 1), torch.cat(keep, 1), torch.cat(lps, 1), torch.cat(vers, 1)
