"""Result 11: the stale-baseline drift of REINFORCE on sequences (one version of lag on token reversal).

Result 10 (theory/baseline_drift.py) is the one-step case. For an autoregressive policy over T
positions and M tokens with tabular logits theta[h] per prefix h (pi(.|h) = softmax(theta[h])),
sequences drawn from a stale policy mu and a constant baseline b, the baseline's part of the
REINFORCE ascent, -b sum_t grad log pi(a_t | h_t), has the expectation

    E_mu[-b sum_t grad log pi(a_t|h_t)] = -b sum_h mu(h) sum_a (mu(a|h) - pi(a|h)) grad log pi(a|h)
                                         = b mu(h) (pi(.|h) - mu(.|h))        on theta[h]

(mu(h): the probability that mu's sequences pass through prefix h; grad_theta[h] log pi(a|h) =
e_a - pi(.|h); sum_a pi(a|h) grad log pi(a|h) = 0 is what makes the term vanish on-policy). So:

* the term is zero only where mu = pi; one version of lag leaves it at b mu(h) (pi - mu)(.|h) on every
  prefix mu visits, whatever the rewards: a batch-mean baseline b ~ E_mu[R] > 0 (partial credit) makes it
  an ascent direction of its own;
* it points the way the policy last moved: with theta = theta_mu + delta, <pi(.|h) - mu(.|h), delta[h]>
  >= 0 on every prefix, because softmax is the gradient of the convex log-sum-exp and gradients of a convex
  function are monotone. The cosine between the drift and the last change of the logits is never negative,
  so the drift feeds the next change in the same direction (positive feedback toward a deterministic policy);
* token-level importance weights w_t = pi(a_t|h_t) / mu(a_t|h_t) remove it exactly, whatever b and
  whatever the prefix distribution: E_mu[w_t b grad log pi(a_t|h_t) | h_t] = b sum_a pi(a|h) grad log pi(a|h)
  = 0. A baseline whose *value* is re-weighted (b' = sum w R / sum w) keeps the term, only rescaled;
* the reward's own term is stale in the same way: a constant reward c contributes c mu(h) (mu(.|h) - pi(.|h)),
  the opposite push, so with b near the mean reward the two cancel in their constant part and the net off-policy
  error is that of the advantage-weighted term (results/findings/token_lag.md measures both parts in training).

Every measured value goes through the real components (``raw+pg``, ``raw+is``) via
theory/estimators.py (`per_sample_ascent`); the advantage is the constant -b, so what is checked is the
baseline's part of the update alone. T = 1 is result 10's `drift`.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import softmax

from .baseline_drift import drift
from .checks import Check, cosine, f32_tol, mean_se, z_quantile
from .estimators import per_sample_ascent

SRC = "ours (token-reversal lag-1 measurement); results/findings/token_lag.md"


def prefix_table(horizon: int, n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """All sequences [M^T, T] and, for each sequence and position, the index of its prefix [M^T, T] in the
    order of all prefixes of length 0..T-1 (shortest first, each length in lexicographic order)."""
    seqs = np.array(list(itertools.product(range(n_tokens), repeat=horizon)), dtype=np.int64).reshape(-1, horizon)
    offsets = np.cumsum([0] + [n_tokens**k for k in range(horizon)])  # first index of each prefix length
    pid = np.zeros_like(seqs)
    for t in range(horizon):
        code = np.zeros(len(seqs), dtype=np.int64)
        for k in range(t):
            code = code * n_tokens + seqs[:, k]
        pid[:, t] = offsets[t] + code
    return seqs, pid


def n_prefixes(horizon: int, n_tokens: int) -> int:
    return sum(n_tokens**k for k in range(horizon))


def sequence_probs(cond: np.ndarray, seqs: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """Probability of every sequence [M^T] under the conditionals ``cond`` [P, M]."""
    return np.prod(cond[pid, seqs], axis=1)


def prefix_reach(cond: np.ndarray, seqs: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """mu(h): the probability that a sequence drawn from ``cond`` passes through each prefix [P]."""
    reach = np.zeros(cond.shape[0])
    p = sequence_probs(cond, seqs, pid)
    for t in range(seqs.shape[1]):
        np.add.at(reach, pid[:, t], p)
    return reach


def sequence_drift(pi: np.ndarray, mu: np.ndarray, b: float, seqs: np.ndarray, pid: np.ndarray) -> np.ndarray:
    """b mu(h) (pi(.|h) - mu(.|h)) [P, M]: the expected baseline part of stale REINFORCE (module docstring),
    result 10's `drift` on every prefix, weighted by how often mu visits it."""
    return prefix_reach(mu, seqs, pid)[:, None] * drift(pi, mu, b)


def _per_sequence_ascent(spec: str, theta: np.ndarray, mu: np.ndarray, seqs: np.ndarray, pid: np.ndarray,
                         advantages: np.ndarray) -> np.ndarray:
    """Each sequence's own ascent on the prefix table [N, P, M] through the real surrogate (behaviour mu)."""
    logits = theta[pid]  # [N, T, M]: each sample's copy of the rows it visits
    blogp = np.log(mu[pid, seqs])
    g = per_sample_ascent(spec, logits, seqs, advantages, blogp)  # [N, T, M]
    out = np.zeros((len(seqs), *theta.shape))
    for t in range(seqs.shape[1]):
        out[np.arange(len(seqs)), pid[:, t]] += g[:, t]
    return out


