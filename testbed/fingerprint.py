"""``python -m testbed fingerprint --regime NAME``: the testbed regime's staleness fingerprint.

The same statistics, computed by the same functions (testbed/stabilizers/fingerprint.py), and the same
JSON schema as llm_scale's fingerprint of a real model, so that a regime can be set beside the LLM it
stands for:

1. Train the regime's base recipe (GRPO) synchronously from the regime's settings for ``at x steps``
   learner steps (a prefix of the regime's run: no schedule depends on the total), keeping the
   parameters of the versions the staleness rows need.
2. At that version, draw ``groups`` fresh contexts, G samples each from the current policy, and compute
   every group's gradient of the recipe's surrogate (token-mean over the group's G samples, the same
   loss the learner uses) in one backward pass: the policy's slot dimension holds one copy of the
   parameters per group. Their Gram matrix gives the cosine between disjoint minibatches of whole groups
   at every minibatch size m = G, 2G, 4G, ... (`minibatch_cosines`, Student-t intervals) and the gradient
   noise scale B_noise (fitted to cos(m) = m / (m + B_noise), and McCandlish et al.'s Gram estimate in
   ``extra``).
3. For every lag L: the same number of groups sampled from version t - L, weighed by version t
   (`staleness_stats`: ESS per sequence and per token, log-ratio quantiles, PPO clip fraction at eps 0.2).
4. The zero-advantage group fraction and the mean entropy of the on-policy sample; ``truncated_frac`` is
   NaN (a testbed episode has a fixed length: nothing is cut).

Writes ``OUT/<regime>.json`` (``results/fingerprint`` by default) and ``OUT/<regime>.png``: the regime's
cosine-by-minibatch and ESS-by-lag beside the newest real-model fingerprint of each model and task found
under ``results/llm/fingerprint/`` (a re-measurement supersedes the earlier ones).
"""

from __future__ import annotations

import datetime
import functools
import math
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.func import functional_call

from testbed.config import RunConfig
from testbed.runner import Runner
from testbed.stabilizers import PolicyTerms, Recipe
from testbed.stabilizers.fingerprint import (
    Fingerprint,
    gram_matrix,
    mean_token_entropy,
    minibatch_cosines,
    newest_files,
    noise_scale_from_cosines,
    noise_scale_from_gram,
    staleness_stats,
    zero_advantage_frac,
)
from testbed.tasks.base import token_logp
from testbed.util.provenance import commit
from testbed.util.seeding import generator

DEFAULT_LAGS = (1, 2, 4, 8, 16, 32)
REAL_DIR = Path("results/llm/fingerprint")
# The real model's measured cosines between disjoint minibatches (m sequences, cosine), from ALGORITHMS.md:
# SmolLM2-135M-Instruct on arithmetic, dense reward at 16 and 64, sparse reward at 8.
REAL_KNOWN = ((8, -0.01), (16, 0.10), (64, 0.27))


def _view(policy: torch.nn.Module, params: dict[str, Tensor], n: int) -> Any:
    """The policy with ``params`` (one slot's tensors) repeated in ``n`` slots, each a leaf with its own grad."""
    rep = {k: v.detach().unsqueeze(0).repeat(n, *([1] * v.dim())).requires_grad_(True) for k, v in params.items()}
    return functools.partial(lambda p, *a, **kw: functional_call(policy, p, a, kw), rep), rep


@torch.no_grad()
def sample_groups(task: Any, view: Any, contexts: Tensor, group_size: int, gen: torch.Generator) -> Tensor:
    """Actions [n, G, T] sampled from ``view`` (n slots) with slot i holding G copies of context i."""
    x = contexts.unsqueeze(1).repeat_interleave(group_size, dim=1)
    n, horizon = contexts.shape[0], int(task.horizon)
    actions = torch.zeros((n, group_size, horizon), dtype=torch.long)
    state = task.decode_state(view, x, actions, 0)
    for k in range(horizon):
        logits, state = task.decode(view, state, actions, k)
        probs = torch.softmax(logits.float(), -1).reshape(-1, logits.shape[-1])
        actions[..., k] = torch.multinomial(probs, 1, generator=gen).reshape(n, group_size)
    return actions


