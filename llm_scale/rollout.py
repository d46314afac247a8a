"""Sampling with recorded behaviour log-probs, and the rollout pipeline that runs ahead of the learner.

`sample_completions` draws each token from softmax(logits / temperature) and records
log_softmax(logits / temperature) of the drawn token from *the same logits*: the behaviour
log-prob is exactly the log-probability the sampler used (the learner recomputes with the same
temperature). Each token also records the policy version of the weights that produced it.

`RolloutPipeline` serves batch k to learner update k. Synchronously (``sync=True``) it generates
batch k with the learner's own model at version k. Otherwise a background thread with its own copy
of the weights generates ahead, under AReaL's admission rule (arXiv 2505.24298): with batch size B,
learner version i and N_r trajectories generated, a new trajectory is admitted only while
floor((N_r - 1) / B) <= i + eta; for whole batches, batch k may start once k <= i + eta, so no
token is ever more than eta versions stale when it is trained on. Which weights the worker uses:

* ``lag_policy="latest"``: the newest published version (AReaL; the realised lag depends on timing);
* ``lag_policy="fixed"``: exactly version max(0, k - eta) (deterministic, hence reproducible and
  exactly resumable, for any eta; never older than the version the pipeline started from).

With ``partial_chunk = n > 0`` (latest only) the worker checks for newer weights every n tokens
and switches mid-sequence (re-encoding the prefix under the new weights), so one sequence spans
several versions (AReaL's partial rollouts); the per-token versions record which.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

LAG_POLICIES = ("latest", "fixed")


@dataclass
class RolloutBatch:
    """One batch of B = prompts x group_size trajectories, with everything the learner needs."""

    index: int  # batch k, consumed by learner update k
    prompt_ids: Tensor  # [B, P] left-padded
    prompt_mask: Tensor  # [B, P] 1 for real prompt tokens
    completion_ids: Tensor  # [B, T] right-padded
    completion_mask: Tensor  # [B, T] bool: generated tokens up to and including eos
    behavior_logp: Tensor  # [B, T] float32, log mu(token) at the sampling temperature
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


def _forward(model: torch.nn.Module, ids: Tensor, attn: Tensor, pos: Tensor, past: Any) -> tuple[Tensor, Any]:
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, past_key_values=past, use_cache=True)
    return out.logits[:, -1].float(), out.past_key_values


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
    generator: torch.Generator | None = None,
    version: int = 0,
    refresh: Callable[[], int | None] | None = None,
    chunk: int = 0,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Sample up to ``max_new_tokens`` per row; return (ids, mask, behaviour log-probs, versions), each [B, T].

    ``temperature == 0`` decodes greedily (log-probs then at temperature 1). ``refresh`` (called
    every ``chunk`` tokens when both are given) may swap the model's weights and returns the new
    version, or None for no change; the cache is then rebuilt under the new weights.
    """
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    attn = prompt_mask.long()
    logits, past = _forward(model, prompt_ids, attn, position_ids(attn), None)
    next_pos = position_ids(attn)[:, -1:] + 1
    eos = torch.tensor(sorted(set(eos_ids)), device=device)
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    toks, lps, vers, keep = [], [], [], []
    for t in range(max_new_tokens):
        if refresh is not None and chunk > 0 and t > 0 and t % chunk == 0:
            new_version = refresh()
            if new_version is not None and new_version != version:
                version = new_version
                ids = torch.cat([prompt_ids, *toks], dim=1)
                logits, past = _forward(model, ids, attn, position_ids(attn), None)
        if temperature > 0:
            logp_all = F.log_softmax(logits / temperature, dim=-1)
            tok = torch.multinomial(logp_all.exp(), 1, generator=generator)
        else:
            logp_all = F.log_softmax(logits, dim=-1)
            tok = logp_all.argmax(dim=-1, keepdim=True)
        live = ~done
        tok = torch.where(live[:, None], tok, torch.full_like(tok, pad_id))
        toks.append(tok)
        lps.append(torch.where(live[:, None], logp_all.gather(-1, tok), torch.zeros_like(tok, dtype=torch.float32)))
        vers.append(torch.full_like(tok, version))
        keep.append(live[:, None])
        done = done | torch.isin(tok[:, 0], eos)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones_like(tok)], dim=1)
        logits, past = _forward(model, tok, attn, next_pos, past)
        next_pos = next_pos + 1
    return torch.cat(toks, 1), torch.cat(keep, 1), torch.cat(lps, 1), torch.cat(vers, 1)


BatchFn = Callable[[torch.nn.Module, int, int, Callable[[], int | None] | None], RolloutBatch]


class _Store:
    """Published weight snapshots by version (clones), pruned once no future batch can need them."""

    def __init__(self) -> None:
        self.snapshots: dict[int, dict[str, Tensor]] = {}
        self.version = -1

    def publish(self, version: int, model: torch.nn.Module) -> None:
        self.snapshots[version] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.version = version

    def prune_below(self, version: int) -> None:
        for v in [v for v in self.snapshots if v < version]:
            del self.snapshots[v]


