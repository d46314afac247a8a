"""Where the real-model column reads its inputs and the constants its cells share (the claims it covers, the
files of each rung), and `load_json`, its one reader of a JSON file that may be missing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LLM_CLAIMS = ("GAC-1", "VCPO-1", "AREAL-1", "GAC-2")
POSITIVE = ("reproduced", "direction only")
BAND = 0.2  # GAC-1's "near orthogonal" band (figures/experiments/async_grpo/judges.py)
METHOD = {"AREAL-1": "decoupled_ppo", "GAC-2": "gac"}
AGREEMENTS = ("agree", "disagree", "neither testable", "not decided", "not measured")  # what `agreement` returns
TESTBED_FINGERPRINT = "results/fingerprint/async_grpo.json"
GAC1_RUNS = "results/llm/gac1_cpu/runs.csv"
VCPO1_RUNS = ("results/llm/vcpo1_cpu", "results/llm/vcpo1_cpu_look2")  # its looks, in order
POCKET_FINGERPRINTS = "results/llm/fingerprint/pocket"  # version0/ and learning/ (python -m llm_scale fingerprint)
POCKET_PREREG = "sweeps/llm/pocket_prereg.toml"  # the pocket LM's designs and the GPU commands
POCKET_REDESIGNS = ("sweeps/llm/pocket_prereg2.toml", "sweeps/llm/pocket_prereg3.toml",
                    "sweeps/llm/pocket_prereg4.toml")  # later registrations, in order: new designs, new seed blocks
POCKET_GAC1 = "results/llm/pocket/gac1_confirm"  # GAC-1's confirmatory runs on the pocket LM (sync/, stale/: runs.csv)
POCKET_RESCUE = "results/llm/pocket/rescue_confirm"  # AREAL-1's and GAC-2's confirmatory runs (runs.csv, four arms)
PHASES = (("version0", "version 0"), ("learning", "learning phase"))
RUNG_LAGS = (1, 2, 4)


def load_json(path: Path) -> Any:
    """The JSON at ``path``; None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
