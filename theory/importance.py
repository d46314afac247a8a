"""Importance sampling and baselines: results 8 and 9 of ALGORITHMS.md, "Analytic results to check".

8. **Importance sampling.** For a behaviour policy mu with mu(a) > 0 wherever pi(a) A(a) != 0,
   E_mu[r A grad log pi] = sum_a pi(a) A(a) grad log pi(a) = grad J, r = pi / mu (unbiased; e.g.
   Precup, Sutton & Singh 2000; the `is` surrogate). Truncating the weight at c gives
   E_mu[min(r, c) A grad log pi] = sum_a min(pi(a), c mu(a)) A(a) grad log pi(a), so the bias is
   exactly  -sum_a (pi(a) - c mu(a))_+ A(a) grad log pi(a)  (`truncated_is_bias`; the `tis`
   surrogate, verl's default c = 2, VCPO's sequence-level c = 8, arXiv 2602.17616). The same holds
   at sequence level with r = R_seq and grad log pi(tau) = sum_t grad log pi(a_t | h_t).
   For softmax logits theta, grad_theta log pi(a) = e_a - pi.

9. **OPOB optimality and the ESS identity** (VCPO, arXiv 2602.17616). For the single-sample
   estimator g_b = w (R - b) s, s = grad log pi, w = pi / mu, E_mu[w s] = E_pi[s] = 0, so E[g_b]
   does not depend on b and tr Cov(g_b) = E_mu[w^2 (R - b)^2 |s|^2] - |grad J|^2 is a quadratic in
   b minimised at  b* = E_mu[w^2 |s|^2 R] / E_mu[w^2 |s|^2]  (`opob_population`); its sample
   version is VCPO's OPOB. The normalised ESS rho = (sum w)^2 / (B sum w^2) gives
   1 / rho = mean(w^2) / mean(w)^2 -> E_mu[w^2] / E_mu[w]^2 = E_mu[w^2] = 1 + chi^2(pi || mu),
   chi^2(pi || mu) = sum_a pi(a)^2 / mu(a) - 1 (Kong 1992; Owen, Monte Carlo theory, ch. 9).
   Assumptions: mu(a) > 0 wherever pi(a) > 0; a single decision (or whole sequences) per sample.

Every measured value comes from the real components: `build("is")`, `build("tis(c=...)")`,
`build("opob(std_normalize=false)")` and `effective_sample_size` from testbed.stabilizers.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import minimize_scalar
from scipy.special import log_softmax, softmax

from testbed.stabilizers import build, effective_sample_size

from .checks import Check, brent_tol, f32_tol, mean_se, z_quantile
from .estimators import bandit_term_table, batch_ascent, expected_bandit_ascent, per_sample_ascent

SRC_IS = "Precup et al. 2000; ALGORITHMS.md item 8"
SRC_OPOB = "VCPO arXiv 2602.17616"
SRC_ESS = "Kong 1992; VCPO arXiv 2602.17616"


# ---------------------------------------------------------------------------------------------
# closed forms
# ---------------------------------------------------------------------------------------------
def score_matrix(pi: np.ndarray) -> np.ndarray:
    """Row a = grad_theta log pi(a) = e_a - pi for softmax logits theta, [K, K]."""
    return np.eye(pi.size) - pi[None, :]


def policy_gradient(pi: np.ndarray, adv: np.ndarray) -> np.ndarray:
    """grad J = sum_a pi(a) A(a) (e_a - pi) on the logits (exact, on-policy)."""
    return (pi * adv) @ score_matrix(pi)


def truncated_is_expectation(pi: np.ndarray, mu: np.ndarray, adv: np.ndarray, c: float) -> np.ndarray:
    """E_mu[min(pi/mu, c) A (e_a - pi)] = sum_a min(pi(a), c mu(a)) A(a) (e_a - pi)."""
    return (np.minimum(pi, c * mu) * adv) @ score_matrix(pi)


def truncated_is_bias(pi: np.ndarray, mu: np.ndarray, adv: np.ndarray, c: float) -> np.ndarray:
    """Exact bias of truncated IS: -sum_a (pi(a) - c mu(a))_+ A(a) (e_a - pi)."""
    return -(np.maximum(pi - c * mu, 0.0) * adv) @ score_matrix(pi)


def chi2_divergence(pi: np.ndarray, mu: np.ndarray) -> float:
    """chi^2(pi || mu) = sum_a pi(a)^2 / mu(a) - 1."""
    return float(np.sum(pi * pi / mu) - 1.0)


def opob_population(pi: np.ndarray, mu: np.ndarray, rewards: np.ndarray) -> float:
    """b* = E_mu[w^2 |s|^2 R] / E_mu[w^2 |s|^2], w = pi/mu, |s|^2 = |e_a - pi|^2."""
    w = pi / mu
    s2 = np.sum(score_matrix(pi) ** 2, axis=1)
    u = mu * w * w * s2
    return float(np.sum(u * rewards) / np.sum(u))


# ---------------------------------------------------------------------------------------------
# the bandit used by the checks
# ---------------------------------------------------------------------------------------------
def random_bandit(seed: int, k: int = 6, spread: float = 1.0) -> dict[str, np.ndarray]:
    """Learner logits, behaviour logits (learner + N(0, spread^2) noise), rewards in [0, 1]."""
    rng = np.random.default_rng(seed)
    theta = rng.normal(size=k)
    theta_mu = theta + spread * rng.normal(size=k)
    rewards = rng.uniform(size=k)
    return {"theta": theta, "pi": softmax(theta, axis=-1), "mu": softmax(theta_mu, axis=-1), "rewards": rewards}


def expected_surrogate_gradient(spec: str, pi: np.ndarray, mu: np.ndarray, adv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact E_mu of the real surrogate's ascent on the logits (enumeration), and its |.|-sum."""
    theta = np.log(pi)[None, :]
    mean, abs_sum = expected_bandit_ascent(spec, theta, mu[None, :], adv[None, :], np.log(mu)[None, :])
    return mean[0], abs_sum[0]