def group_gradients(task: Any, policy: torch.nn.Module, params: dict[str, Tensor], recipe: Recipe, contexts: Tensor,
                    actions: Tensor, behavior_logp: Tensor | None = None, agg: str = "token-mean") -> dict[str, Tensor]:
    """Every group's surrogate gradient at ``params``: slot i of an n-slot copy of the policy sees group i only
    (contexts [n], actions [n, G, T]), so one backward gives the n per-group gradients ``grads`` [n, P]; also
    ``rewards`` [n, G], ``advantages``, ``logp`` [n, G, T] and the ``logits``. ``behavior_logp`` defaults to the
    current log-probs (on-policy)."""
    n, g = actions.shape[:2]
    view, rep = _view(policy, params, n)
    x = contexts.unsqueeze(1).repeat_interleave(g, dim=1)
    with torch.enable_grad():
        logits = task.logits(view, x, actions)
        logp = token_logp(logits, actions)
        blogp = logp.detach() if behavior_logp is None else behavior_logp
        rewards = torch.stack([task.reward(x[i], actions[i]).float() for i in range(n)])
        gids = torch.arange(n).repeat_interleave(g)
        flat_logp, flat_b = logp.detach().reshape(n * g, -1), blogp.reshape(n * g, -1)
        adv = recipe.advantages(rewards.reshape(-1), group_ids=gids, logp=flat_logp, behavior_logp=flat_b,
                                mask=torch.ones_like(flat_logp, dtype=torch.bool))
        adv = adv.reshape(n, g, *adv.shape[1:])
        mask = torch.ones_like(logp[0], dtype=torch.bool)
        total = sum(recipe.loss(PolicyTerms(logp[i], blogp[i], adv[i], mask, proximal_logp=blogp[i],
                                            group_ids=torch.zeros(g, dtype=torch.long), rewards=rewards[i]), agg).loss
                    for i in range(n))
        grads = torch.autograd.grad(total, list(rep.values()), allow_unused=True)
    flat = torch.cat([(gr if gr is not None else torch.zeros_like(p)).reshape(n, -1)
                      for gr, p in zip(grads, rep.values(), strict=True)], 1)
    return {"grads": flat.detach(), "rewards": rewards, "advantages": adv, "logp": logp.detach(),
            "logits": logits.detach()}


def fingerprint(regime: str, task: str = "mnist", recipe: str = "grpo", steps: int | None = None, at: float = 0.5,
                groups: int = 256, lags: tuple[int, ...] = DEFAULT_LAGS, seed: int = 0,
                command: str = "", settings: dict[str, Any] | None = None) -> Fingerprint:
    """The fingerprint of ``regime`` (module docstring); ``settings``: run fields that override the regime's
    (e.g. a candidate's group_size, minibatches, lr)."""
    t0 = time.perf_counter()
    base = RunConfig(task=task, recipe=recipe, regime=regime, delay="sync", seed=seed,
                     **({} if steps is None else {"steps": steps}), **(settings or {})).resolved()
    version = max(1, round(at * base.steps))
    cfg = RunConfig(**{**base.to_dict(), "steps": version, "log_every": version})
    runner = Runner(cfg)
    keep = {version, *(version - lag for lag in lags if version - lag >= 0)}
    snapshots: dict[int, dict[str, Tensor]] = {}

    def on_version(run: int, v: int, params: dict[str, Tensor]) -> None:
        if v in keep:
            snapshots[v] = {k: p.detach().clone() for k, p in params.items()}

    runner.on_version = on_version
    runner.run()
    spec = cfg.parse()
    g = cfg.group_size
    policy, task_obj = runner.policy, runner.task
    current = snapshots[version]
    gen = generator(seed, "fingerprint", version)
    contexts = task_obj.sample_contexts(groups, gen, "train")
    view, _ = _view(policy, current, groups)
    actions = sample_groups(task_obj, view, contexts, g, gen)
    out = group_gradients(task_obj, policy, current, spec.recipe, contexts, actions, agg=cfg.agg)
    gram = gram_matrix(out["grads"])
    sizes = [g * k for k in (1, 2, 4, 8, 16, 32) if 2 * k <= groups]
    cosines = minibatch_cosines(gram, g, sizes, seed=seed)
    noise = noise_scale_from_cosines([c.m for c in cosines], [c.mean for c in cosines], [c.pairs for c in cosines])
    gids = torch.arange(groups).repeat_interleave(g)
    mask = torch.ones(groups * g, int(task_obj.horizon), dtype=torch.bool)
    stale = []
    for lag in lags:
        if version - lag not in snapshots:
            continue
        old_view, _ = _view(policy, snapshots[version - lag], groups)
        lag_gen = generator(seed, "fingerprint", version, "lag", lag)
        lag_ctx = task_obj.sample_contexts(groups, lag_gen, "train")
        lag_actions = sample_groups(task_obj, old_view, lag_ctx, g, lag_gen)
        x = lag_ctx.unsqueeze(1).repeat_interleave(g, dim=1)
        with torch.no_grad():
            old = token_logp(task_obj.logits(old_view, x, lag_actions), lag_actions).reshape(groups * g, -1)
            new = token_logp(task_obj.logits(view, x, lag_actions), lag_actions).reshape(groups * g, -1)
            rewards = torch.stack([task_obj.reward(x[i], lag_actions[i]).float() for i in range(groups)]).reshape(-1)
            adv = spec.recipe.advantages(rewards, group_ids=gids, logp=new, behavior_logp=old, mask=mask)
        stale.append(staleness_stats(new, old, mask, lag, eps=0.2, advantages=adv))
    n_tok = out["logp"].reshape(groups * g, -1)
    extra = {"regime": regime, "recipe": recipe, "version": version, "group_size": g,
             "regime_minibatch": cfg.batch_size // cfg.minibatches, "groups": groups,
             "noise_scale_gram": noise_scale_from_gram(gram, g), "mean_reward": float(out["rewards"].mean()),
             "max_prob": float(torch.softmax(out["logits"].float(), -1).max(-1).values.mean()),
             "config": cfg.to_dict()}
    return Fingerprint(
        model=f"testbed:{task}", task=regime, cosine_by_minibatch=cosines, noise_scale=noise, staleness=stale,
        zero_advantage_frac=zero_advantage_frac(out["rewards"].reshape(-1), gids),
        entropy=mean_token_entropy(out["logits"].reshape(groups * g, n_tok.shape[1], -1),
                                   torch.ones_like(n_tok, dtype=torch.bool)),
        truncated_frac=math.nan, command=command,
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), commit=commit() or "unknown",
        wall_s=time.perf_counter() - t0, extra=extra)


