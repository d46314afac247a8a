"""The real-LLM column: what SmolLM2-135M-Instruct shows for the claims it can speak to, beside the testbed.

Sources, each read in the schema its writer gives it (a file that is absent, unreadable or lacks a field
gives "not measured" with the reason, never an error):

* ``results/llm/fingerprint/**/<model>__<task>.json`` (``python -m llm_scale fingerprint``):
  ``cosine_by_minibatch`` [{m, mean, ci_low, ci_high, pairs}] (m in sequences), ``noise_scale`` (B_noise,
  sequences), ``staleness`` [{lag, ess_seq, ...}], ``date``. Of several measurements of one model and task
  only the newest is read (a re-measurement, e.g. with fresh prompts after a rule was fixed, supersedes the
  earlier ones, which the evidence names);
* ``results/fingerprint/async_grpo.json`` (``python -m testbed fingerprint --regime async_grpo``): the same
  fields for the testbed's async-GRPO regime;
* ``results/llm/study/**/study.json`` (``python -m llm_scale study``, the promotion study): ``rule``
  {min_drop, min_se}, ``base``, ``recipes``, ``eval_problems``, ``chosen`` {eta, lr} or null, ``forced``,
  ``verdict``, ``cell_runs`` [{arm, seed, finished, diverged, accuracy}] (arm: "sync", "stale" or a recipe
  trained stale);
* ``results/llm/vcpo1_cpu/runs.csv`` and ``updates.csv`` (``python -m llm_scale study
  sweeps/llm/vcpo1_cpu.toml``, VCPO-1's trainer runs; its second look, ``sweeps/llm/vcpo1_cpu_look2.toml``,
  writes the same files to ``results/llm/vcpo1_cpu_look2``): per run ``key``, ``stage``, ``finished``; per run and
  policy version ``eval_reward``, ``staleness_ess``, ``grad_norm_raw``, ``diverged``;
* ``results/llm/gac1_cpu/runs.csv`` (``python -m llm_scale study sweeps/llm/gac1_cpu.toml``, GAC-1's
  trainer runs): per run ``stage``, ``arm`` ("sync" / "stale"), ``eta``, ``seed``, ``finished`` and
  ``late_grad_cos_within`` (the mean cosine between consecutive optimizer steps' raw gradients within a
  batch over the second half of the updates).

Per claim (`LLM_CLAIMS`) the real model is judged by the testbed's own rule where the data allow:

* GAC-1, synchronous part: the cosine between two minibatch gradients of one policy is set by the
  minibatch size over the gradient noise scale, E cos = m / (m + B_noise) (McCandlish et al., 2018, "An
  Empirical Model of Large-Batch Training"), so the real model's cosine is read at the m whose m / B_noise
  is closest (in log) to the testbed regime's; "near orthogonal" = the interval inside +-`BAND`. The
  staleness part is not in the fingerprint. Where GAC-1's trainer runs have finished (every planned
  seed of both arms), the whole claim is judged on them instead, by the testbed's own rule
  (`figures.experiments.async_grpo.judges.gac1_parts`: sync inside +-`BAND`, stale above it) on the same
  quantity and window as the testbed's (the within-batch consecutive-step cosine over the second half of
  training, per seed), and set beside the testbed's verdict; the fingerprint's cosine is shown with it.
* VCPO-1: on the trainer runs of its looks (`VCPO1_RUNS`, `vcpo1_runs`: a later look is read together with
  the earlier ones once all its runs have finished; one optimizer step per update, a greedy evaluation after
  every update), once every planned run has finished, by the testbed's own rule
  and code (`figures.experiments.mnist_delay.evidence.collapses`, `precursor_counts`, `judges.precursor_parts`): a collapse
  is an evaluation whose error (1 - greedy accuracy) is more than 0.2 above its running minimum, or
  divergence; the precursors (an update's ESS below half, its raw gradient norm above twice, the median of
  every earlier update's) are read among the updates of the 3 evaluation intervals up to it, and at the last
  evaluation of the runs that do not collapse, each proportion's exact interval at `testbed.util.stats.bonferroni_level` of the
  looks read (90% for one, 95% for two). No collapse after enough history: "not testable". Until the first
  look's runs have finished: "not measured", with the fingerprint's ESS by lag.
* AREAL-1 (decoupled_ppo) / GAC-2 (gac): the promotion study's chosen cell (the first that degrades by the
  study's rule, fixed in its sweep file) through `figures.experiments.async_grpo.judges.rescue_parts`, the
  testbed's rule, on error = 1 - greedy accuracy per seed (a diverged run: error 1), floored at half a
  problem. A study whose search found no degrading cell makes the claim "not testable", and every such
  study is named with its cells' drops (``search.csv``: ``eta``, ``lr``, ``drop``, ``drop_se``, ``pairs``,
  ``degrades``, ``complete``) and the rule they were held to; a forced or unfinished one is never judged (a
  search that has not finished is named before a forced pilot); of several valid studies the last in path
  order is read. A study whose finished search runs (``runs.csv``: ``key``, ``stage``, ``finished``) are all
  among another study's, which has more, is an earlier look of that search (the same runs, fewer seeds): it
  is superseded by the later look, named as such and never judged, so that a sequential design's verdict is
  the one of the look where it stopped.

Agreement: both positive (reproduced / direction only) or both negative (not reproduced) = "agree"; one
of each = "disagree"; both "not testable" = "neither testable"; an inconclusive side = "not decided";
otherwise "not measured".
"""