def _mc_deviation(spec: str, b: dict[str, np.ndarray], adv: np.ndarray, target: np.ndarray, n: int, rng) -> tuple[float, float]:
    """(max_a |g_hat_a - target_a| / se_a, z) for one batch of n draws from mu through the real surrogate.

    se_a from the per-sample terms of the same draws (the real surrogate on each action alone).
    """
    k = b["pi"].size
    actions = rng.choice(k, size=n, p=b["mu"])
    log_mu = np.log(b["mu"])
    g_hat = batch_ascent(spec, np.log(b["pi"])[None, :], actions[:, None], adv[actions], log_mu[actions][:, None])[0]
    table = bandit_term_table(spec, np.log(b["pi"])[None], adv[None], log_mu[None])[0]  # [K, K]: action a alone
    _, se = mean_se(table[actions])
    keep = se > 0
    return float(np.max(np.abs(g_hat - target)[keep] / se[keep])), z_quantile(int(keep.sum()))


def check_importance_sampling(seed: int = 0, k: int = 6, n_mc: int = 20000, cs: tuple[float, ...] = (1.0, 2.0)) -> list[Check]:
    """Item 8: exact IS is unbiased and truncated IS's bias is the closed form (enumeration, MC).

    Enumeration rows: max_a |E_real - closed form| <= float32 rounding bound (predicted 0).
    Monte Carlo rows: max_a |batch gradient - exact| in standard errors <= z (Bonferroni over K).
    A sequence-level case (T = 2 positions, 3 actions each, 9 sequences) checks level=sequence.
    """
    rng = np.random.default_rng(seed)
    b = random_bandit(seed, k)
    pi, mu = b["pi"], b["mu"]
    adv = b["rewards"] - 0.5
    grad_j = policy_gradient(pi, adv)
    rows: list[Check] = []
    e_is, abs_is = expected_surrogate_gradient("is", pi, mu, adv)
    rows.append(
        Check(8, "exact IS: max|E_mu[is grad] - grad J| (enumeration)", 0.0, float(np.max(np.abs(e_is - grad_j))), f32_tol(abs_is.max(), k), "abs", SRC_IS, f"|grad J| = {np.linalg.norm(grad_j):.4g}")
    )
    dev, z = _mc_deviation("is", b, adv, grad_j, n_mc, rng)
    rows.append(Check(8, f"exact IS: MC batch (n={n_mc}) vs grad J, in SEs", 0.0, dev, z, "abs", SRC_IS))
    for c in cs:
        spec = f"tis(c={c})"
        bias = truncated_is_bias(pi, mu, adv, c)
        e_tis, abs_tis = expected_surrogate_gradient(spec, pi, mu, adv)
        rows.append(
            Check(
                8,
                f"TIS c={c:g}: max|E_mu[tis grad] - grad J - bias| (enumeration)",
                0.0,
                float(np.max(np.abs(e_tis - grad_j - bias))),
                f32_tol(abs_tis.max() + abs_is.max(), k),
                "abs",
                SRC_IS,
                f"|bias| = {np.linalg.norm(bias):.4g}, clipped actions: {int(np.sum(pi > c * mu))}",
            )
        )
        dev, z = _mc_deviation(spec, b, adv, grad_j + bias, n_mc, rng)
        rows.append(Check(8, f"TIS c={c:g}: MC batch (n={n_mc}) vs grad J + bias, in SEs", 0.0, dev, z, "abs", SRC_IS))
    rows += _sequence_level_rows(seed)
    return rows


