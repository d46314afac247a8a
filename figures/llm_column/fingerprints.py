"""The rungs' fingerprints like for like: the real models' fingerprint files (`fingerprints`), one row per rung and
phase (`rung_fingerprints`, `fingerprint_row`) and their table (`rung_markdown`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from figures.llm_column.settings import PHASES, POCKET_FINGERPRINTS, RUNG_LAGS, TESTBED_FINGERPRINT, load_json
from testbed.stabilizers.fingerprint import newest_files


def fingerprints(root: Path, folder: str = "results/llm/fingerprint") -> list[dict[str, Any]]:
    """The newest readable real-model fingerprint of each model and task anywhere under ``folder``
    (`testbed.stabilizers.fingerprint.newest_files`, by its ``date``), with its file name and ``_earlier``, the
    files of that model and task it supersedes. The web-pretrained rung's (the default folder) leaves out the
    pocket LM's, under `POCKET_FINGERPRINTS`."""
    out = []
    pocket = (Path(root) / POCKET_FINGERPRINTS).resolve()
    for path, earlier in newest_files(Path(root) / folder):
        if not folder.startswith(POCKET_FINGERPRINTS) and pocket in path.resolve().parents:
            continue
        data = load_json(path)
        if isinstance(data, dict):
            out.append({**data, "_file": str(path), "_earlier": [str(p) for p in earlier]})
    return out


def _num(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else math.nan


def fingerprint_row(rung: str, phase: str, fp: dict[str, Any] | None, missing: str = "") -> dict[str, Any]:
    """One rung's fingerprint in the like-for-like columns: the completion budget and mean length (tokens), the
    updates' lr and sequences, sequence and token ESS / N and the PPO clip fraction at each lag of `RUNG_LAGS`,
    the mean token entropy, the zero-advantage group share, B_noise (sequences), the truncated share and the
    mean reward of the measured batch; NaN where the fingerprint does not record a field. ``fp`` None: the row
    says ``missing``."""
    if fp is None:
        return {"rung": rung, "phase": phase, "file": None, "missing": missing}
    extra = fp.get("extra") if isinstance(fp.get("extra"), dict) else {}
    by_lag = {int(r["lag"]): r for r in fp.get("staleness") or [] if isinstance(r, dict) and "lag" in r}
    return {
        "rung": rung, "phase": phase, "model": fp.get("model"), "file": fp.get("_file"),
        "budget": _num(extra.get("max_new_tokens")), "length_mean": _num(extra.get("length_mean")),
        "lr": _num(extra.get("lr")), "update_sequences": _num(extra.get("update_sequences")),
        "ess_seq": {k: _num(by_lag.get(k, {}).get("ess_seq")) for k in RUNG_LAGS},
        "ess_token": {k: _num(by_lag.get(k, {}).get("ess_token")) for k in RUNG_LAGS},
        "clip_frac": {k: _num(by_lag.get(k, {}).get("clip_frac")) for k in RUNG_LAGS},
        "entropy": _num(fp.get("entropy")), "zero_advantage_frac": _num(fp.get("zero_advantage_frac")),
        "noise_scale": _num(fp.get("noise_scale")), "truncated_frac": _num(fp.get("truncated_frac")),
        "reward_mean": _num(extra.get("reward_mean", extra.get("mean_reward"))),
    }  # fmt: skip


def with_extra_lrs(row: dict[str, Any], fp: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``row`` and, for each learning rate of the fingerprint's ``extra.staleness_by_lr`` (the same start and
    batches, other updates), a row whose staleness columns are that rate's and whose other columns (measured on
    the same version-0 batch) are ``row``'s."""
    out = [row]
    extra = (fp or {}).get("extra")
    for lr, stale in (extra.get("staleness_by_lr") or {}).items() if isinstance(extra, dict) else []:
        other = fingerprint_row(row["rung"], f"{row['phase']}, lr {lr}", {**fp, "staleness": stale})
        out.append({**other, "lr": _num(float(lr))})
    return out


