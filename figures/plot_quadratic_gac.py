"""Consecutive-gradient cosine on a noisy quadratic, sync vs delays, with and without the GAC projection
(GAC-1, GAC-2, background).

f(x) = lambda/2 ||x||^2 in d dimensions, gradient lambda x + sigma n, SGD with step a = eta lambda;
with delay tau the learner applies the gradient computed at x_{t-tau} (the recurrence of
theory/delayed_optimization.py, result 2, whose exact stationary values are the dotted lines). The
transform is the testbed's own ``gac_projection`` object applied through ``Recipe.step`` as the
runner does, so this checks the component itself; theory/ has no gradient-transform hook, hence the
loop here. Panel 1: cosine between consecutive raw gradients (GAC's signal); panel 2: f(x_t).
"""

from __future__ import annotations

import numpy as np
import torch

from figures import style
from figures.common import Context, smooth_rows
from figures.experiments.delayed_sgd import autocorr

NAME = "quadratic_gac"
CLAIMS = ("GAC-1", "GAC-2")
TAUS = (0, 2, 8)
A_STEP = 0.1  # a = eta * lambda, stable for tau <= 8 (a_crit(8) = 0.185)


def configs(quick: bool) -> list:
    return []


def simulate(tau: int, use_gac: bool, steps: int, seed: int, dims: int = 100, sigma: float = 1.0,
             x0: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """(cosine between consecutive applied raw gradients [steps], f(x_t) [steps])."""
    from testbed.stabilizers import build

    gen = torch.Generator().manual_seed(seed)
    lam = 1.0
    x = torch.full((dims,), x0, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.SGD([x], lr=A_STEP / lam)
    recipe = build("gac_projection") if use_gac else build("pg")
    history = [x.detach().clone()]
    cos = np.full(steps, np.nan)
    loss = np.empty(steps)
    prev = None
    for t in range(steps):
        stale = history[max(0, len(history) - 1 - tau)]
        g = lam * stale + sigma * torch.randn(dims, generator=gen, dtype=torch.float64)
        if prev is not None:
            cos[t] = float(torch.dot(g, prev) / (g.norm() * prev.norm()))
        prev = g.clone()
        x.grad = g.clone()
        recipe.step([x], opt, None)
        history.append(x.detach().clone())
        if len(history) > tau + 2:
            history.pop(0)
        loss[t] = float(0.5 * lam * (x.detach() ** 2).sum())
    return cos, loss


def make(ctx: Context) -> dict:
    b = ctx.budget
    steps, seeds = b.quadratic_steps, b.quadratic_seeds
    fig, (ax, ax2) = style.subplots(2, width=3.8)
    x = np.arange(1, steps + 1)
    ev: dict = {"taus": list(TAUS), "steady_cos": {}, "final_loss": {}}
    for i, tau in enumerate(TAUS):
        for use_gac in (False, True):
            runs = [simulate(tau, use_gac, steps, s) for s in seeds]
            raw = np.stack([c for c, _ in runs])
            loss = np.stack([f for _, f in runs])
            name = f"{'gac' if use_gac else 'sgd'}, tau={tau}"
            c = style.level_color(i, sync=tau == 0)
            ls = "--" if use_gac else "-"
            style.band(ax, x, smooth_rows(raw, 9), color_=c, label_=name, linestyle=ls)
            style.band(ax2, x, loss, color_=c, label_=name, linestyle=ls)
            ev["steady_cos"][name] = np.nanmean(raw[:, steps // 2:], axis=1).tolist()
            ev["final_loss"][name] = loss[:, -max(1, steps // 10):].mean(axis=1).tolist()
    for tau in TAUS:
        ax.axhline(autocorr(A_STEP, tau), color="#999999", lw=0.6, ls=":")
    ax.set_xlabel("step")
    ax.set_ylabel("cos(g_t, g_{t-1}) of raw gradients")
    ax.set_title(f"quadratic, a = {A_STEP}; dotted: exact stationary value")
    ax.legend(ncol=2, fontsize=6, loc="upper right")
    ax2.set_yscale("log")
    ax2.set_xlabel("step")
    ax2.set_ylabel("f(x_t) = lambda ||x||^2 / 2")
    ax2.set_title("objective")
    cap = style.caption_text(CLAIMS, f"d=100 quadratic, SGD a={A_STEP}, gradient applied tau steps late; gac = the "
                             "testbed's gac_projection (defaults); mean +- s.e. over seeds", ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    return {"quadratic_gac": ev}
