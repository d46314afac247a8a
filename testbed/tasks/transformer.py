"""A small decoder-only transformer policy for the sequence tasks (token reversal / copy / flip).

The policy reads the context tokens x_1..x_H, a separator, then its own previous actions, and
predicts the next action: one causal sequence

    [x_1, ..., x_H, SEP, a_1, ..., a_{T'-1}]  ->  logits for a_1, ..., a_{T'}

read off the last T' positions. Context tokens and actions share one embedding table (ids 0..M-1;
SEP is id M), so copying and reversing are a matter of attention, as in a language model.
Defaults follow what is known of the Delightful distributed PG paper's model (arXiv 2603.20521,
secondary summary): d_model 64, 2 layers, 2 heads. The rest are our choices: pre-LayerNorm blocks,
learned absolute positions, GELU MLP of width 4 d_model, no dropout.

Slots. The module holds S independent models (testbed/tasks/stacked.py): every parameter is
``[S, ...]``, contexts and actions are ``[S, B, ...]``. It has no state outside its parameters (no
buffers; the causal mask comes from ``is_causal=True``), so ``torch.func.functional_call(policy,
params, (contexts, actions))`` with any parameter dict evaluates exactly that version.

Sampling with a key/value cache: `prefill` runs the context, the separator and the actions already
chosen, keeping every layer's keys and values; `extend` then adds one action at a time, attending
over the cache, so sampling H tokens costs about one forward pass of the whole sequence instead of H.

Initialisation uses only the generator passed in: weights and embeddings N(0, init_std^2) with
init_std = 0.2 (residual output projections scaled by 1/sqrt(2 n_layers), as in GPT-2), zero biases,
unit LayerNorm gains. GPT-2's 0.02 is too small for a model this narrow trained by policy gradient:
the context barely reaches the output, Adam turns the noise-dominated first gradients into full
steps, and the policy collapses to a context-free answer. Measured with pg (exact-sequence reward,
batch-mean baseline) at H = 4, M = 2, 300 steps of 100 episodes, one seed (final sampled sequence error): init 0.02: 94% (Adam 1e-3), 75%
(3e-4); init 0.1: 25% (1e-3), 1.2% (3e-4), 7.6% (1e-4); init 0.2: 1.0% (3e-4); init 0.3: 38% (1e-3).
With init 0.2 through the runner (10 actors, 100 episodes per step), pg reached at most 1% by step
100 with Adam 1e-3 and about 1% by step 300 with 3e-4 (2 seeds each). Hence init 0.2 and the task's
default lr 1e-3 (token_reversal.py). The output head is
zero-initialised by default, so the initial policy is *exactly* uniform: every token has
probability 1/M in every context, and an exact length-H sequence has probability M^-H (the
rare-discovery baseline of token_reversal.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import stacked


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)); causal self-attention."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, generators: Sequence[torch.Generator]) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = stacked.LayerNorm(d_model, generators)
        self.qkv = stacked.Linear(d_model, 3 * d_model, generators, init="zeros")
        self.proj = stacked.Linear(d_model, d_model, generators, init="zeros")
        self.ln2 = stacked.LayerNorm(d_model, generators)
        self.fc = stacked.Linear(d_model, d_ff, generators, init="zeros")
        self.out = stacked.Linear(d_ff, d_model, generators, init="zeros")

    def heads(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v [S, B, heads, n, d_head] of the positions in ``x`` [S, B, n, d]."""
        s, b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        shape = (s, b, n, self.n_heads, d // self.n_heads)
        return tuple(t.reshape(shape).transpose(2, 3) for t in (q, k, v))  # type: ignore[return-value]

    def finish(self, x: Tensor, att: Tensor) -> Tensor:
        """The residual updates after attention output ``att`` [S, B, heads, n, d_head] (``x``: those n positions)."""
        s, b, n, d = x.shape
        x = x + self.proj(att.transpose(2, 3).reshape(s, b, n, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))

    def forward(self, x: Tensor, first: int = 0) -> Tensor:
        """The block's output at positions ``first``.. of ``x`` [S, B, n, d] (every position's keys and values
        are used; the last block of a pass needs only the positions it reads logits from)."""
        q, k, v = self.heads(x)
        return self.finish(x[:, :, first:], stacked.attention(q[..., first:, :], k, v, causal=True))


@dataclass
class Cache:
    """Keys and values of every layer for the positions decoded so far: [S, B, heads, capacity, d_head]."""

    keys: list[Tensor]
    values: list[Tensor]
    length: int


class DecoderTransformer(nn.Module):
    """Causal transformer policy for S slots over a length-H context and up to H actions from a vocabulary
    of M.

    ``forward(contexts [S, B, H] long, actions [S, B, T'] long) -> logits [S, B, T', M]``; position t of
    the output depends only on the context and ``actions[..., :t]`` (so padding after t is ignored).
    """

    def __init__(
        self,
        horizon: int,
        vocab: int,
        d_model: int = 64,
        n_layers: int = 2,
        n_heads: int = 2,
        d_ff: int | None = None,
        *,
        generators: Sequence[torch.Generator],
        init_std: float = 0.2,
        zero_head: bool = True,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if min(horizon, vocab, d_model, n_layers, n_heads) < 1:
            raise ValueError("horizon, vocab, d_model, n_layers and n_heads must all be >= 1")
        self.horizon, self.vocab, self.d_model = horizon, vocab, d_model
        self.sep = vocab  # separator token id
        self.embed = stacked.Embedding(vocab + 1, d_model, generators, std=0.0)
        self.pos = stacked.Embedding(2 * horizon, d_model, generators, std=0.0)  # H context + SEP + at most H - 1 actions
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff or 4 * d_model, generators) for _ in range(n_layers))
        self.ln_f = stacked.LayerNorm(d_model, generators)
        self.head = stacked.Linear(d_model, vocab, generators, init="zeros")
        self.reset_parameters(generators, init_std, zero_head)

    @torch.no_grad()
    def reset_parameters(self, generators: Sequence[torch.Generator], std: float, zero_head: bool) -> None:
        """Slot by slot, parameter by parameter (in `named_parameters` order), from the slot's generator."""
        resid_std = std / math.sqrt(2 * len(self.blocks))
        for i, gen in enumerate(generators):
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p[i].zero_()
                elif ".ln" in name or name.startswith("ln_"):
                    p[i].fill_(1.0)  # LayerNorm weights
                elif name == "head.weight" and zero_head:
                    p[i].zero_()
                elif name.endswith(("proj.weight", "out.weight")):
                    p[i].normal_(0.0, resid_std, generator=gen)
                else:
                    p[i].normal_(0.0, std, generator=gen)

    def _check(self, contexts: Tensor, actions: Tensor) -> None:
        if contexts.dim() != 3 or contexts.shape[2] != self.horizon or actions.shape[2] > self.horizon:
            raise ValueError(f"expected contexts [S, B, {self.horizon}] and actions [S, B, <= {self.horizon}], got "
                             f"{tuple(contexts.shape)} and {tuple(actions.shape)}")

    def _tokens(self, contexts: Tensor, actions: Tensor, t: int) -> Tensor:
        """[x_1..x_H, SEP, a_1..a_{t-1}] embedded with positions: [S, B, H + t, d]."""
        sep = torch.full((*contexts.shape[:2], 1), self.sep, dtype=torch.long, device=contexts.device)
        tokens = torch.cat([contexts.long(), sep, actions[..., : t - 1].long()], dim=2)
        return self.embed(tokens) + self.pos.weight[:, : tokens.shape[2]].unsqueeze(1)

    def forward(self, contexts: Tensor | None, actions: Tensor, *, start: int | None = None,
                cache: Cache | None = None) -> Tensor | tuple[Tensor, Cache]:
        """Teacher-forced logits [S, B, T', M] by default; ``start=k``: `prefill` (logits of position k and
        the cache); ``cache=c``: `extend` with ``actions`` [S, B] (logits of the next position). The
        modes are keyword arguments of ``forward`` (like a language model's past key/values) so that
        ``torch.func.functional_call`` evaluates any parameter set in every mode."""
        if cache is not None:
            return self.extend(cache, actions)
        if start is not None:
            return self.prefill(contexts, actions, start)
        self._check(contexts, actions)
        h, t = self.horizon, actions.shape[2]
        if t == 0:
            return contexts.new_zeros((*contexts.shape[:2], 0, self.vocab), dtype=torch.float32)
        x = self._tokens(contexts, actions, t)
        for i, block in enumerate(self.blocks):
            x = block(x, first=h if i == len(self.blocks) - 1 else 0)
        return self.head(self.ln_f(x))  # positions SEP, a_1, ..., a_{t-1}

    # -- sampling with a key/value cache --------------------------------------------------------
    def prefill(self, contexts: Tensor | None, actions: Tensor, start: int) -> tuple[Tensor, Cache]:
        """Logits [S, B, M] of action position ``start`` (0-based) given the context and ``actions[..., :start]``,
        and the cache of every position so far (room for the whole sequence)."""
        self._check(contexts, actions)
        x = self._tokens(contexts, actions, start + 1)
        s, b, n, _ = x.shape
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            q, k, v = block.heads(x)
            cap = (s, b, k.shape[2], 2 * self.horizon, k.shape[4])
            keys.append(k.new_empty(cap))
            values.append(v.new_empty(cap))
            keys[-1][..., :n, :] = k
            values[-1][..., :n, :] = v
            first = n - 1 if i == len(self.blocks) - 1 else 0  # the last block: only the position read
            x = block.finish(x[:, :, first:], stacked.attention(q[..., first:, :], k, v, causal=True))
        return self.head(self.ln_f(x[:, :, -1])), Cache(keys, values, n)

    def extend(self, cache: Cache, action: Tensor) -> Tensor:
        """Append ``action`` [S, B] (the action at the position just sampled) and return the logits
        [S, B, M] of the next position; ``cache`` grows by one."""
        n = cache.length
        x = self.embed(action.unsqueeze(2).long()) + self.pos.weight[:, n : n + 1].unsqueeze(1)
        for block, keys, values in zip(self.blocks, cache.keys, cache.values, strict=True):
            q, k, v = block.heads(x)
            keys[..., n : n + 1, :] = k
            values[..., n : n + 1, :] = v
            x = block.finish(x, stacked.attention(q, keys[..., : n + 1, :], values[..., : n + 1, :], causal=False))
        cache.length = n + 1
        return self.head(self.ln_f(x[:, :, -1]))