def rung_fingerprints(root: Path) -> list[dict[str, Any]]:
    """The rungs' fingerprints, like for like (`fingerprint_row`): the testbed's async-GRPO regime
    (`TESTBED_FINGERPRINT`), the pocket LM at version 0 and in the learning phase (the newest file under
    `POCKET_FINGERPRINTS`/version0 and /learning), SmolLM2 at version 0 (the newest SmolLM2 fingerprint under
    results/llm/fingerprint) and in the learning phase (results/llm/fingerprint/learning)."""
    root = Path(root)
    testbed = load_json(root / TESTBED_FINGERPRINT)
    rows = [fingerprint_row("testbed", "regime", {**testbed, "_file": TESTBED_FINGERPRINT} if isinstance(testbed, dict)
                            else None, f"no {TESTBED_FINGERPRINT}")]  # fmt: skip
    for folder, phase in PHASES:
        found = fingerprints(root, f"{POCKET_FINGERPRINTS}/{folder}")
        newest = max(found, key=lambda f: str(f.get("date", "")), default=None)
        rows += with_extra_lrs(fingerprint_row("pocket LM", phase, newest, f"no fingerprint under {POCKET_FINGERPRINTS}/"
                                               f"{folder}"), newest)  # fmt: skip
    web = [f for f in fingerprints(root) if str(f.get("model", "")).startswith("smollm2")
           and "/learning/" not in str(f.get("_file", ""))]  # fmt: skip
    rows.append(fingerprint_row("SmolLM2", "version 0", max(web, key=lambda f: str(f.get("date", "")), default=None),
                                "no SmolLM2 fingerprint under results/llm/fingerprint"))  # fmt: skip
    learning = fingerprints(root, "results/llm/fingerprint/learning")
    rows.append(fingerprint_row("SmolLM2", "learning phase", max(learning, key=lambda f: str(f.get("date", "")),
                                                                   default=None),
                                "not measured: needs a fingerprint of a SmolLM2 policy after sync GRPO updates "
                                "(results/llm/fingerprint/learning)"))  # fmt: skip
    return rows


def _cell(value: float, spec: str = ".2f") -> str:
    return "-" if not math.isfinite(value) else format(value, spec)


def rung_markdown(rows: list[dict[str, Any]]) -> list[str]:
    """The like-for-like table of `rung_fingerprints`."""
    lags = "/".join(map(str, RUNG_LAGS))
    lines = ["", "## Rungs' fingerprints, like for like", "",
             f"ESS / N (sequence and token) and PPO clip fraction at lags {lags} (updates), measured at the budget "
             "shown; token units are each model's own tokens (characters for the pocket LM).", "",
             f"| rung | phase | budget | mean length | lr x sequences/update | ESS seq {lags} | ESS token {lags} | "
             f"clip {lags} | entropy | zero-adv share | B_noise | truncated | reward | file |",
             "| --- | --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip
    for r in rows:
        if r.get("file") is None:
            lines.append(f"| {r['rung']} | {r['phase']} | {r['missing']} |" + " |" * 11)
            continue
        by = {k: "/".join(_cell(r[k][lag]) for lag in RUNG_LAGS) for k in ("ess_seq", "ess_token", "clip_frac")}
        lines.append(
            f"| {r['rung']} | {r['phase']} | {_cell(r['budget'], '.0f')} | {_cell(r['length_mean'], '.1f')} | "
            f"{_cell(r['lr'], 'g')} x {_cell(r['update_sequences'], '.0f')} | {by['ess_seq']} | {by['ess_token']} | "
            f"{by['clip_frac']} | {_cell(r['entropy'])} | {_cell(r['zero_advantage_frac'])} | {_cell(r['noise_scale'], '.0f')} | "
            f"{_cell(r['truncated_frac'])} | {_cell(r['reward_mean'])} | {r['file']} |"
        )  # fmt: skip
    return lines


def testbed_noise_scale(root: Path) -> float | None:
    """B_noise of the testbed's async-GRPO regime from its fingerprint, or None."""
    d = load_json(Path(root) / TESTBED_FINGERPRINT)
    b = d.get("noise_scale") if isinstance(d, dict) else None
    return float(b) if isinstance(b, int | float) and math.isfinite(b) and b > 0 else None