class RolloutPipeline:
    """Serves `RolloutBatch` k to learner update k, synchronously or from a worker running ahead.

    Args:
      make_batch: ``make_batch(model, k, version, refresh)`` generates batch k with ``model``.
      learner: the learner's model (its weights are version ``start`` now).
      eta: maximum staleness (versions) of any token at the update that consumes it.
      total: number of batches to serve (batches 0 .. total - 1).
      start: the learner's current version (and the first batch it will ask for).
      pending: batches already generated (restored from a checkpoint), by index.
    """

    def __init__(
        self,
        make_batch: BatchFn,
        learner: torch.nn.Module,
        *,
        eta: int,
        total: int,
        start: int = 0,
        sync: bool = False,
        lag_policy: str = "latest",
        partial_chunk: int = 0,
        pending: dict[int, RolloutBatch] | None = None,
    ) -> None:
        if eta < 0:
            raise ValueError(f"max staleness eta must be >= 0, got {eta}")
        if lag_policy not in LAG_POLICIES:
            raise ValueError(f"unknown lag policy {lag_policy!r}; allowed: {', '.join(LAG_POLICIES)}")
        if partial_chunk < 0:
            raise ValueError(f"partial_chunk must be >= 0, got {partial_chunk}")
        if partial_chunk and (sync or lag_policy != "latest"):
            raise ValueError("partial rollouts need the asynchronous worker with lag_policy='latest'")
        self.make_batch, self.learner, self.eta, self.total = make_batch, learner, eta, total
        self.sync, self.lag_policy, self.partial_chunk = sync, lag_policy, partial_chunk
        self.ready: dict[int, RolloutBatch] = dict(pending or {})
        self.cond = threading.Condition()
        self.store = _Store()
        self.error: BaseException | None = None
        self.stopping = False
        self.thread: threading.Thread | None = None
        self.worker_model: torch.nn.Module | None = None
        self.worker_version = -1
        self.start = start
        self.next_index = max(self.ready, default=start - 1) + 1
        self.store.version = start
        if not sync:
            self.store.publish(start, learner)
            self.worker_model = copy.deepcopy(learner).eval()
            for p in self.worker_model.parameters():
                p.requires_grad_(False)
            self.thread = threading.Thread(target=self._work, name="rollout-worker", daemon=True)
            self.thread.start()

    # -- learner side -------------------------------------------------------------------------------
    def get(self, k: int) -> tuple[RolloutBatch, float]:
        """Batch k and the seconds the learner waited for it."""
        t0 = time.perf_counter()
        if self.sync:
            batch = self.ready.pop(k, None)
            if batch is None:
                batch = self.make_batch(self.learner, k, self.store.version, None)
            return batch, time.perf_counter() - t0
        with self.cond:
            while k not in self.ready and self.error is None:
                self.cond.wait(timeout=1.0)
            if self.error is not None:
                raise RuntimeError(f"rollout worker failed: {self.error!r}") from self.error
            batch = self.ready.pop(k)
        return batch, time.perf_counter() - t0

    def publish(self, version: int) -> None:
        """The learner's model now holds ``version``; the worker may use it (sync: nothing to copy)."""
        if self.sync:
            self.store.version = version
            return
        with self.cond:
            self.store.publish(version, self.learner)
            self.cond.notify_all()

    def pending(self, k: int) -> dict[int, RolloutBatch]:
        """Batches >= k already generated, for a checkpoint taken before update k.

        Under the fixed lag policy it first waits for every batch that needs a version older than
        k (batches k .. k + eta - 1), so that a resumed run, which keeps only version k, replays
        exactly.
        """
        with self.cond:
            if not self.sync and self.lag_policy == "fixed":
                need = min(k + self.eta, self.total)
                while self.error is None and any(j not in self.ready for j in range(k, need)):
                    self.cond.wait(timeout=1.0)
                if self.error is not None:
                    raise RuntimeError(f"rollout worker failed: {self.error!r}") from self.error
            return {j: b for j, b in self.ready.items() if j >= k}

    def close(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join()

    # -- worker side --------------------------------------------------------------------------------
    def _load(self, version: int) -> None:
        assert self.worker_model is not None
        self.worker_model.load_state_dict(self.store.snapshots[version])
        self.worker_version = version
        self.store.prune_below(version)

    def _refresh(self) -> int | None:
        with self.cond:
            if self.store.version > self.worker_version:
                self._load(self.store.version)
                return self.worker_version
        return None

    def _work(self) -> None:
        try:
            while True:
                with self.cond:
                    k = self.next_index
                    # AReaL admission: batch k starts only once k <= version + eta.
                    while not self.stopping and k < self.total and k > self.store.version + self.eta:
                        self.cond.wait()
                    if self.stopping or k >= self.total:
                        return
                    # fixed: exactly eta behind, but never older than the version this pipeline began at
                    want = max(k - self.eta, self.start) if self.lag_policy == "fixed" else self.store.version
                    if want != self.worker_version:
                        self._load(want)
                refresh = self._refresh if self.partial_chunk else None
                batch = self.make_batch(self.worker_model, k, self.worker_version, refresh)
                with self.cond:
                    self.ready[k] = batch
                    self.next_index = k + 1
                    self.cond.notify_all()
        except BaseException as exc:  # surfaced to the learner by get()
            with self.cond:
                self.error = exc
                self.cond.notify_all()