def real_fingerprints(directory: Path = REAL_DIR) -> list[Fingerprint]:
    """The newest real-model fingerprint of each model and task anywhere under ``directory`` (`newest_files`: a
    re-measurement supersedes the earlier ones; none when the directory does not exist)."""
    return [Fingerprint.load(str(path)) for path, _ in newest_files(directory)]


def figure(fp: Fingerprint, others: list[Fingerprint], path: Path) -> None:
    """Cosine by minibatch size (with 90% intervals and the fitted m / (m + B_noise)) and sequence ESS by lag,
    the regime beside the real models."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for k, f in enumerate([fp, *others]):
        color = f"C{k}"
        label = f"{f.model} / {f.task}"
        rows = [c for c in f.cosine_by_minibatch if math.isfinite(c.mean)]
        if rows:
            m = [c.m for c in rows]
            ax1.errorbar(m, [c.mean for c in rows], yerr=[[c.mean - c.ci_low if math.isfinite(c.ci_low) else 0
                                                         for c in rows],
                                                        [c.ci_high - c.mean if math.isfinite(c.ci_high) else 0
                                                         for c in rows]],
                         fmt="o-", color=color, label=label, capsize=3)
            if math.isfinite(f.noise_scale):
                grid = torch.logspace(math.log10(min(m)), math.log10(max(m)), 50).tolist()
                ax1.plot(grid, [x / (x + f.noise_scale) for x in grid], "--", color=color, alpha=0.6,
                         label=f"m/(m+B), B={f.noise_scale:.0f}")
        st = [s for s in f.staleness if math.isfinite(s.ess_seq)]
        if st:
            ax2.plot([s.lag for s in st], [s.ess_seq for s in st], "o-", color=color, label=label)
    if not others:  # no real fingerprint file yet: the measured points of ALGORITHMS.md
        ax1.plot([m for m, _ in REAL_KNOWN], [c for _, c in REAL_KNOWN], "k*", markersize=9,
                 label="SmolLM2-135M-Instruct, arithmetic (ALGORITHMS.md)")
    ax1.set(xscale="log", xlabel="minibatch size m (sequences)", ylabel="cosine of disjoint minibatches",
            title="gradient cosine (90% interval)")
    ax1.axhline(0, color="grey", lw=0.5)
    ax2.set(xscale="log", xlabel="lag (versions)", ylabel="ESS / N (sequences)", ylim=(0, 1.05),
            title="importance-weight ESS by lag")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _f(x: float) -> str:
    return "-" if not math.isfinite(x) else f"{x:.3g}"


def describe(fp: Fingerprint, others: list[Fingerprint]) -> str:
    """Text tables: cosine by minibatch size and staleness by lag, one column block per fingerprint."""
    lines = []
    for f in [fp, *others]:
        lines.append(f"{f.model} / {f.task}: noise scale {_f(f.noise_scale)} sequences, zero-advantage groups "
                     f"{_f(f.zero_advantage_frac)}, entropy {_f(f.entropy)}")
        lines.append("  m: " + "  ".join(f"{c.m}: {_f(c.mean)} [{_f(c.ci_low)}, {_f(c.ci_high)}] ({c.pairs})"
                                         for c in f.cosine_by_minibatch))
        lines.append("  lag: " + "  ".join(f"{s.lag}: ess {_f(s.ess_seq)}/{_f(s.ess_token)} q95 {_f(s.logratio_q95)} "
                                           f"clip {_f(s.clip_frac)}" for s in f.staleness))
    return "\n".join(lines)
