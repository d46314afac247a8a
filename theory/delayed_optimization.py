"""Delayed (stale-gradient) optimisation: results 1 to 3 of ALGORITHMS.md, "Analytic results to check".

1. **Delayed linear recurrence.** x_{t+1} = x_t - a x_{t-tau} is asymptotically stable iff
   0 < a < a_crit(tau) = 2 sin(pi / (2 (2 tau + 1))). Its characteristic polynomial is
   z^{tau+1} - z^tau + a; at a = a_crit a pair of roots sits on the unit circle at
   z = exp(+-i pi / (2 tau + 1)) (|z - 1| = 2 sin(omega / 2) = a). Classical: Levin & May,
   "A note on difference-delay equations", Theor. Popul. Biol. 9 (1976) 178-187; in the
   stale-gradient setting, e.g. Mitliagkas et al., "Asynchrony begets momentum" (arXiv 1605.09774).
   Assumptions: constant delay tau >= 0, real a > 0.

2. **Lag-1 autocorrelation of applied gradients on a noisy quadratic.** f(x) = lambda x^2 / 2,
   stochastic gradient lambda x + xi (xi iid, mean 0, variance s^2), stale by tau steps:
   x_{t+1} = x_t - eta g_t, g_t = lambda x_{t-tau} + xi_t, a = eta lambda. With y = lambda x the
   system is y_{t+1} = y_t - a y_{t-tau} - a xi_t and g_t = y_{t-tau} + xi_t, so the stationary
   autocorrelation of g depends on (a, tau) only. We compute it exactly from the stationary
   covariance P of the companion state s_t = (y_t, ..., y_{t-tau}), the solution of the discrete
   Lyapunov equation P = A P A^T + s^2 b b^T:
       corr_1 = (c^T A P c + s^2 c^T b) / (c^T P c + s^2),  c = e_{tau+1}, b = -a e_1.
   Closed forms (derived here): tau = 0: corr_1 = -a/2 exactly (near-orthogonal consecutive
   gradients, GAC's "synchronous" signature, arXiv 2603.01501); tau = 1: corr_1 = +a/2 exactly
   (the stationary AR(2) y has lag-1 correlation 1/(1+a), Var y = a(1+a)/((1-a)(2+a)), and
   Var g = 2/((1-a)(2+a)) for s = 1). For tau >= 1, c^T b = 0 and corr_1 is the lag-1
   autocovariance of y over Var y + s^2, positive.
   What we find about "grows with tau and with a / a_crit": corr_1 grows with a / a_crit(tau) at
   fixed tau, and with tau at a fixed step a, but NOT with tau at a fixed ratio a / a_crit: at
   a = a_crit / 2 it is 0.25, 0.224, 0.158, 0.096 for tau = 1, 2, 4, 8 (`check_autocorrelation`
   pins this).

3. **Delayed SGD convergence** (Lian, Huang, Li & Liu, "Asynchronous parallel stochastic gradient
   for nonconvex optimization", NeurIPS 2015, arXiv 1506.08272, Theorem 1 with one sample per
   update, M = 1). Assumptions: f is L-smooth and bounded below by f*; the update is
   x_{k+1} = x_k - gamma (grad f(x_{k - tau_k}) + xi_k) with delays 0 <= tau_k <= tau (iterates
   before x_0 equal x_0); xi_k has mean 0, E||xi_k||^2 <= sigma^2, and is independent of the past
   and of the delays; the step satisfies L gamma + 2 L^2 tau^2 gamma^2 <= 1 (implied by
   gamma <= 1 / (2 L (tau + 1))). Then
       (1/K) sum_{k<K} E||grad f(x_k)||^2 <= 2 (f(x_0) - f*) / (gamma K) + L gamma sigma^2
                                             + 2 L^2 gamma^2 tau sigma^2.
   We re-derived it (descent lemma; <a, b> = (|a|^2 + |b|^2 - |a - b|^2)/2; |grad f(x_k) -
   grad f(x_{k-tau_k})|^2 <= L^2 gamma^2 |sum of <= tau updates|^2 <= 2 L^2 gamma^2 tau
   (sum |grad f(y_j)|^2 + tau sigma^2); each y_j is in at most tau windows), which gives exactly
   these constants. Note: tau enters the bound linearly (in the noise term) and quadratically only
   through the step condition. The bound is tight: for tau = 0, f = L x^2/2 and gamma = 1/L the
   exact expectation is (L^2 x_0^2 + (K - 1) sigma^2) / K, just sigma^2 / K under the bound.
"""