def _sequence_level_rows(seed: int, t_len: int = 2, k: int = 3, c: float = 1.5) -> list[Check]:
    """Sequence-level IS / TIS by enumeration over all K^T sequences (independent positions)."""
    rng = np.random.default_rng(seed + 1)
    theta = rng.normal(size=(t_len, k))
    theta_mu = theta + rng.normal(size=(t_len, k))
    lp, lmu = log_softmax(theta, axis=-1), log_softmax(theta_mu, axis=-1)
    seqs = np.array(np.meshgrid(*[np.arange(k)] * t_len, indexing="ij")).reshape(t_len, -1).T  # [K^T, T]
    pos = np.arange(t_len)
    seq_lp = lp[pos, seqs].sum(axis=1)
    seq_lmu = lmu[pos, seqs].sum(axis=1)
    p_seq, mu_seq = np.exp(seq_lp), np.exp(seq_lmu)
    rewards = rng.uniform(size=len(seqs)) - 0.5
    # closed form: grad log pi(tau) on theta [T, K] = sum_t (e_{a_t} - pi_t) placed at row t
    pi_t = softmax(theta, axis=-1)
    scores = np.zeros((len(seqs), t_len, k))
    scores[:, pos, :] = -pi_t[None]
    scores[np.arange(len(seqs))[:, None], pos[None, :], seqs] += 1.0
    grad_j = np.einsum("m,mtk->tk", p_seq * rewards, scores)
    bias = -np.einsum("m,mtk->tk", np.maximum(p_seq - c * mu_seq, 0.0) * rewards, scores)
    rows = []
    for spec, target, name in (("is(level=sequence)", grad_j, "exact"), (f"tis(c={c}, level=sequence)", grad_j + bias, f"TIS c={c:g}")):
        per = per_sample_ascent(spec, np.repeat(theta[None], len(seqs), axis=0), seqs, rewards, lmu[pos, seqs])
        expect = np.einsum("m,mtk->tk", mu_seq, per)
        abs_sum = np.einsum("m,mtk->tk", mu_seq, np.abs(per)).max()
        rows.append(
            Check(8, f"sequence level (T={t_len}, K={k}) {name}: max|E_mu - prediction|", 0.0, float(np.max(np.abs(expect - target))), f32_tol(abs_sum, len(seqs)), "abs", SRC_IS)
        )
    return rows


# ---------------------------------------------------------------------------------------------
# 9. OPOB and ESS
# ---------------------------------------------------------------------------------------------
def baseline_variance(pi: np.ndarray, mu: np.ndarray, rewards: np.ndarray, b: float, spec: str = "is") -> float:
    """tr Cov of the real IS surrogate's single-sample gradient with advantage R - b, by enumeration."""
    table = bandit_term_table(spec, np.log(pi)[None], (rewards - b)[None], np.log(mu)[None])[0]
    mean = mu @ table
    return float(mu @ np.sum(table**2, axis=1) - mean @ mean)


