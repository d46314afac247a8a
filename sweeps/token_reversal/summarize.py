"""Print the token-reversal tables from the token-reversal sweeps (finished runs only, so it also works
while a sweep is still going).

    python sweeps/token_reversal/summarize.py     (from the repository root, package installed)

Table 1: final sequence error at H = 10, M = 2 (mean and spread over seeds) per recipe and friction
setting (none.toml ... all.toml, and all_long.toml with 5x the budget), sampled (the paper's metric),
greedy, and token error.
Table 2 (horizon.toml, horizon_long.toml): final sampled sequence error per recipe and H with all four
frictions, and
the longest H each recipe solves (mean sampled sequence error over seeds at most 5%, and at most 10%, the
threshold figures/token_horizon.py uses).
Wall time per sweep file: sum and maximum of the runs' wall_s (the sweeps' own elapsed times are
in the timing log of the command that ran them). Runs are found through each file's configs (their
hashes), so runs of an older version of a file in the same output directory are ignored.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from testbed.sweep import expand, load_file

HERE = Path(__file__).resolve().parent

SETTINGS = ("none", "staleness", "bugs", "corruption", "rare", "all", "all_long")
RECIPES = ("pg", "ppo", "decoupled_ppo", "tis", "vcpo", "gac", "dg")
SOLVED = (0.05, 0.10)


def fmt(values: pd.Series) -> str:
    """mean (min-max) in percent over seeds."""
    v = 100 * values.astype(float)
    return f"{v.mean():5.1f} ({v.min():.0f}-{v.max():.0f})"


def finished(name: str) -> pd.DataFrame:
    """Final logged row, status and wall time of every finished run of sweeps/token_reversal/NAME.toml."""
    spec = load_file(HERE / f"{name}.toml")
    runs = Path(spec["out"]) / "runs"
    rows = []
    for cfg in expand(spec):
        record = runs / f"{cfg.run_id}.json"
        if not record.exists():
            continue
        info = json.loads(record.read_text())
        last = pd.read_csv(runs / f"{cfg.run_id}.csv").iloc[-1].to_dict()
        rows.append({**last, "recipe": cfg.recipe, "task.H": cfg.task_args.get("H", 10), "seed": cfg.seed,
                     "status": info["status"], "wall_s": info["wall_s"]})
    return pd.DataFrame(rows)


def main() -> None:
    frames = {s: df for s in SETTINGS if len(df := finished(s))}
    if frames:
        print("Sequence error (%) at H = 10, M = 2 after the fixed budget: mean (min-max) over seeds; n = seeds\n")
        for metric in ("test_error", "test_error_greedy", "test_token_error"):
            rows = []
            for recipe in RECIPES:
                row = {"recipe": recipe}
                for setting, df in frames.items():
                    sub = df[(df["recipe"] == recipe) & (df["status"] == "ok")]
                    row[setting] = f"{fmt(sub[metric])} n={len(sub)}" if len(sub) else "-"
                    diverged = int((df["recipe"] == recipe).sum() - len(sub))
                    if diverged:
                        row[setting] += f" ({diverged} diverged)"
                rows.append(row)
            print(metric)
            print(pd.DataFrame(rows).to_string(index=False), "\n")
        print("run wall time per sweep file (s): sum over runs / max run / runs")
        for setting, df in frames.items():
            print(f"  {setting:10s} {df['wall_s'].sum():8.0f} {df['wall_s'].max():6.0f} {len(df):4d}")
    for name in ("horizon", "horizon_long"):
        horizon_table(name)


def horizon_table(name: str) -> None:
    df = finished(name)
    if not len(df):
        return
    df = df[df["status"] == "ok"]
    steps = int(df["step"].max())
    table = df.groupby(["recipe", "task.H"])["test_error"].mean().unstack("task.H")
    table = table.reindex([r for r in RECIPES if r in table.index])
    print(f"\n{name}.toml: sampled sequence error (%) with all four frictions after {steps} steps, mean over seeds, by H")
    print((100 * table).round(1).to_string())
    print("Longest H solved (mean sampled sequence error at most the threshold; '-' = none in the grid):")
    print(f"  {'recipe':14s} " + " ".join(f"<= {t:.0%}" for t in SOLVED))
    for recipe, row in table.iterrows():
        longest = [max([h for h, err in row.items() if err <= t], default="-") for t in SOLVED]
        print(f"  {recipe:14s} " + " ".join(f"{v!s:>6s}" for v in longest))
    print(f"{name} runs: {len(df)}, wall time sum {df['wall_s'].sum():.0f} s, max run {df['wall_s'].max():.0f} s")

if __name__ == "__main__":
    main()
