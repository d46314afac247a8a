"""Per-step instrumentation of the lag-1 path against sync (the bisect table of results/findings/token_lag.md).

    PYTHONPATH=$PWD heavy python sweeps/token_reversal/lag/probe.py [--seeds 10] [--steps 100]

Trains pg.toml's setting (sync and fixed:1, seeds 0..n-1; the same seeds and streams as the sweep, so the
runs are the sweep's first ``steps`` steps) in one loop, and records for every run and learner step t:

* ``b``: the batch-mean baseline (mean reward of the batch), ``adv_std`` / ``adv_pos_frac``: the spread of
  the advantages R_i - b and the share above zero;
* ``ess_seq``: normalised ESS of the sequence ratios pi_t / mu over the batch, ``ess_tok``: of the token
  ratios, ``ess_actor_min``: the smallest per-actor-chunk sequence ESS, ``logratio_abs_max``: the largest
  |log pi_t(a) - log mu(a)| of any token;
* ``cos_base_last``: cos(baseline part of the update, last update), the baseline part being the ascent
  -b grad (token-mean log pi_t) on the batch and the last update theta_t - theta_{t-1};
  ``cos_reward_last``: the same for the reward part, grad (token-mean R_i log pi_t);
  ``cos_full_last``: the same for the whole update's gradient (their sum); ``base_share``: ||baseline part|| / ||baseline part + reward part||.

Writes results/findings/token_lag/probe.csv (atomically).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import torch

from testbed.runner import Runner
from testbed.stabilizers.numerics import effective_sample_size, sequence_log_ratio
from testbed.sweep_file import expand, load_file
from testbed.util.files import atomic_open

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
OUT = ROOT / "results" / "findings" / "token_lag" / "probe.csv"
DELAYS = ("sync", "fixed:1")


def cos(x: torch.Tensor, y: torch.Tensor) -> float:
    nx, ny = x.norm(), y.norm()
    return float(x @ y / (nx * ny)) if nx > 0 and ny > 0 else float("nan")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args(argv)
    if args.seeds < 1 or args.steps < 2:
        print(f"--seeds must be >= 1 and --steps >= 2, got {args.seeds} and {args.steps}", file=sys.stderr)
        return 2
    spec = load_file(HERE / "pg.toml")
    spec["base"] = {**spec["base"], "steps": args.steps, "log_every": args.steps}
    spec["grid"] = {"delay": list(DELAYS), "seed": list(range(args.seeds))}
    configs = expand(spec)
    runner = Runner(configs)
    n_actors = configs[0].n_actors
    prev: dict[int, dict[str, torch.Tensor]] = {}
    last: dict[int, dict[str, torch.Tensor]] = {}
    rows: list[dict] = []

    def on_version(r: int, v: int, params: dict[str, torch.Tensor]) -> None:
        if r in last:
            prev[r] = last[r]
        last[r] = {k: p.detach().clone() for k, p in params.items()}

    def on_batch(r: int, t: int, batch: dict) -> None:
        cfg = configs[r]
        ps = {k: p.detach().clone()[None].requires_grad_(True) for k, p in runner.params(r).items()}
        logp = runner.token_logp(ps, batch["contexts"][None], batch["actions"][None])[0]  # [B, T]
        rew = batch["rewards"].to(torch.float64)
        b = float(rew.mean())
        g_base = torch.autograd.grad(-(b * logp).mean(), list(ps.values()), retain_graph=True)
        g_rew = torch.autograd.grad((rew[:, None].float() * logp).mean(), list(ps.values()))
        gb = torch.cat([g.flatten() for g in g_base])
        gr = torch.cat([g.flatten() for g in g_rew])
        with torch.no_grad():
            lr_tok = logp.detach() - batch["behavior_logp"]
            everywhere = torch.ones_like(lr_tok, dtype=torch.bool)
            seq = sequence_log_ratio(logp.detach(), batch["behavior_logp"], everywhere)
            chunks = seq.view(n_actors, -1)
        row = {"delay": cfg.delay, "seed": cfg.seed, "step": t, "b": b, "adv_std": float((rew - b).std()),
               "adv_pos_frac": float((rew > b).double().mean()), "ess_seq": float(effective_sample_size(seq)),
               "ess_tok": float(effective_sample_size(lr_tok.flatten())),
               "ess_actor_min": float(effective_sample_size(chunks).min()),
               "logratio_abs_max": float(lr_tok.abs().max()),
               "base_share": float(gb.norm() / (gb + gr).norm())}
        if r in prev:
            delta = torch.cat([(last[r][k] - prev[r][k]).flatten() for k in last[r]])
            row["cos_base_last"], row["cos_reward_last"], row["cos_full_last"] = cos(gb, delta), cos(gr, delta), cos(gb + gr, delta)
        else:
            row["cos_base_last"] = row["cos_reward_last"] = row["cos_full_last"] = float("nan")
        rows.append(row)

    runner.on_version, runner.on_batch = on_version, on_batch
    runner.run()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(OUT, "w") as fh:
        pd.DataFrame(rows).sort_values(["delay", "seed", "step"]).to_csv(fh, index=False)
    print(f"wrote {OUT.relative_to(ROOT)} ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
