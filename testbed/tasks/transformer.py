"""A small decoder-only transformer policy for the sequence tasks (token reversal / copy / flip).

The policy reads the context tokens x_1..x_H, a separator, then its own previous actions, and
predicts the next action: one causal sequence

    [x_1, ..., x_H, SEP, a_1, ..., a_{T'-1}]  ->  logits for a_1, ..., a_{T'}

read off the last T' positions. Context tokens and actions share one embedding table (ids 0..M-1;
SEP is id M), so copying and reversing are a matter of attention, as in a language model.
Defaults follow what is known of the Delightful distributed PG paper's model (arXiv 2603.20521,
secondary summary): d_model 64, 2 layers, 2 heads. The rest are our choices: pre-LayerNorm blocks,
learned absolute positions, GELU MLP of width 4 d_model, no dropout.

Functional-call friendly: the module has no state outside its parameters (no buffers at all; the
causal mask comes from ``is_causal=True``), nothing is cached between calls, and the forward pass is
a pure function of (parameters, contexts, actions). So ``torch.func.functional_call(policy,
params, (contexts, actions))`` with any stored parameter dict evaluates exactly that version.

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

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Block(nn.Module):
    """Pre-LN transformer block: x + attn(ln(x)), then x + mlp(ln(x)); causal self-attention."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, d_ff)
        self.out = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = (b, n, self.n_heads, d // self.n_heads)
        q, k, v = (t.reshape(heads).transpose(1, 2) for t in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, n, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class DecoderTransformer(nn.Module):
    """Causal transformer policy over a length-H context and up to H actions from a vocabulary of M.

    ``forward(contexts [B, H] long, actions [B, T'] long) -> logits [B, T', M]``; position t of the
    output depends only on the context and ``actions[:, :t]`` (so padding after t is ignored).
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
        generator: torch.Generator | None = None,
        init_std: float = 0.2,
        zero_head: bool = True,
    ) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        if min(horizon, vocab, d_model, n_layers, n_heads) < 1:
            raise ValueError("horizon, vocab, d_model, n_layers and n_heads must all be >= 1")
        self.horizon, self.vocab = horizon, vocab
        self.sep = vocab  # separator token id
        self.embed = nn.Embedding(vocab + 1, d_model)
        self.pos = nn.Embedding(2 * horizon, d_model)  # H context + SEP + at most H - 1 actions
        self.blocks = nn.ModuleList(Block(d_model, n_heads, d_ff or 4 * d_model) for _ in range(n_layers))
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)
        self.reset_parameters(generator, init_std, zero_head)

    @torch.no_grad()
    def reset_parameters(self, generator: torch.Generator | None, std: float, zero_head: bool) -> None:
        resid_std = std / math.sqrt(2 * len(self.blocks))
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif ".ln" in name or name.startswith("ln_"):
                p.fill_(1.0)  # LayerNorm weights
            elif name == "head.weight" and zero_head:
                p.zero_()
            elif name.endswith(("proj.weight", "out.weight")):
                p.normal_(0.0, resid_std, generator=generator)
            else:
                p.normal_(0.0, std, generator=generator)

    def forward(self, contexts: Tensor, actions: Tensor) -> Tensor:
        b, h = contexts.shape
        t = actions.shape[1]
        if h != self.horizon or t > self.horizon:
            raise ValueError(f"expected contexts [B, {self.horizon}] and actions [B, <= {self.horizon}], got "
                             f"{tuple(contexts.shape)} and {tuple(actions.shape)}")
        if t == 0:
            return contexts.new_zeros((b, 0, self.vocab), dtype=torch.float32)
        sep = torch.full((b, 1), self.sep, dtype=torch.long, device=contexts.device)
        tokens = torch.cat([contexts.long(), sep, actions[:, : t - 1].long()], dim=1)  # [B, H + t]
        x = self.embed(tokens) + self.pos.weight[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x[:, h:]))  # positions SEP, a_1, ..., a_{t-1}