from __future__ import annotations

import math
from itertools import pairwise

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

from .checks import Check, f64_tol, mean_se, z_quantile

SRC_RECURRENCE = "Levin & May 1976; arXiv 1605.09774"
SRC_AUTOCORR = "derived here (Lyapunov on the companion form); GAC arXiv 2603.01501"
SRC_LIAN = "Lian et al. 2015, arXiv 1506.08272, Thm 1 (M=1)"


# ---------------------------------------------------------------------------------------------
# 1. the delayed linear recurrence
# ---------------------------------------------------------------------------------------------
def critical_step(tau: int) -> float:
    """a_crit(tau) = 2 sin(pi / (2 (2 tau + 1))): x_{t+1} = x_t - a x_{t-tau} is stable iff 0 < a < a_crit."""
    if tau < 0:
        raise ValueError(f"tau must be >= 0, got {tau}")
    return 2.0 * math.sin(math.pi / (2.0 * (2 * tau + 1)))


def companion(a: float, tau: int, dim: int | None = None) -> np.ndarray:
    """Companion matrix A of s_{t+1} = A s_t, s_t = (x_t, x_{t-1}, ..., x_{t-dim+1}), for x_{t+1} = x_t - a x_{t-tau}.

    ``dim`` defaults to tau + 1 (a larger state lets delays up to dim - 1 share one state space).
    """
    n = tau + 1 if dim is None else dim
    if n < tau + 1:
        raise ValueError(f"dim = {dim} cannot hold a delay of {tau}")
    mat = np.zeros((n, n))
    mat[0, 0] = 1.0
    mat[0, tau] -= a
    mat[1:, :-1] += np.eye(n - 1)
    return mat


def characteristic_roots(a: float, tau: int) -> np.ndarray:
    """Roots of z^{tau+1} - z^tau + a (the characteristic polynomial of the recurrence)."""
    coeffs = np.zeros(tau + 2)
    coeffs[0], coeffs[1] = 1.0, -1.0
    coeffs[-1] += a
    return np.roots(coeffs)


def spectral_radius(a: float, tau: int) -> float:
    """Largest root modulus of z^{tau+1} - z^tau + a: < 1 iff the recurrence is stable."""
    return float(np.max(np.abs(characteristic_roots(a, tau))))


def simulate_recurrence(a: float, tau: int, n_steps: int, history: np.ndarray | None = None) -> float:
    """Run x_{t+1} = x_t - a x_{t-tau} for ``n_steps`` (plain Python) and return log(|s_N| / |s_0|).

    ``history`` = (x_0, x_{-1}, ..., x_{-tau}) (default all ones). The state is renormalised as it
    goes (the log of the norm is accumulated) so that unstable runs do not overflow.
    """
    s = [1.0] * (tau + 1) if history is None else [float(v) for v in history]
    log_norm0 = 0.5 * math.log(sum(v * v for v in s))
    log_scale = 0.0
    for t in range(n_steps):
        s.insert(0, s[0] - a * s[tau])
        s.pop()
        if t % 64 == 63:
            norm = math.sqrt(sum(v * v for v in s))
            s = [v / norm for v in s]
            log_scale += math.log(norm)
    return log_scale + 0.5 * math.log(sum(v * v for v in s)) - log_norm0


def growth_constants(a: float, tau: int, history: np.ndarray | None = None) -> tuple[float, float]:
    """(C_lo, C_hi) with C_lo rho^N <= |A^N s_0| / |s_0| <= C_hi rho^N for every N (rho = spectral radius).

    From A = V diag(z) V^{-1}, c = V^{-1} s_0: |A^N s_0| <= |V|_2 sum_i |c_i| |z_i|^N <= |V|_2 |c|_1 rho^N
    and |A^N s_0| >= sigma_min(V) (sum_{|z_i| = rho} |c_i|^2)^{1/2} rho^N. Rigorous up to rounding.
    """
    mat = companion(a, tau)
    s0 = np.ones(tau + 1) if history is None else np.asarray(history, dtype=np.float64)
    z, vecs = np.linalg.eig(mat)
    c = np.linalg.solve(vecs, s0.astype(complex))
    rho = np.max(np.abs(z))
    top = np.abs(np.abs(z) - rho) <= 1e-9 * rho
    sv = np.linalg.svd(vecs, compute_uv=False)
    norm0 = np.linalg.norm(s0)
    return float(sv[-1] * np.linalg.norm(c[top]) / norm0), float(sv[0] * np.sum(np.abs(c)) / norm0)


