"""Result 10: REINFORCE with a baseline under a stale sampler drifts along what the policy changed.

For softmax logits theta (pi = softmax(theta)), rewards r(a), a constant baseline b and actions drawn
from a *stale* policy mu, the expected ascent direction of REINFORCE, (r(a) - b) grad log pi(a) with
grad_theta log pi(a) = e_a - pi, is

    g(pi, mu, r, b) = E_mu[(r(a) - b)(e_a - pi)] = mu * r - (mu . r) pi  +  b (pi - mu)
                      `------- signal -------'   `-- drift --'

(using sum_a mu(a) = 1). On-policy (mu = pi) the drift vanishes whatever b is: a baseline only changes
the variance. Off-policy it does not: the drift b (pi - mu) points along whatever the policy changed
since mu sampled, a direction that persists from step to step (GAC's "stale-aligned" signature) and
feeds itself. Two consequences, checked here:

* **No baseline, one-hot reward** (MNIST as a bandit: one rewarded label per context, r = e_{a*}):
  g = mu(a*) (e_{a*} - pi) = (mu(a*) / pi(a*)) g_on, a positive multiple of the on-policy gradient
  g_on = pi(a*) (e_{a*} - pi): staleness rescales the expected update but cannot turn it (cosine
  exactly 1). With a baseline it turns: the cosine drops below 1 by the drift.
* **Importance weights remove the drift**: E_mu[(pi/mu)(r - b)(e_a - pi)] = E_pi[(r - b)(e_a - pi)]
  = pi * r - (pi . r) pi, independent of b. Truncating the weight at c leaves the drift
  b sum_a (pi(a) - c mu(a))_+ (e_a - pi) (`truncated_drift`; zero when c >= max pi / mu).

This mechanism was found by measurement in the testbed (stale REINFORCE collapses on MNIST only with
a baseline; without one, or with IS, it does not) and is not stated in the stabilizer papers; it is
ours. Every measured value comes from the real components (`build("raw+pg")`, `build("raw+is")`,
`build("raw+tis(c=...)")`) through theory/estimators.py: the advantages r - b are given to them
directly (the ``raw`` advantage passes rewards through), so b is an exact constant.
"""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from .checks import Check, cosine, f32_tol, mean_se, z_quantile
from .estimators import bandit_term_table, batch_ascent, expected_bandit_ascent
from .importance import score_matrix

SRC = "ours (testbed measurement); ALGORITHMS.md 'Staleness in the learner'"


def signal(pi: np.ndarray, mu: np.ndarray, rewards: np.ndarray) -> np.ndarray:
    """mu * r - (mu . r) pi: the expected stale REINFORCE ascent without a baseline."""
    return mu * rewards - float(mu @ rewards) * pi


def drift(pi: np.ndarray, mu: np.ndarray, b: float) -> np.ndarray:
    """b (pi - mu): what a constant baseline adds to the expected stale REINFORCE ascent."""
    return b * (pi - mu)


def stale_reinforce(pi: np.ndarray, mu: np.ndarray, rewards: np.ndarray, b: float) -> np.ndarray:
    """E_mu[(r(a) - b)(e_a - pi)] = signal + drift (module docstring)."""
    return signal(pi, mu, rewards) + drift(pi, mu, b)


def truncated_drift(pi: np.ndarray, mu: np.ndarray, b: float, c: float) -> np.ndarray:
    """The drift truncated IS leaves: b sum_a (pi(a) - c mu(a))_+ (e_a - pi)."""
    return b * np.maximum(pi - c * mu, 0.0) @ score_matrix(pi)


def instance(seed: int, k: int = 8, spread: float = 1.5, one_hot: bool = False) -> dict[str, np.ndarray]:
    """A learner pi, a stale sampler mu (the learner's logits before a random change of size ``spread``) and
    rewards (uniform in [0, 1], or one-hot on a random action)."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=k)
    theta_mu = theta - spread * rng.normal(size=k)
    rewards = np.zeros(k) if one_hot else rng.uniform(size=k)
    if one_hot:
        rewards[rng.integers(k)] = 1.0
    return {"theta": theta, "pi": softmax(theta), "mu": softmax(theta_mu), "rewards": rewards}


def _expected(spec: str, case: dict[str, np.ndarray], adv: np.ndarray) -> tuple[np.ndarray, float]:
    """Exact E_mu of the real surrogate's ascent on the logits (enumeration), and the rounding bound."""
    mean, abs_sum = expected_bandit_ascent(spec, case["theta"][None], case["mu"][None], adv[None],
                                           np.log(case["mu"])[None])
    return mean[0], f32_tol(float(abs_sum.max()), case["pi"].size)


