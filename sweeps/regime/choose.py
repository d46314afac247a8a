"""Apply the regime selection rule of testbed/regimes.py to the whole-group search.

    python sweeps/regime/choose.py runs/regime/search_groups/lr1e-3 runs/regime/search_groups/lr3e-3 \
        runs/regime/search_batch --reference runs/regime/reference_pg runs/regime/reference_pg_batch \
        [--markdown] [--real results/llm/fingerprint]

One row per candidate setting (batch size, group size G, minibatches N, lr): rule (a) (health at sync against
one-step PG at the same batch size), rule (b) (degradation at bounded:32,4, paired by seed, the rule of summarize.py) and the distance (c)
to the real model's fingerprint; the selected setting is the passing one with the smallest distance.
Columns: ``sync`` / ``pg``: final test error (mean over seeds); ``zero_grad``: zero-gradient share of the
optimizer steps in the second half (mean over seeds); ``no_lost``: seeds that lost no class; ``cos_within``:
synchronous within-batch cosine of disjoint whole-group minibatches (second half, mean over steps then over
seeds) with its 90% Student-t interval over seeds; ``d8`` / ``d32``: paired stale - sync final error and
standard error; ``ess32`` / ``q95_32``: mean per-step ESS/N and token log-ratio 95% quantile at
bounded:32,4 (second half); ``r``: m / B_noise from the cosine; ``d``: the distance (c).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

from testbed.results import ResultStore
from testbed.stabilizers.fingerprint import newest_files, summarize_cosines

REAL_COS16 = 0.10  # SmolLM2-135M-Instruct, arithmetic, dense reward, 16 sequences (ALGORITHMS.md)
KEYS = ("batch_size", "group_size", "minibatches", "lr")
HIGH, LOW = "bounded:32,4", "bounded:8,4"


def runs(out: Path) -> pd.DataFrame:
    """summary.csv with the per-run late-half statistics from runs/<id>.steps.csv."""
    summary = pd.read_csv(out / "summary.csv", dtype={"run_id": str})
    store = ResultStore(out)
    extra = []
    for rid, steps_total in zip(summary["run_id"], summary["steps"], strict=True):
        st = store.step_records(rid)
        row = {"run_id": rid}
        if st is not None:
            late = st[st["step"] > steps_total / 2]
            within = late.loc[late["kind"] == "within", "grad_cos"].dropna()
            row.update(cos_within=within.mean() if len(within) else math.nan, ess=late["ess"].mean(),
                       q95=late["logratio_q95"].mean() if "logratio_q95" in late else math.nan,
                       cos_within_q05=within.quantile(0.05) if len(within) else math.nan,
                       cos_within_q95=within.quantile(0.95) if len(within) else math.nan)
        extra.append(row)
    return summary.merge(pd.DataFrame(extra), on="run_id", how="left")


def real_target(real: Path) -> dict[str, float]:
    """The real model's r (from its cosine at 16 sequences), ESS/N and log-ratio q95 at lag 32 when known: of the
    fingerprints under ``real``, the first model and task's newest (`newest_files`)."""
    out = {"r": REAL_COS16 / (1 - REAL_COS16), "ess": math.nan, "q95": math.nan, "source": "ALGORITHMS.md"}
    for path, _ in newest_files(real):
        d = json.loads(path.read_text())
        for c in d.get("cosine_by_minibatch", []):
            if c.get("m") == 16 and c.get("mean") is not None:
                cos = min(max(c["mean"], 0.01), 0.99)
                out.update(r=cos / (1 - cos), source=path.name)
        for s in d.get("staleness", []):
            if s.get("lag") == 32:
                out.update(ess=s.get("ess_seq") or math.nan, q95=s.get("logratio_q95") or math.nan)
        break
    return out