def _recurrence_rows(tau: int, eps: float) -> list[Check]:
    a_c = critical_step(tau)
    rows = []
    for side, a in (("below", a_c * (1 - eps)), ("above", a_c * (1 + eps))):
        rho = spectral_radius(a, tau)
        rows.append(
            Check(
                1,
                f"tau={tau}: root radius at a_crit*(1{'-' if side == 'below' else '+'}{eps:g})",
                1.0,
                rho,
                0.0,
                "upper" if side == "below" else "lower",
                SRC_RECURRENCE,
            )
        )
        # simulation: the growth rate (1/N) log(|s_N|/|s_0|) lies in log rho + [log C_lo, log C_hi] / N;
        # N is chosen so that this bracket excludes 0 (the verdict stable/divergent is then certain).
        c_lo, c_hi = growth_constants(a, tau)
        kappa = max(abs(math.log(c_lo)), abs(math.log(c_hi)))
        n = math.ceil(2.0 * kappa / abs(math.log(rho))) + 1
        rate = simulate_recurrence(a, tau, n) / n
        rows.append(
            Check(
                1,
                f"tau={tau}: simulated growth rate, a {side} a_crit (N={n})",
                math.log(rho),
                rate,
                kappa / n,
                "abs",
                SRC_RECURRENCE,
            )
        )
    return rows


def simulated_critical_step(tau: int, n_steps: int, lo: float, hi: float, xtol: float) -> float:
    """Bisection on the simulated verdict |s_N| > |s_0| (diverging) over a in [lo, hi]."""
    if simulate_recurrence(lo, tau, n_steps) > 0 or simulate_recurrence(hi, tau, n_steps) < 0:
        return float("nan")
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        if simulate_recurrence(mid, tau, n_steps) > 0:
            hi = mid
        else:
            lo = mid
    return 0.5 * (lo + hi)


def check_delayed_recurrence(taus: tuple[int, ...] = (1, 2, 4, 8), eps: float = 0.02, n_steps: int = 4000) -> list[Check]:
    """Item 1: stable just below a_crit, divergent just above (roots and simulation), and a_crit itself.

    The simulated a_crit (bisection on the simulated verdict after ``n_steps``) is uncertain where
    |log rho(a)| <= kappa / N (kappa from `growth_constants`), i.e. within
    kappa / (N |d log rho / da|) of a_crit, plus the bisection's xtol: that is the tolerance.
    """
    rows: list[Check] = []
    for tau in taus:
        rows += _recurrence_rows(tau, eps)
        a_c = critical_step(tau)
        xtol = 1e-4 * a_c
        c_lo, c_hi = growth_constants(a_c, tau)
        kappa = max(abs(math.log(c_lo)), abs(math.log(c_hi)))
        h = 1e-6 * a_c
        dlogrho = (math.log(spectral_radius(a_c + h, tau)) - math.log(spectral_radius(a_c - h, tau))) / (2 * h)
        tol = kappa / (n_steps * abs(dlogrho)) + xtol
        measured = simulated_critical_step(tau, n_steps, a_c * (1 - 10 * eps), a_c * (1 + 10 * eps), xtol)
        rows.append(Check(1, f"tau={tau}: a_crit from simulation (N={n_steps})", a_c, measured, tol, "abs", SRC_RECURRENCE))
    return rows


# ---------------------------------------------------------------------------------------------
# 2. consecutive applied gradients on a noisy quadratic
# ---------------------------------------------------------------------------------------------
def stationary_covariance(a: float, tau: int, noise_var: float = 1.0) -> np.ndarray:
    """Stationary covariance of s_t = (y_t, ..., y_{t-tau}) for y_{t+1} = y_t - a y_{t-tau} - a xi_t."""
    if not 0 < a < critical_step(tau):
        raise ValueError(f"a = {a} is outside the stable range (0, {critical_step(tau):.6g}) for tau = {tau}")
    mat = companion(a, tau)
    b = np.zeros(tau + 1)
    b[0] = -a
    return solve_discrete_lyapunov(mat, noise_var * np.outer(b, b))