def check_opob(seed: int = 0, k: int = 6, n_batch: int = 64, n_mc: int = 20000) -> list[Check]:
    """Item 9a: the OPOB baseline minimises the variance among constant baselines.

    Rows: (i) scipy's bounded Brent search on the exact variance (computed through the real `is`
    surrogate) lands on the closed-form b*, within the search's xatol plus the float32 shift of
    the quadratic's minimiser; (ii) the variance at b* is below that of the on-policy mean
    baseline E_pi[R] and the behaviour mean E_mu[R]; (iii) the real `opob(std_normalize=false)`
    advantage on a batch equals the numerical minimiser of the batch's sample variance; (iv) on a
    large batch it estimates the population b* within z delta-method standard errors.
    """
    rng = np.random.default_rng(seed)
    b = random_bandit(seed + 7, k, spread=1.5)
    pi, mu, rewards = b["pi"], b["mu"], b["rewards"]
    b_star = opob_population(pi, mu, rewards)
    xatol = 1e-9
    # b* is a weighted mean of the rewards, so the search interval [min R, max R] holds it
    bounds = (float(rewards.min()), float(rewards.max()))
    res = minimize_scalar(lambda v: baseline_variance(pi, mu, rewards, v), bounds=bounds, method="bounded", options={"xatol": xatol})
    # V(b) = alpha (b - b*)^2 + V(b*) with alpha = E_mu[w^2 |s|^2], evaluated with float32 advantages
    # and weights: |V_computed - V| <= eps (float32 bound on the sum of squares). A point whose computed
    # value is <= the computed V(b*) satisfies alpha (b - b*)^2 <= 2 eps, hence the tolerance.
    v_star = baseline_variance(pi, mu, rewards, b_star)
    alpha = float(np.sum(mu * (pi / mu) ** 2 * np.sum(score_matrix(pi) ** 2, axis=1)))
    grad_j = policy_gradient(pi, rewards)
    eps = f32_tol(v_star + float(grad_j @ grad_j), k)  # the second moment near b*, where the values compared lie
    rows = [
        Check(9, "OPOB b*: closed form vs scipy minimiser of the exact variance", b_star, float(res.x), brent_tol(b_star, xatol) + math.sqrt(2 * eps / alpha), "abs", SRC_OPOB)
    ]
    for name, other in (("E_pi[R]", float(pi @ rewards)), ("E_mu[R]", float(mu @ rewards))):
        v_other = baseline_variance(pi, mu, rewards, other)
        rows.append(
            Check(9, f"variance at b* <= variance at {name} (b={other:.4f})", v_other, v_star, 2 * eps, "upper", SRC_OPOB, f"ratio {v_star / v_other:.4f}")
        )
    # sample version through the real advantage component
    opob = build("opob(std_normalize=false)")
    s2_table = np.sum(score_matrix(pi) ** 2, axis=1)

    def real_opob(actions: np.ndarray) -> float:
        """The baseline b = R_i - A_i of the real `opob` advantage on these draws."""
        adv = opob.advantages(
            torch.tensor(rewards[actions]),
            logp=torch.tensor(np.log(pi)[actions])[:, None],
            behavior_logp=torch.tensor(np.log(mu)[actions])[:, None],
            score_sq_norms=torch.tensor(s2_table[actions]),
        ).numpy()
        return float(np.mean(rewards[actions] - adv))

    actions = rng.choice(k, size=n_batch, p=mu)
    r = rewards[actions]
    b_real = real_opob(actions)
    w2s2 = (pi / mu)[actions] ** 2 * s2_table[actions]
    sample = minimize_scalar(lambda v: float(np.sum(w2s2 * (r - v) ** 2)), bounds=(float(r.min()), float(r.max())), method="bounded", options={"xatol": xatol})
    rows.append(
        Check(9, f"real opob on a batch of {n_batch} = sample-variance minimiser", float(sample.x), b_real, brent_tol(b_real, xatol, float(np.sum(w2s2 * (r - b_real) ** 2)), 2 * float(np.sum(w2s2))) + f32_tol(np.abs(r).max(), n_batch), "abs", SRC_OPOB)
    )
    actions = rng.choice(k, size=n_mc, p=mu)
    r = rewards[actions]
    b_hat = real_opob(actions)
    u = (pi / mu)[actions] ** 2 * s2_table[actions]
    se = math.sqrt(np.mean(u * u * (r - b_hat) ** 2) / n_mc) / np.mean(u)  # delta method for a ratio
    rows.append(Check(9, f"real opob on n={n_mc} draws vs population b*", b_star, b_hat, z_quantile(1) * se + f32_tol(1.0, n_mc), "abs", SRC_OPOB))
    return rows


def check_ess(seed: int = 0, k: int = 6, n_mc: int = 50000, spreads: tuple[float, ...] = (0.5, 1.0)) -> list[Check]:
    """Item 9b: B / ESS (= 1 / rho of the real `effective_sample_size`) estimates 1 + chi^2(pi || mu).

    Tolerance: z delta-method standard errors of mean(w^2) / mean(w)^2, from the sample.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for spread in spreads:
        b = random_bandit(seed + 11, k, spread)
        pi, mu = b["pi"], b["mu"]
        actions = rng.choice(k, size=n_mc, p=mu)
        lw = np.log(pi[actions]) - np.log(mu[actions])
        rho = float(effective_sample_size(torch.tensor(lw)))
        w = np.exp(lw)
        m1, m2 = w.mean(), (w * w).mean()
        grad = np.array([-2 * m2 / m1**3, 1 / m1**2])
        cov = np.cov(np.stack([w, w * w]))
        se = math.sqrt(grad @ cov @ grad / n_mc)
        rows.append(Check(9, f"B/ESS vs 1 + chi^2(pi||mu) (spread {spread:g}, n={n_mc})", 1.0 + chi2_divergence(pi, mu), 1.0 / rho, z_quantile(1) * se, "abs", SRC_ESS))
    return rows