def check_baseline_drift(seed: int = 0, n_cases: int = 4, baselines: tuple[float, ...] = (0.0, 0.5, 1.0),
                         n_mc: int = 20000, c: float = 2.0) -> list[Check]:
    """Item 10: the closed form (enumeration and Monte Carlo through the real pg), the drift identity, the
    one-hot immunity without a baseline, and the removal by importance weights (exact and truncated)."""
    rows: list[Check] = []
    worst = {"closed": 0.0, "closed_tol": np.inf, "drift": 0.0, "drift_tol": np.inf, "is": 0.0, "is_tol": np.inf,
             "tis": 0.0, "tis_tol": np.inf}
    for i in range(n_cases):
        case = instance(seed + i)
        pi, mu, r = case["pi"], case["mu"], case["rewards"]
        g0, tol0 = _expected("raw+pg", case, r)
        for b in baselines:
            g, tol = _expected("raw+pg", case, r - b)
            err = float(np.max(np.abs(g - stale_reinforce(pi, mu, r, b))))
            if err - tol > worst["closed"] - worst["closed_tol"]:
                worst["closed"], worst["closed_tol"] = err, tol
            err = float(np.max(np.abs((g - g0) - drift(pi, mu, b))))
            if err - (tol + tol0) > worst["drift"] - worst["drift_tol"]:
                worst["drift"], worst["drift_tol"] = err, tol + tol0
            on_policy = (pi * r) @ score_matrix(pi)
            g_is, tol_is = _expected("raw+is", case, r - b)
            err = float(np.max(np.abs(g_is - on_policy)))
            if err - tol_is > worst["is"] - worst["is_tol"]:
                worst["is"], worst["is_tol"] = err, tol_is
            g_tis, tol_tis = _expected(f"raw+tis(c={c})", case, r - b)
            trunc = (np.minimum(pi, c * mu) * r) @ score_matrix(pi) + truncated_drift(pi, mu, b, c)
            err = float(np.max(np.abs(g_tis - trunc)))
            if err - tol_tis > worst["tis"] - worst["tis_tol"]:
                worst["tis"], worst["tis_tol"] = err, tol_tis
    rows.append(Check(10, "stale pg: max|E_mu[pg ascent] - (signal + drift)| (enumeration)", 0.0, worst["closed"],
                      worst["closed_tol"], "abs", SRC, f"{n_cases} cases x b in {list(baselines)}"))
    rows.append(Check(10, "drift identity: max|E[g(b)] - E[g(0)] - b (pi - mu)| (enumeration)", 0.0, worst["drift"],
                      worst["drift_tol"], "abs", SRC))
    rows.append(Check(10, "exact IS: max|E_mu[is ascent with r - b] - on-policy grad| for every b", 0.0, worst["is"],
                      worst["is_tol"], "abs", SRC, "the drift is gone: the result does not depend on b"))
    rows.append(Check(10, f"TIS c={c:g}: max|E_mu[tis] - truncated signal - truncated drift|", 0.0, worst["tis"],
                      worst["tis_tol"], "abs", SRC))
    rows.append(_monte_carlo(seed, n_mc))
    rows += _one_hot_rows(seed, n_cases)
    return rows


def _monte_carlo(seed: int, n: int, b: float = 0.7) -> Check:
    """A batch of n actions from mu through the real pg: max_a |batch ascent - closed form| in standard errors."""
    case = instance(seed + 100)
    rng = np.random.default_rng(seed)
    pi, mu, r = case["pi"], case["mu"], case["rewards"]
    actions = rng.choice(pi.size, size=n, p=mu)
    adv = r - b
    g_hat = batch_ascent("raw+pg", case["theta"][None], actions[:, None], adv[actions], np.log(mu)[actions][:, None])[0]
    table = bandit_term_table("raw+pg", case["theta"][None], adv[None], np.log(mu)[None])[0]
    _, se = mean_se(table[actions])
    dev = float(np.max(np.abs(g_hat - stale_reinforce(pi, mu, r, b)) / se))
    return Check(10, f"stale pg: MC batch (n={n}, b={b}) vs signal + drift, in SEs", 0.0, dev, z_quantile(pi.size),
                 "abs", SRC, f"|drift| / |signal| = {np.linalg.norm(drift(pi, mu, b)) / np.linalg.norm(signal(pi, mu, r)):.3g}")


def _one_hot_rows(seed: int, n_cases: int) -> list[Check]:
    """One-hot rewards: without a baseline the stale expected gradient is parallel to the on-policy one
    (cosine 1); with the batch-mean baseline's expectation b = mu . r it turns (its closed-form cosine < 1)."""
    lowest, worst_gap, highest = 1.0, 0.0, -1.0
    for i in range(n_cases):
        case = instance(seed + 200 + i, one_hot=True)
        pi, mu, r = case["pi"], case["mu"], case["rewards"]
        on = (pi * r) @ score_matrix(pi)
        g, _ = _expected("raw+pg", case, r)
        lowest = min(lowest, cosine(g, on))
        b = float(mu @ r)
        gb, _ = _expected("raw+pg", case, r - b)
        predicted = cosine(stale_reinforce(pi, mu, r, b), on)
        worst_gap = max(worst_gap, abs(cosine(gb, on) - predicted))
        highest = max(highest, predicted)
    return [
        Check(10, "one-hot, no baseline: min cos(E_mu[pg], on-policy grad)", 1.0, lowest, 1e-5, "lower", SRC,
              "parallel: staleness rescales the expected update (by mu(a*)/pi(a*)) but cannot turn it"),
        Check(10, "one-hot, baseline mu.r: max|cos(E_mu[pg], on-policy) - closed form|", 0.0, worst_gap, 1e-5, "abs",
              SRC),
        Check(10, "one-hot, baseline mu.r: max closed-form cos(E_mu[pg], on-policy grad)", 0.99, highest, 0.0, "upper",
              SRC, "below 1 in every case: the baseline's drift turns the stale update"),
    ]