def lag1_autocorrelation(a: float, tau: int) -> float:
    """Exact stationary lag-1 autocorrelation of the applied gradients g_t = y_{t-tau} + xi_t (see module doc)."""
    mat = companion(a, tau)
    p = stationary_covariance(a, tau)
    c = np.zeros(tau + 1)
    c[tau] = 1.0
    b = np.zeros(tau + 1)
    b[0] = -a
    return float((c @ mat @ p @ c + c @ b) / (c @ p @ c + 1.0))


def lag1_autocorrelation_closed_form(a: float, tau: int) -> float:
    """-a/2 for tau = 0 and +a/2 for tau = 1 (derived in the module docstring)."""
    if tau == 0:
        return -a / 2.0
    if tau == 1:
        return a / 2.0
    raise ValueError(f"closed form known here for tau in (0, 1) only, got {tau}")


def simulate_applied_gradients(
    a: float, tau: int, n_chains: int, n_steps: int, burn_in: int, rng: np.random.Generator
) -> np.ndarray:
    """Applied gradients g_t = y_{t-tau} + xi_t of ``n_chains`` independent runs ([n_chains, n_steps])."""
    hist = np.zeros((tau + 1, n_chains))  # hist[j] = y_{t-j}
    out = np.empty((n_steps, n_chains))
    for t in range(burn_in + n_steps):
        xi = rng.standard_normal(n_chains)
        g = hist[tau] + xi
        y_next = hist[0] - a * g
        hist = np.roll(hist, 1, axis=0)
        hist[0] = y_next
        if t >= burn_in:
            out[t - burn_in] = g
    return out.T


def sample_lag1(g: np.ndarray) -> np.ndarray:
    """Per-chain sample lag-1 autocorrelation (mean removed), [n_chains]."""
    d = g - g.mean(axis=1, keepdims=True)
    return (d[:, 1:] * d[:, :-1]).sum(axis=1) / (d * d).sum(axis=1)


def check_autocorrelation(seed: int = 0, n_chains: int = 64, n_steps: int = 4000) -> list[Check]:
    """Item 2: closed forms vs the Lyapunov solution, Lyapunov vs simulation, and the claimed trends.

    Simulation tolerance: z standard errors of the mean over independent chains (the per-chain
    estimator's O(1/n_steps) bias is far below one standard error at these sizes). The burn-in is
    the number of steps for the slowest mode to decay by 1e-12 (from the spectral radius).
    """
    rows: list[Check] = []
    for tau, a in ((0, 0.3), (0, 1.2), (1, 0.3), (1, 0.8)):
        rows.append(
            Check(
                2,
                f"tau={tau}, a={a}: closed form {'-a/2' if tau == 0 else '+a/2'} vs Lyapunov",
                lag1_autocorrelation_closed_form(a, tau),
                lag1_autocorrelation(a, tau),
                f64_tol(1.0, ulps=1024),
                "abs",
                SRC_AUTOCORR,
            )
        )
    rng = np.random.default_rng(seed)
    cases = ((0, 0.5), (1, 0.5), (2, 0.5), (4, 0.8), (8, 0.9))
    z = z_quantile(1)
    for tau, frac in cases:
        a = frac * critical_step(tau)
        burn = math.ceil(math.log(1e-12) / math.log(max(spectral_radius(a, tau), 1e-12)))
        r = sample_lag1(simulate_applied_gradients(a, tau, n_chains, n_steps, burn, rng))
        m, se = mean_se(r)
        rows.append(
            Check(2, f"tau={tau}, a={frac:g} a_crit: simulated lag-1 autocorrelation", lag1_autocorrelation(a, tau), float(m), z * float(se), "abs", SRC_AUTOCORR)
        )
    rows += autocorrelation_trends()
    return rows


