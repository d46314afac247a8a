"""MNIST bandit: final test error vs actor delay D for every stabilizer, and learning curves at the
largest D (DDG-1).

Each learner batch of 100 images was sampled by the policy D versions old (``fixed:D``). A diverged
run counts as chance-level error (0.9) and is marked with an x.
"""

from __future__ import annotations

from figures import style, suites
from figures.common import Context, curves, diverged_count, final_values, seed_matrix

NAME = "mnist_delay"
CLAIMS = ("DDG-1",)
CHANCE = 0.9


def configs(quick: bool) -> list:
    return suites.mnist_delay(quick)


def make(ctx: Context) -> dict:
    s = suites.scale(ctx.quick)
    table = ctx.table(configs(ctx.quick))
    lags = [suites.lag_of(d) for d in s.mnist_delays]
    fig, (ax, ax2) = style.subplots(2, width=4.0, height=3.2)
    ev: dict = {"delays": list(s.mnist_delays), "final_error": {}, "diverged": {}}
    for r in suites.MNIST_RECIPES:
        per_delay = [final_values(table, "test_error", CHANCE, recipe=r, delay=d) for d in s.mnist_delays]
        vals = seed_matrix(per_delay)  # [seeds, delays]
        if vals.size == 0:
            continue
        style.band(ax, lags, vals, name=r, marker="o")
        for j, d in enumerate(s.mnist_delays):
            k = diverged_count(table, recipe=r, delay=d)
            if k:
                ax.plot([lags[j]], [CHANCE], "x", color=style.color(r), markersize=6)
            ev["final_error"][f"{r}|{d}"] = vals[:, j].tolist()
            ev["diverged"][f"{r}|{d}"] = k
        x, ys = curves(table, "test_error", recipe=r, delay=s.mnist_delays[-1])
        if len(x):
            style.band(ax2, x, ys, name=r)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xticks(lags)
    ax.set_xticklabels([str(v) for v in lags])
    ax.set_xlabel("actor delay D (learner steps)")
    ax.set_ylabel("final test error (fraction)")
    ax.set_ylim(0, 1)
    ax.set_title(f"MNIST bandit, {s.mnist_steps} steps")
    ax.legend(fontsize=6, ncol=2)
    ax2.set_xlabel("learner step")
    ax2.set_ylabel("test error (fraction)")
    ax2.set_ylim(0, 1)
    ax2.set_title(f"learning curves at D = {lags[-1]}")
    cap = style.caption_text(CLAIMS, f"mean +- s.e. over {len(s.seeds)} seed(s); x = diverged (counted as chance, 0.9)",
                             ctx.cmd(NAME))
    style.save(fig, ctx.out, NAME, cap)
    ev["largest_delay"] = s.mnist_delays[-1]
    return {"DDG-1": ev}