from __future__ import annotations

from pathlib import Path

from figures.llm_column.fingerprints import (
    fingerprint_row,
    fingerprints,
    rung_fingerprints,
    rung_markdown,
    testbed_noise_scale,
    with_extra_lrs,
)
from figures.llm_column.pocket import pocket_cells, pocket_gac1, pocket_rescue, pocket_setting, redesigned
from figures.llm_column.real import (
    Study,
    gac1_runs,
    gac1_trainer_verdict,
    gac1_verdict,
    latest_looks,
    rescue_verdict,
    studies,
    vcpo1_runs,
    vcpo1_verdict,
)
from figures.llm_column.settings import (
    AGREEMENTS,
    BAND,
    GAC1_RUNS,
    LLM_CLAIMS,
    METHOD,
    PHASES,
    POCKET_FINGERPRINTS,
    POCKET_GAC1,
    POCKET_PREREG,
    POCKET_REDESIGNS,
    POCKET_RESCUE,
    POSITIVE,
    RUNG_LAGS,
    TESTBED_FINGERPRINT,
    VCPO1_RUNS,
    load_json,
)

__all__ = ["AGREEMENTS", "BAND", "GAC1_RUNS", "LLM_CLAIMS", "METHOD", "PHASES", "POCKET_FINGERPRINTS", "POCKET_GAC1",
           "POCKET_PREREG", "POCKET_REDESIGNS", "POCKET_RESCUE", "POSITIVE", "RUNG_LAGS", "TESTBED_FINGERPRINT",
           "VCPO1_RUNS", "Study", "agreement", "fingerprint_row", "fingerprints", "gac1_runs", "gac1_trainer_verdict",
           "gac1_verdict", "latest_looks", "llm_rows", "load_json", "main", "markdown", "pocket_cells", "pocket_gac1",
           "pocket_rescue", "pocket_setting", "redesigned", "rescue_verdict", "rung_fingerprints", "rung_markdown",
           "studies", "testbed_noise_scale", "vcpo1_runs", "vcpo1_verdict", "with_extra_lrs"]


def agreement(testbed: str, real: str) -> str:
    if testbed.startswith("sync part") or real.startswith("sync part"):  # GAC-1: part against part
        if not testbed.startswith("sync part") or not real.startswith("sync part"):
            return "not measured"
        a, b = testbed.removeprefix("sync part ").split(" ")[0], real.removeprefix("sync part ")
        if "undecided" in (a, b):
            return "not decided"
        return "agree" if a == b else "disagree"
    if testbed == real == "not testable":
        return "neither testable"
    if real in ("not measured", "not testable") or testbed in ("not testable", "not applicable", "not measured"):
        return "not measured"
    if testbed == "inconclusive" or real == "inconclusive":
        return "not decided"
    return "agree" if (testbed in POSITIVE) == (real in POSITIVE) else "disagree"