def autocorrelation_trends(
    taus: tuple[int, ...] = (1, 2, 4, 8), fracs: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)
) -> list[Check]:
    """The monotonicity statements, evaluated on the exact (Lyapunov) values."""
    table = {(t, f): lag1_autocorrelation(f * critical_step(t), t) for t in taus for f in fracs}
    positive = min(table.values())
    in_frac = min(table[(t, f2)] - table[(t, f1)] for t in taus for f1, f2 in pairwise(fracs))
    steps = [0.01, 0.05, 0.1, 0.15]
    in_tau_fixed_a = min(
        lag1_autocorrelation(a, t2) - lag1_autocorrelation(a, t1)
        for a in steps
        for t1, t2 in pairwise(taus)
        if a < critical_step(t2)
    )
    half = [table[(t, 0.5)] for t in taus]
    in_tau_fixed_frac = max(b - a for a, b in pairwise(half))
    return [
        Check(2, "tau>=1: min corr_1 over (tau, a/a_crit) grid is positive", 0.0, positive, 0.0, "lower", SRC_AUTOCORR),
        Check(2, "corr_1 increases with a/a_crit (min increment)", 0.0, in_frac, 0.0, "lower", SRC_AUTOCORR),
        Check(2, "corr_1 increases with tau at fixed a (min increment)", 0.0, in_tau_fixed_a, 0.0, "lower", SRC_AUTOCORR),
        Check(
            2,
            "at fixed a/a_crit=0.5, corr_1 DEcreases with tau (max increment)",
            0.0,
            in_tau_fixed_frac,
            0.0,
            "upper",
            SRC_AUTOCORR,
            "'grows with tau' holds at fixed step a, not at fixed a/a_crit",
        ),
    ]


# ---------------------------------------------------------------------------------------------
# 3. delayed SGD: Lian et al.'s bound against exact expectations and simulations
# ---------------------------------------------------------------------------------------------
def max_step(lipschitz: float, tau: int) -> float:
    """Largest gamma with L gamma + 2 L^2 tau^2 gamma^2 <= 1 (Lian et al.'s step condition, M = 1)."""
    if tau == 0:
        return 1.0 / lipschitz
    return (math.sqrt(1.0 + 8.0 * tau**2) - 1.0) / (4.0 * lipschitz * tau**2)


def delayed_sgd_bound(f_gap: float, lipschitz: float, gamma: float, tau: int, sigma2: float, n_steps: int) -> float:
    """Lian et al. (arXiv 1506.08272) Theorem 1, M = 1: bound on (1/K) sum_{k<K} E||grad f(x_k)||^2.

    2 (f(x_0) - f*) / (gamma K) + L gamma sigma^2 + 2 L^2 gamma^2 tau sigma^2, valid when
    L gamma + 2 L^2 tau^2 gamma^2 <= 1 (raises ValueError otherwise).
    """
    cond = lipschitz * gamma + 2.0 * lipschitz**2 * tau**2 * gamma**2
    if cond > 1.0 + 1e-12:
        raise ValueError(f"step {gamma} violates L gamma + 2 L^2 tau^2 gamma^2 <= 1 (= {cond:.6g}) for L={lipschitz}, tau={tau}")
    return 2.0 * f_gap / (gamma * n_steps) + lipschitz * gamma * sigma2 + 2.0 * lipschitz**2 * gamma**2 * tau * sigma2


def quadratic_expected_grad_sq(
    lam: float, gamma: float, delay_probs: np.ndarray, sigma2: float, x0: float, n_steps: int
) -> float:
    """Exact (1/K) sum_{k<K} E|f'(x_k)|^2 for f = lam x^2 / 2 under delayed SGD with iid random delays.

    ``delay_probs[d]`` = P(tau_k = d). The second-moment matrix M_k = E[s_k s_k^T] of the state
    s_k = (x_k, ..., x_{k-tau}) evolves linearly: M_{k+1} = sum_d p_d A_d M_k A_d^T + gamma^2 sigma^2 e_1 e_1^T
    (the delay and the noise are independent of the state), from M_0 = x0^2 (all-ones history).
    """
    tau = len(delay_probs) - 1
    lifted = [companion(gamma * lam, d, tau + 1) for d in range(tau + 1)]
    mom = np.full((tau + 1, tau + 1), x0 * x0)
    total = 0.0
    for _ in range(n_steps):
        total += lam**2 * mom[0, 0]
        mom = sum(p * a @ mom @ a.T for p, a in zip(delay_probs, lifted) if p > 0)
        mom[0, 0] += gamma**2 * sigma2
    return total / n_steps


def simulate_delayed_sgd(
    grad, x0: np.ndarray, gamma: float, delay_probs: np.ndarray, sigma2: float, n_steps: int, n_runs: int, rng: np.random.Generator
) -> np.ndarray:
    """Per-run (1/K) sum_{k<K} |grad f(x_k)|^2 of delayed SGD ([n_runs]); noise N(0, sigma2 / d I)."""
    tau = len(delay_probs) - 1
    d = x0.size
    hist = np.broadcast_to(x0, (tau + 1, n_runs, d)).copy()  # hist[j] = x_{k-j}
    acc = np.zeros(n_runs)
    runs = np.arange(n_runs)
    for _ in range(n_steps):
        acc += (grad(hist[0]) ** 2).sum(axis=1)
        delays = rng.choice(tau + 1, size=n_runs, p=delay_probs)
        g = grad(hist[delays, runs]) + rng.standard_normal((n_runs, d)) * math.sqrt(sigma2 / d)
        new = hist[0] - gamma * g
        hist = np.roll(hist, 1, axis=0)
        hist[0] = new
    return acc / n_steps


