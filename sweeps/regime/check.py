"""Health by rule (a) of testbed/regimes.py and the synchronous within-batch cosine of one run directory.

    python sweeps/regime/check.py runs/regime/done_sync runs/regime/reference_pg_batch

Prints, over the directory's seeds: the final test error against 1.5x one-step PG's at the same batch size, the zero-gradient share of
the optimizer steps in the second half, the seeds that lost no class, and the within-batch cosine of
consecutive minibatches of whole groups (second half): mean over steps per seed, then its 90% Student-t
interval over seeds, and the 5% / 95% quantiles of the per-step values (pooled).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from choose import runs

from testbed.stabilizers.fingerprint import summarize_cosines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("reference", type=Path)
    args = p.parse_args()
    data = runs(args.out)
    ref = pd.read_csv(args.reference / "summary.csv")
    batch = data["batch_size"].unique()
    if len(batch) != 1 or batch[0] not in set(ref["batch_size"]):
        sys.exit(f"error: {args.out} has batch sizes {sorted(batch)}; the reference has {sorted(set(ref['batch_size']))}")
    pg = ref.loc[ref["batch_size"] == batch[0], "final_test_error"].mean()
    err = data["final_test_error"].mean()
    zero = data["zero_grad_frac_late"].mean()
    lost = data["lost_classes_final"]
    ok = zero < 0.2 and err <= 1.5 * pg and (lost == 0).sum() > len(lost) / 2
    print(f"{len(data)} runs; final test error {err:.4f} (1.5 x PG = {1.5 * pg:.4f}); zero-gradient steps in the "
          f"second half {zero:.4f} (rule (a) needs < 0.2); seeds with no lost class {(lost == 0).sum()}/{len(lost)}; "
          f"health {', '.join(data['health'].astype(str))}; rule (a): {'healthy' if ok else 'NOT healthy'}")
    cos = summarize_cosines(0, data["cos_within"].to_numpy(), 0.9)
    print(f"within-batch cosine (second half): mean {cos.mean:+.4f}, 90% interval over {cos.pairs} seeds "
          f"[{cos.ci_low:+.4f}, {cos.ci_high:+.4f}]; per-step 5%-95%: "
          f"[{data['cos_within_q05'].mean():+.3f}, {data['cos_within_q95'].mean():+.3f}]")


if __name__ == "__main__":
    main()