def select(search: list[Path], reference: list[Path], real: Path) -> tuple[pd.DataFrame, dict[str, float]]:
    data = pd.concat([runs(out) for out in search], ignore_index=True)
    ref = pd.concat([pd.read_csv(out / "summary.csv") for out in reference], ignore_index=True)
    pg_by_batch = ref.groupby("batch_size")["final_test_error"].mean()
    target = real_target(real)
    rows = []
    for setting, grp in data.groupby(list(KEYS)):
        sync = grp[grp["delay"] == "sync"].set_index("seed")
        row: dict[str, object] = dict(zip(KEYS, setting, strict=True))
        row["sync"] = sync["final_test_error"].mean()
        pg = row["pg"] = pg_by_batch.get(row["batch_size"], math.nan)
        row["zero_grad"] = sync["zero_grad_frac_late"].mean()
        lost = sync["lost_classes_final"]
        row["no_lost"] = f"{int((lost == 0).sum())}/{len(lost)}"
        healthy = row["zero_grad"] < 0.2 and row["sync"] <= 1.5 * pg and (lost == 0).sum() > len(lost) / 2
        row["a"] = "yes" if healthy else "no"
        cos = summarize_cosines(0, sync["cos_within"].to_numpy(), 0.9)
        row["cos_within"] = f"{cos.mean:+.3f} [{cos.ci_low:+.3f}, {cos.ci_high:+.3f}]"
        for delay, name in ((LOW, "d8"), (HIGH, "d32")):
            stale = grp[grp["delay"] == delay].set_index("seed")["final_test_error"]
            diff = (stale - sync["final_test_error"]).dropna()
            if not len(diff):
                row[name] = "-"
                continue
            mean, se = diff.mean(), diff.std(ddof=1) / math.sqrt(len(diff)) if len(diff) > 1 else math.nan
            row[name] = f"{100 * mean:+.1f} +- {100 * se:.1f}"
            if delay == HIGH:
                row["b"] = "yes" if mean > 2 * se and mean > 0.02 and row["sync"] < 0.45 else "no"
        high = grp[grp["delay"] == HIGH]
        row["ess32"], row["q95_32"] = high["ess"].mean(), high["q95"].mean()
        c = min(max(cos.mean, 0.01), 0.99) if math.isfinite(cos.mean) else math.nan
        row["r"] = c / (1 - c)
        d = abs(math.log(row["r"]) - math.log(target["r"]))
        if all(math.isfinite(float(v)) for v in (target["ess"], target["q95"], row["ess32"], row["q95_32"])):
            d += abs(row["ess32"] - target["ess"]) + abs(row["q95_32"] - target["q95"])
        row["d"] = d
        rows.append(row)
    table = pd.DataFrame(rows)
    passing = table[(table["a"] == "yes") & (table["b"] == "yes")]
    table["selected"] = ""
    if len(passing):
        table.loc[passing["d"].idxmin(), "selected"] = "<- (a)+(b), nearest"
    else:
        healthy = table[table["a"] == "yes"]
        learns = table[table["sync"] <= 1.5 * table["pg"]]
        if len(healthy):
            table.loc[healthy["d"].idxmin(), "selected"] = "<- healthy only (nothing passes (b)), nearest"
        elif len(learns):  # nothing healthy: the least stalled setting that learns, to measure (not a regime)
            table.loc[learns["zero_grad"].idxmin(), "selected"] = "<- nothing healthy: least stalled that learns"
    return table, target


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("search", type=Path, nargs="+", help="output directories of the search")
    p.add_argument("--reference", type=Path, nargs="+", required=True,
                   help="output directories of one-step PG (at each batch size of the search)")
    p.add_argument("--real", type=Path, default=Path("results/llm/fingerprint"))
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    table, target = select(args.search, args.reference, args.real)
    print(f"real-model target: r = m / B_noise = {target['r']:.3f}, ESS/N at lag 32 = {target['ess']}, "
          f"q95 = {target['q95']} (from {target['source']})")
    if args.markdown:
        print(table.to_markdown(index=False, floatfmt=".3g"))
    else:
        with pd.option_context("display.width", 250):
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))


if __name__ == "__main__":
    main()