def cosine_valley(x: np.ndarray) -> float:
    """The nonconvex test function f(x) = sum_i x_i^2 / 2 + 2 cos(x_i): f'' = 1 - 2 cos x in [-1, 3], L = 3."""
    return float(np.sum(0.5 * x * x + 2.0 * np.cos(x)))


def cosine_valley_grad(x: np.ndarray) -> np.ndarray:
    return x - 2.0 * np.sin(x)


def cosine_valley_min(dim: int) -> float:
    """f* = dim * min_x (x^2/2 + 2 cos x), at x = 2 sin x (x ~ 1.8955), found by Newton's method."""
    x = 1.9
    for _ in range(50):
        x -= (x - 2.0 * math.sin(x)) / (1.0 - 2.0 * math.cos(x))
    return dim * (0.5 * x * x + 2.0 * math.cos(x))


def delay_distribution(tau: int, kind: str) -> np.ndarray:
    """P(tau_k = d), d = 0..tau: ``"fixed"`` (always tau) or ``"uniform"`` (uniform on 0..tau)."""
    if kind == "fixed":
        return np.eye(tau + 1)[tau]
    if kind == "uniform":
        return np.full(tau + 1, 1.0 / (tau + 1))
    raise ValueError(f"delay kind must be 'fixed' or 'uniform', got {kind!r}")


def check_delayed_sgd(seed: int = 0, n_steps: int = 400, n_runs: int = 400) -> list[Check]:
    """Item 3: the bound against exact expectations (quadratic) and simulations (quadratic, nonconvex).

    Quadratic f = L x^2/2 (L = 1, x0 = 3, sigma^2 = 1) at the largest allowed step: the exact
    expectation (`quadratic_expected_grad_sq`) must stay under the bound, and the simulation must
    match the exact value within z standard errors. Nonconvex f = `cosine_valley` (d = 4): the
    simulated mean must stay under the bound (one-sided, z standard errors).
    """
    rng = np.random.default_rng(seed)
    lam, x0, sigma2 = 1.0, 3.0, 1.0
    rows: list[Check] = []
    z = z_quantile(1)
    for tau, kind in ((0, "fixed"), (1, "fixed"), (4, "fixed"), (4, "uniform"), (8, "fixed")):
        probs = delay_distribution(tau, kind)
        gamma = max_step(lam, tau)
        bound = delayed_sgd_bound(lam * x0 * x0 / 2, lam, gamma, tau, sigma2, n_steps)
        exact = quadratic_expected_grad_sq(lam, gamma, probs, sigma2, x0, n_steps)
        label = f"tau={tau} ({kind}), gamma=gamma_max={gamma:.4g}"
        rows.append(Check(3, f"quadratic {label}: exact E|grad|^2 under bound", bound, exact, f64_tol(bound), "upper", SRC_LIAN))
        sims = simulate_delayed_sgd(lambda x: lam * x, np.array([x0]), gamma, probs, sigma2, n_steps, n_runs, rng)
        m, se = mean_se(sims)
        rows.append(Check(3, f"quadratic {label}: simulation vs exact", exact, float(m), z * float(se), "abs", "exact second moments"))
    dim, lip = 4, 3.0
    x_start = np.array([3.0, -2.5, 1.0, 0.3])
    f_gap = cosine_valley(x_start) - cosine_valley_min(dim)
    for tau, kind in ((0, "fixed"), (4, "fixed"), (4, "uniform")):
        probs = delay_distribution(tau, kind)
        gamma = max_step(lip, tau)
        bound = delayed_sgd_bound(f_gap, lip, gamma, tau, sigma2, n_steps)
        sims = simulate_delayed_sgd(cosine_valley_grad, x_start, gamma, probs, sigma2, n_steps, n_runs, rng)
        m, se = mean_se(sims)
        rows.append(
            Check(3, f"nonconvex d=4, L=3, tau={tau} ({kind}): simulated E|grad|^2 under bound", bound, float(m), z * float(se), "upper", SRC_LIAN)
        )
    return rows