def llm_rows(root: Path, testbed: dict[str, str], m_testbed: float | None = None) -> list[dict[str, str]]:
    """One row per claim the real model can speak to: testbed verdict, real-model verdict, what it read,
    agreement (module docstring). ``testbed``: claim id -> verdict; for GAC-1, "sync part <status> (...)"
    (the status of its synchronous part) so that part is compared with the real model's fingerprint, and
    "GAC-1 claim" -> the whole claim's verdict, compared where the trainer runs judge the whole claim.
    ``m_testbed``: the testbed regime's minibatch size in samples."""
    root = Path(root)
    fps = fingerprints(root)
    found, skipped = studies(root)
    out = []
    trainer = gac1_runs(root)
    pockets = pocket_cells(root)
    for cid in LLM_CLAIMS:
        tb = testbed.get(cid, "not measured")
        if cid == "GAC-1":
            real, why = gac1_verdict(fps, m_testbed, testbed_noise_scale(root))
            if trainer is not None and trainer["finished"] == trainer["planned"]:
                real, why = gac1_trainer_verdict(trainer, why)
                tb = testbed.get("GAC-1 claim", tb)
            elif real != "not measured":
                why += "; the staleness part is not in the fingerprint, so the two are compared on the synchronous part only"
        elif cid == "VCPO-1":
            real, why = vcpo1_verdict(fps, vcpo1_runs(root))
        else:
            real, why = rescue_verdict(found, skipped, METHOD[cid])
        ag = agreement(tb, real)
        if ag == "not measured" and real not in ("not measured", "not testable"):
            why += f"; the testbed's verdict is '{tb}'"
        pocket = pockets[cid]
        out.append({"id": cid, "testbed": tb, "real": real, "agreement": ag, "evidence": why, **pocket,
                    "pocket_agreement": agreement(tb, pocket["pocket"])})  # fmt: skip
    return out


def markdown(rows: list[dict[str, str]], root: Path | None = None) -> list[str]:
    """The section of claims.md: testbed verdict vs the real model, the transfer table (one column per rung) and,
    with ``root``, the rungs' fingerprints like for like (`rung_markdown`)."""
    lines = ["", "## Does the testbed predict the LLM? (SmolLM2-135M-Instruct)", "",
             "| claim | testbed | real model | agreement | what the real model shows |",
             "| --- | --- | --- | --- | --- |"]
    lines += [f"| {r['id']} | {r['testbed']} | {r['real']} | **{r['agreement']}** | {r['evidence']} |" for r in rows]
    if any("pocket" in r for r in rows):
        lines += ["", "## The transfer table: one column per rung", "",
                  "Rungs: the testbed; the pocket LM (pocket-arithmetic, task-pretrained on a CPU, not web-pretrained); "
                  "SmolLM2-135M-Instruct (web-pretrained); a GPU model. Each cell is a verdict of its own design or "
                  "what it needs.", "",
                  "| claim | testbed | pocket LM | SmolLM2 | GPU model | agreement (testbed-pocket / testbed-SmolLM2) |",
                  "| --- | --- | --- | --- | --- | --- |"]  # fmt: skip
        lines += [f"| {r['id']} | {r['testbed']} | {r['pocket']} | {r['real']} | {r.get('gpu', '-')} | "
                  f"{r.get('pocket_agreement', '-')} / {r['agreement']} |" for r in rows]  # fmt: skip
        lines += ["", "What the pocket LM's cells need:", ""]
        lines += [f"- **{r['id']}**: {r['pocket_evidence']}" for r in rows]
        lines += pocket_setting(Path(root)) if root is not None else []
    if root is not None:
        lines += rung_markdown(rung_fingerprints(Path(root)))
    return lines


def main(argv: list[str] | None = None) -> int:
    """``python -m figures.llm_column [--claims CLAIMS_JSON] [--out MD]``: the transfer output (the real-model
    table, the transfer table one column per rung, the rungs' fingerprints like for like) from the files under
    the working directory, the testbed's verdicts read from a claims report's ``llm`` rows."""
    import sys

    from testbed.util.arguments import CommandLine
    from testbed.util.files import atomic_write_text

    ap = CommandLine(prog="python -m figures.llm_column", description=main.__doc__.splitlines()[0])
    ap.add_argument("--claims", default="results/paper/claims.json", help="claims report whose testbed verdicts are read")
    ap.add_argument("--out", default="results/llm/transfer.md", help="where the markdown goes")
    args = ap.parse_args(argv)
    report = load_json(Path(args.claims))
    if not isinstance(report, dict) or not isinstance(report.get("llm"), list):
        print(f"error: --claims {args.claims!r} is not a claims report with an 'llm' list", file=sys.stderr)
        return 2
    testbed = {r["id"]: r["testbed"] for r in report["llm"] if isinstance(r, dict) and "id" in r and "testbed" in r}
    if "GAC-1" in testbed:
        testbed["GAC-1 claim"] = testbed["GAC-1"]
    lines = [f"# The model ladder: transfer output (testbed verdicts from {args.claims})", *markdown(llm_rows(Path("."), testbed), Path("."))]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out), "\n".join(lines) + "\n")
    print(f"wrote {args.out}")
    return 0

