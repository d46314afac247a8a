"""GAC's signal without the noise cap: consecutive-update cosines of the *exact expected* gradient.

GAC (arXiv 2603.01501) reads the cosine c_t between the learner's current and previous policy gradient. Each is
an m-sample estimate of a mean gradient g with noise scale B = tr(Sigma) / |g|^2 (McCandlish et al. 2018, arXiv
1812.06162), so with r = m / B two independent estimates have expected cosine about
cos(g_t, g_{t+1}) x r / (1 + r): below r ~ 1 the noise caps what staleness can show. On the MNIST bandit the
noise can be removed exactly. With the learner's parameters theta at an optimizer step, the behaviour policies
mu_v of the batch's versions v (shares w_v) and binary rewards r(x, a) = 1[a = label(x)], the expected raw
surrogate gradient over the whole training split C and over every action is

    g(theta) = sum_v w_v (1 / |C|) sum_{x in C} sum_a mu_v(a | x) grad l(theta; x, a, E[A | a, x, v]),

exact because each supported surrogate's per-sample loss l is positively homogeneous in the advantage A (PPO's
clip and dual clip, truncated / plain IS, PG: linear in A for a fixed sign) and, with binary rewards, A's sign
is fixed by r(x, a). For GRPO's group z-score in a group of G samples of one context with success probability
p = mu_v(label | x), the other G - 1 rewards hold J ~ Binomial(G - 1, p) successes and

    E[A | r] = sum_j P(J = j) (r - k / G) / (sqrt(k / G (1 - k / G)) + eps),  k = j + r   (`advantage_means`).

Estimands, per run and optimizer step k (`Probe`):

* ``cos_consecutive_exact``: cos(g(theta_k), g(theta_{k-1})), the two exact gradients of consecutive optimizer
  steps (r = infinity); NaN for a run's first measured step or where either gradient is zero;
* ``norm_exact``, ``norm_minibatch``: |g(theta_k)| and the norm of the learner's own raw minibatch gradient g_k;
  over a window, r = mean |g|^2 / (mean |g_k|^2 - mean |g|^2) is the minibatch's signal-to-noise ratio
  m / B_noise (E |g_k|^2 = |g|^2 (1 + 1 / r)) (`noise_ratio`);
* ``cos_minibatch_prev``: the learner's own consecutive minibatch cosine (its ``grad_cos_prev``), beside the
  prediction cos_consecutive_exact x r / (1 + r).

The probe only reads: it hooks `testbed.runner.Runner`'s ``on_version`` / ``on_batch`` and each optimizer's step
pre-hook, and computes with `torch.autograd.grad` (no ``.grad`` written, no random draw), so the runs it watches
train bit for bit as without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from testbed.stabilizers import PolicyTerms

# surrogates whose per-sample loss is positively homogeneous in the advantage (so the expectation over the
# advantage's distribution is the loss at its mean), and advantages with a closed-form conditional mean
SURROGATES = ("pg", "is", "tis", "ppo", "decoupled_ppo")
ADVANTAGES = ("group", "auto", "dr_grpo", "raw")


def advantage_means(name: str, p: Tensor, group_size: int, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """(E[A | r = 1], E[A | r = 0]) per context for binary rewards with success probability ``p`` (any shape) under
    the advantage ``name``: ``group`` (and ``auto`` with groups): GRPO's (r - mean_g) / (std_g + eps) with the
    population std; ``dr_grpo``: r - mean_g; ``raw``: r. The other G - 1 rewards of the group are independent
    Bernoulli(p) (one behaviour version per group)."""
    if name not in ADVANTAGES or (name in ("group", "auto", "dr_grpo") and group_size < 2):
        raise ValueError(f"exact advantage means need one of {', '.join(ADVANTAGES)} (groups of >= 2 for the "
                         f"group ones), got {name!r} with group size {group_size}")
    p = p.double()
    if name == "raw":
        return torch.ones_like(p), torch.zeros_like(p)
    g = group_size
    j = torch.arange(g, dtype=torch.float64)  # successes among the other G - 1
    logc = torch.lgamma(torch.tensor(float(g))) - torch.lgamma(j + 1) - torch.lgamma(g - j)
    q = p.clamp(0.0, 1.0).unsqueeze(-1)
    pmf = torch.exp(logc + torch.xlogy(j, q) + torch.xlogy(g - 1 - j, 1 - q))
    out = []
    for r in (1.0, 0.0):
        mean = (j + r) / g
        a = r - mean
        if name != "dr_grpo":
            a = a / (torch.sqrt(mean * (1 - mean)) + eps)
        out.append((pmf * a).sum(-1))
    return out[0], out[1]


def expected_loss(recipe: Any, logp: Tensor, behaviour: Sequence[tuple[float, Tensor]], labels: Tensor,
                  group_size: int, proximal: Tensor | None = None, agg: str = "token-mean") -> Tensor:
    """One run's exact expected surrogate loss over contexts C and every action, whose gradient is g(theta).

    ``logp`` [N, A]: log pi_theta(a | x) on C (with its graph); ``behaviour``: (share w_v, log mu_v [N, A]) per
    behaviour version of the batch; ``labels`` [N]; ``proximal`` [N, A]: log pi_prox (decoupled PPO's policy at the
    start of the batch) or None. Each (x, a) pair is one sample whose advantage is A x mu_v(a | x) x E[A | a, x]
    (the loss is positively homogeneous in A), so the recipe's own surrogate, token-mean over the N x A pairs,
    gives sum_a mu_v(a | x) l(x, a, E[A]) averaged over x."""
    sname, aname = recipe.surrogate.name, recipe.advantage.name
    if sname not in SURROGATES:
        raise ValueError(f"the exact expected gradient needs a surrogate linear in the advantage per sign "
                         f"({', '.join(SURROGATES)}), got {sname!r}")
    n, n_act = logp.shape
    onehot = torch.nn.functional.one_hot(labels, n_act).to(torch.bool)
    flat = (n * n_act, 1)
    total = logp.new_zeros(())
    for share, logmu in behaviour:
        mu = logmu.exp()
        a1, a0 = advantage_means(aname, mu.gather(1, labels[:, None]).squeeze(1), group_size,
                                 float(getattr(recipe.advantage, "eps", 1e-6)))
        adv = torch.where(onehot, a1[:, None], a0[:, None]).to(logp.dtype) * mu * n_act
        terms = PolicyTerms(logp.reshape(flat), logmu.reshape(flat), adv.reshape(flat).detach(),
                            torch.ones(flat, dtype=torch.bool),
                            proximal_logp=None if proximal is None else proximal.reshape(flat),
                            rewards=onehot.reshape(-1).to(logp.dtype))
        total = total + share * recipe.loss(terms, agg).loss
    return total


def noise_ratio(norm_exact: Any, norm_minibatch: Any) -> float:
    """r = m / B_noise from paired norms of exact and minibatch gradients over a window:
    mean |g|^2 / (mean |g_k|^2 - mean |g|^2) (E |g_k|^2 = |g|^2 (1 + 1 / r)); NaN when undefined (no pair, or
    the minibatch is no noisier than the exact gradient)."""
    e, m = np.asarray(norm_exact, dtype=float), np.asarray(norm_minibatch, dtype=float)
    ok = np.isfinite(e) & np.isfinite(m)
    if not ok.any():
        return float("nan")
    s, t = float(np.mean(e[ok] ** 2)), float(np.mean(m[ok] ** 2))
    return s / (t - s) if t > s else float("nan")


def _cos(a: Tensor, b: Tensor | None) -> float:
    if b is None:
        return float("nan")
    na, nb = float(torch.linalg.vector_norm(a)), float(torch.linalg.vector_norm(b))
    return float((a * b).sum()) / (na * nb) if na > 0 and nb > 0 else float("nan")


class Probe:
    """Records the exact expected gradient of every run of ``runner`` at each optimizer step of the batches
    ``t < until`` (rows in `rows`, one list per run; see the module docstring for the columns). Attach before
    ``runner.run()``. MNIST-like single-step tasks with binary rewards and no frictions only."""

    def __init__(self, runner: Any, until: int, keep_versions: int = 64) -> None:
        task = runner.task
        if getattr(task, "horizon", None) != 1 or not hasattr(task, "labels") or not hasattr(task, "n_train"):
            raise ValueError("the exact-gradient probe needs a single-step labelled task (mnist)")
        for run in runner.runs:
            cfg = run.cfg
            if cfg.frictions not in ("none", "", None) or cfg.task_args:
                raise ValueError(f"the exact-gradient probe needs runs without frictions or task arguments, got "
                                 f"{cfg.frictions!r}, {cfg.task_args!r}")
            expected_loss_check(run.recipe, cfg.group_size)
        self.runner, self.until, self.keep = runner, int(until), int(keep_versions)
        self.contexts = torch.arange(task.n_train)
        self.labels = task.labels[self.contexts].long()
        self.logmu: list[dict[int, Tensor]] = [{} for _ in runner.runs]
        self.shares: list[list[tuple[int, float]]] = [[] for _ in runner.runs]
        self.batch_t = [-1 for _ in runner.runs]
        self.k = [0 for _ in runner.runs]
        self.prev: list[Tensor | None] = [None for _ in runner.runs]
        self.prev_mb: list[Tensor | None] = [None for _ in runner.runs]
        self.rows: list[list[dict[str, Any]]] = [[] for _ in runner.runs]
        self._version_done = -1
        runner.on_version, runner.on_batch = self._on_version, self._on_batch
        for opt in runner.optimizers.values():
            opt.register_step_pre_hook(self._on_step)

    def _logits(self) -> Tensor:
        s = len(self.runner.active)
        return self.runner.policy(self.runner.task.pixels(self.contexts.expand(s, -1)))  # [S, N, A]

    def _on_version(self, run: int, version: int, params: Any) -> None:
        if version >= self.until + 1 or version == self._version_done:
            return
        self._version_done = version
        with torch.no_grad():
            logmu = torch.log_softmax(self._logits(), -1)
        for pos, r in enumerate(self.runner.active):
            self.logmu[r][version] = logmu[pos]
            for v in [v for v in self.logmu[r] if v < version - self.keep]:
                del self.logmu[r][v]

    def _on_batch(self, run: int, t: int, batch: dict[str, Tensor]) -> None:
        self.batch_t[run] = t
        v, c = torch.unique(batch["versions"].reshape(-1), return_counts=True)
        self.shares[run] = [(int(a), float(b) / float(c.sum())) for a, b in zip(v, c, strict=True)]

    def _on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        runner = self.runner
        mine = [(pos, r) for pos, r in enumerate(runner.active)
                if any(g is runner.runs[r].group for g in optimizer.param_groups) and self.batch_t[r] < self.until]
        if not mine:
            return
        params = list(runner.policy.parameters())
        n_steps = runner.cfg0.epochs * runner.cfg0.minibatches
        with torch.enable_grad():
            logp = torch.log_softmax(self._logits(), -1)
            total = logp.new_zeros(())
            for pos, r in mine:
                run, t = runner.runs[r], self.batch_t[r]
                missing = [v for v, _ in self.shares[r] if v not in self.logmu[r]]
                if missing:
                    raise ValueError(f"behaviour versions {missing} are older than the probe keeps ({self.keep})")
                behaviour = [(w, self.logmu[r][v]) for v, w in self.shares[r]]
                prox = None
                if run.cfg.proximal == "current":
                    prox = self.logmu[r][t] if n_steps > 1 else logp[pos].detach()
                total = total + expected_loss(run.recipe, logp[pos], behaviour, self.labels, run.cfg.group_size,
                                              prox, run.cfg.agg)
            grads = torch.autograd.grad(total, params, allow_unused=True)
        s = logp.shape[0]
        flat = torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(s, -1)
                          for g, p in zip(grads, params, strict=True)], 1).detach()
        for pos, r in mine:
            run, g = runner.runs[r], flat[pos]
            mb = run.prev_grad  # the learner's raw gradient of this very step (set before the step)
            self.rows[r].append({
                "step": self.batch_t[r] + 1, "k": self.k[r],
                "cos_consecutive_exact": _cos(g, self.prev[r]),
                "norm_exact": float(torch.linalg.vector_norm(g)),
                "norm_minibatch": float("nan") if mb is None else float(torch.linalg.vector_norm(mb)),
                "cos_minibatch_exact": _cos(mb, g) if mb is not None else float("nan"),
                "cos_minibatch_prev": _cos(mb, self.prev_mb[r]) if mb is not None else float("nan"),
            })
            self.prev[r], self.prev_mb[r] = g, mb
            self.k[r] += 1


def expected_loss_check(recipe: Any, group_size: int) -> None:
    """Refuse (ValueError) a recipe the exact expectation does not cover."""
    if recipe.surrogate.name not in SURROGATES:
        raise ValueError(f"the exact expected gradient needs one of the surrogates {', '.join(SURROGATES)}, got "
                         f"{recipe.surrogate.name!r}")
    advantage_means(recipe.advantage.name, torch.zeros(1), group_size)


def measure(configs: Sequence[Any], until: int) -> list[dict[str, Any]]:
    """Train ``configs`` (one loop: they share the runner's shape fields) through batch ``until`` - 1 with a
    `Probe` attached and stop there; per config, {"probe": the probe's rows, "curve": the runs' logged rows}.
    The training is the configs' own (same run ids, same batches), cut at ``until``."""
    from testbed.runner import Interrupted, Runner

    runner = Runner(list(configs))
    probe = Probe(runner, until)
    done = iter(range(1, until + 1))
    with contextlib.suppress(Interrupted):  # stopped after batch until - 1, as asked
        runner.run(stop=lambda: next(done, until) >= until)
    return [{"probe": probe.rows[i], "curve": [dict(r) for r in run.rows]} for i, run in enumerate(runner.runs)]