def expected_ascent(spec: str, theta: np.ndarray, mu: np.ndarray, b: float, seqs: np.ndarray,
                    pid: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact E_mu of the real surrogate's ascent with advantage -b for every sequence (enumeration over the
    M^T sequences), [P, M], and the float32 rounding bound of the result."""
    terms = _per_sequence_ascent(spec, theta, mu, seqs, pid, np.full(len(seqs), -b))
    p = sequence_probs(mu, seqs, pid)[:, None, None]
    return (p * terms).sum(0), f32_tol(float((p * np.abs(terms)).sum(0).max()), len(seqs))


def instance(seed: int, horizon: int = 3, n_tokens: int = 2, spread: float = 1.0) -> dict[str, np.ndarray]:
    """Tabular logits theta [P, M], the stale theta_mu = theta - delta (delta: the last change, random of size
    ``spread``), and their conditionals pi, mu."""
    rng = np.random.default_rng(seed)
    p = n_prefixes(horizon, n_tokens)
    theta = rng.normal(size=(p, n_tokens))
    delta = spread * rng.normal(size=(p, n_tokens))
    return {"theta": theta, "delta": delta, "pi": softmax(theta, axis=1), "mu": softmax(theta - delta, axis=1)}


def check_sequence_drift(seed: int = 0, n_cases: int = 4, baselines: tuple[float, ...] = (0.3, 1.0),
                         n_mc: int = 4000, n_cos: int = 200) -> list[Check]:
    """Item 11: the closed form by enumeration through the real pg, a Monte Carlo batch, exact removal by
    token-level IS, the one-step reduction, and the sign of the drift along the last change."""
    rows: list[Check] = []
    seqs, pid = prefix_table(3, 2)
    worst = {"pg": (0.0, np.inf), "is": (0.0, np.inf)}
    for i in range(n_cases):
        case = instance(seed + i)
        for b in baselines:
            closed = sequence_drift(case["pi"], case["mu"], b, seqs, pid)
            for spec, want in (("raw+pg", closed), ("raw+is", np.zeros_like(closed))):
                got, tol = expected_ascent(spec, case["theta"], case["mu"], b, seqs, pid)
                err = float(np.max(np.abs(got - want)))
                key = spec.split("+")[1]
                if err - tol > worst[key][0] - worst[key][1]:
                    worst[key] = (err, tol)
    rows.append(Check(11, "stale pg, T=3 M=2: max|E_mu[-b sum_t grad log pi] - b mu(h) (pi - mu)| (enumeration)", 0.0,
                      worst["pg"][0], worst["pg"][1], "abs", SRC, f"{n_cases} cases x b in {list(baselines)}"))
    rows.append(Check(11, "token-level IS, T=3 M=2: max|E_mu[-b sum_t w_t grad log pi]| (enumeration)", 0.0,
                      worst["is"][0], worst["is"][1], "abs", SRC, "the baseline's drift is removed for every b"))
    rows.append(_monte_carlo(seed, n_mc, seqs, pid))
    one = instance(seed, horizon=1, n_tokens=5)
    s1, p1 = prefix_table(1, 5)
    err = float(np.max(np.abs(sequence_drift(one["pi"], one["mu"], 0.7, s1, p1)[0] - drift(one["pi"][0], one["mu"][0], 0.7))))
    rows.append(Check(11, "T=1: sequence drift = result 10's bandit drift b (pi - mu)", 0.0, err, 0.0, "abs", SRC))
    lowest = min(cosine(sequence_drift(c["pi"], c["mu"], 1.0, seqs, pid).ravel(), c["delta"].ravel())
                 for c in (instance(seed + 1000 + j, spread=float(s)) for j, s in
                           enumerate(np.geomspace(0.01, 3.0, n_cos))))
    rows.append(Check(11, f"cos(drift, last change of the logits) over {n_cos} random instances: min", 0.0, lowest, 0.0,
                      "lower", SRC, "never negative (softmax is monotone): the drift follows the last update"))
    return rows


def _monte_carlo(seed: int, n: int, seqs: np.ndarray, pid: np.ndarray, b: float = 0.5) -> Check:
    """n sequences drawn from mu through the real pg: max |batch mean - closed form| in standard errors."""
    case = instance(seed + 100)
    rng = np.random.default_rng(seed)
    p = sequence_probs(case["mu"], seqs, pid)
    draws = rng.choice(len(seqs), size=n, p=p / p.sum())
    terms = _per_sequence_ascent("raw+pg", case["theta"], case["mu"], seqs[draws], pid[draws], np.full(n, -b))
    mean, se = mean_se(terms.reshape(n, -1))
    closed = sequence_drift(case["pi"], case["mu"], b, seqs, pid).ravel()
    visited = se > 0
    dev = float(np.max(np.abs(mean - closed)[visited] / se[visited]))
    return Check(11, f"stale pg: MC batch (n={n}, b={b}) vs b mu(h) (pi - mu), in SEs", 0.0, dev,
                 z_quantile(int(visited.sum())), "abs", SRC)
