"""The real-LLM column of the claims report (figures/llm_column/), on fingerprints and on promotion studies
written by the study's own code (llm_scale.study) from finished runs on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures.llm_column import agreement, llm_rows, markdown
from llm_scale import study
from testbed.util.stats import bonferroni_level, clopper_pearson

SWEEP = """
[train]
model = "tiny"
task = "copy"
steps = 4
prompts_per_step = 4
group_size = 4
eval_every = 2
eval_size = 64
[search]
eta = [2, 4]
lr = [1e-3]
seeds = [0, 1, 2]
[compare]
recipes = ["gac", "decoupled_ppo"]
seeds = [0, 1, 2]
"""


def _fingerprint(root, cosines, noise_scale, where="results/llm/fingerprint/smollm2__arith.json",
                 date="2026-01-01T00:00:00Z"):
    path = Path(root) / where
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "model": "smollm2", "task": "arith", "noise_scale": noise_scale, "date": date,
        "cosine_by_minibatch": [{"m": m, "mean": c, "ci_low": c - 0.05, "ci_high": c + 0.05, "pairs": 20}
                                for m, c in cosines],
        "staleness": [{"lag": 0, "ess_seq": 1.0}, {"lag": 4, "ess_seq": 0.7}]}))


def _finish(root: Path, run: study.Run, accuracy: float | None) -> None:
    """A finished run on disk (None: diverged)."""
    d = root / run.key
    d.mkdir(parents=True, exist_ok=True)
    status = "finished" if accuracy is not None else "diverged"
    (d / "summary.json").write_text(json.dumps({"status": status, "of_steps": 4, "device": "cpu", "wall_seconds": 1.0}))
    (d / "eval.csv").write_text(f"version,eval_reward\n0,0.1\n4,{accuracy}\n")


def _study(tmp_path, search: dict, compare: dict | None = None, force=None, name="main") -> Path:
    """A promotion study written by llm_scale.study: ``search`` {(arm, eta): [accuracy per seed]},
    ``compare`` {recipe: [accuracy per seed]} for the chosen cell (None: a diverged seed); the cell's sync and
    stale arms are the search's own runs."""
    (tmp_path / "sweep.toml").write_text(SWEEP)
    sweep = study.load_sweep(tmp_path / "sweep.toml")
    runs = tmp_path / "runs"
    for run in study.search_runs(sweep):
        _finish(runs, run, search[(run.arm, run.eta)][run.seed])
    rep = study.collect(sweep, runs, force)
    for run in (study.compare_runs(sweep, rep.chosen["eta"], rep.chosen["lr"]) if rep.chosen else []):
        if compare and run.arm in compare:
            _finish(runs, run, compare[run.arm][run.seed])
    rep = study.collect(sweep, runs, force)
    study.write_report(sweep, rep, tmp_path / "results/llm/study" / name, "test")
    return tmp_path


SYNC, STALE = [0.60, 0.61, 0.59], [0.40, 0.41, 0.38]
DEGRADING = {("sync", 2): SYNC, ("stale", 2): [0.60, 0.60, 0.59], ("sync", 4): SYNC, ("stale", 4): STALE}


def test_nothing_measured_says_so():
    rows = llm_rows(Path("/nonexistent"), {"AREAL-1": "reproduced"}, 200.0)
    assert [r["agreement"] for r in rows] == ["not measured"] * 4
    assert "no promotion study with decoupled_ppo" in rows[2]["evidence"]


def test_gac1_reads_the_real_cosine_at_the_testbeds_minibatch_over_noise_scale(tmp_path):
    _fingerprint(tmp_path, [(8, 0.0), (64, 0.45)], 400.0)
    tb = {"GAC-1": "sync part holds (claim: not reproduced)"}
    by_m = llm_rows(tmp_path, tb, m_testbed=200.0)[0]  # no testbed noise scale: m = 64 is the closest to 200
    assert by_m["real"] == "sync part fails" and by_m["agreement"] == "disagree" and "matched by m" in by_m["evidence"]
    _fingerprint(tmp_path, [(200, 0.0)], 6400.0, where="results/fingerprint/async_grpo.json")
    row = llm_rows(tmp_path, tb, m_testbed=200.0)[0]  # 200 / 6400 = 0.031: 8 / 400 = 0.02 is closer than 64 / 400
    assert row["real"] == "sync part holds" and row["agreement"] == "agree" and "8 / 400 = 0.020" in row["evidence"]
    assert llm_rows(tmp_path, tb, m_testbed=None)[0]["real"] == "not measured"
    assert "ESS/N 0.70" in llm_rows(tmp_path, tb, 200.0)[1]["evidence"]


def test_a_re_measurement_of_the_same_model_and_task_supersedes_the_earlier_one(tmp_path):
    _fingerprint(tmp_path, [(200, 0.0)], 6400.0, where="results/fingerprint/async_grpo.json")
    _fingerprint(tmp_path, [(8, 0.0)], 400.0)  # the earlier measurement: holds at 8 / 400
    _fingerprint(tmp_path, [(8, 0.45)], 400.0, where="results/llm/fingerprint/again/smollm2__arith.json",
                 date="2026-02-01T00:00:00Z")  # the later one, in a folder below: fails at the same size
    row = llm_rows(tmp_path, {"GAC-1": "sync part holds (claim: not reproduced)"}, m_testbed=200.0)[0]
    assert row["real"] == "sync part fails" and row["agreement"] == "disagree"
    assert "again/smollm2__arith.json" in row["evidence"] and "supersedes" in row["evidence"]
    _fingerprint(tmp_path, [(8, 0.0)], 400.0, where="results/llm/fingerprint/other.json", date="2026-03-01T00:00:00Z")
    assert llm_rows(tmp_path, {"GAC-1": "sync part holds (x)"}, m_testbed=200.0)[0]["real"] == "sync part holds"


def test_the_studys_chosen_cell_is_judged_by_the_testbeds_rescue_rule(tmp_path):
    _study(tmp_path, DEGRADING, {"decoupled_ppo": [0.595, 0.605, 0.585],
                                 "gac": [0.35, 0.36, 0.34]})
    out = {r["id"]: r for r in llm_rows(tmp_path, {"AREAL-1": "reproduced", "GAC-2": "inconclusive"}, 200.0)}
    assert out["AREAL-1"]["real"] == "reproduced" and out["AREAL-1"]["agreement"] == "agree"
    assert "eta=4" in out["AREAL-1"]["evidence"]  # eta = 2 does not degrade: the first degrading cell is eta = 4
    assert "grpo degrades at eta=4, lr=0.001: " in out["AREAL-1"]["evidence"]
    assert out["GAC-2"]["real"] == "not reproduced" and out["GAC-2"]["agreement"] == "not decided"
    assert any("| AREAL-1 |" in ln for ln in markdown(list(out.values())))


def test_a_diverged_seed_counts_as_error_one_not_as_a_missing_value(tmp_path):
    _study(tmp_path, DEGRADING, {"decoupled_ppo": [0.595, None, 0.585], "gac": STALE})
    row = llm_rows(tmp_path, {}, 200.0)[2]  # errors 40.5%, 100%, 41.5%: one seed far off, the interval wide
    assert row["real"] == "inconclusive" and "decoupled_ppo 60.7% +- 34 (n=3)" in row["evidence"]


def test_a_study_without_a_degrading_cell_makes_the_claim_not_testable(tmp_path):
    flat = {("sync", e): SYNC for e in (2, 4)} | {("stale", e): [0.60, 0.60, 0.59] for e in (2, 4)}
    _study(tmp_path, flat)
    rows = {r["id"]: r for r in llm_rows(tmp_path, {"AREAL-1": "not testable", "GAC-2": "reproduced"}, 200.0)}
    assert rows["AREAL-1"]["real"] == "not testable" and rows["AREAL-1"]["agreement"] == "neither testable"
    assert rows["GAC-2"]["agreement"] == "not measured" and "no cell degrades" in rows["GAC-2"]["evidence"]
    # each searched cell's paired drop and its standard error, beside the rule it was held to
    assert ("eta 2, lr 0.001: drop +0.003 +- 0.050 (3 pairs, 0.1 standard errors); eta 4, lr 0.001: drop +0.003"
            in rows["AREAL-1"]["evidence"])
    assert "the rule asks a drop >= 0.03 and >= 2 standard errors" in rows["AREAL-1"]["evidence"]
    _study(tmp_path, flat, name="z_later")  # every study without a degrading cell is named
    evidence = llm_rows(tmp_path, {}, 200.0)[2]["evidence"]
    assert "main/study.json" in evidence and "z_later/study.json" in evidence


@pytest.mark.parametrize("compare, says", [(None, "not all finished"), ("forced", "a forced cell is never judged")])
def test_forced_or_unfinished_comparisons_are_never_judged(tmp_path, compare, says):
    if compare == "forced":
        flat = {("sync", e): SYNC for e in (2, 4)} | {("stale", e): [0.60, 0.60, 0.59] for e in (2, 4)}
        _study(tmp_path, flat, {"decoupled_ppo": SYNC, "gac": SYNC}, force=(2, 1e-3))
    else:
        _study(tmp_path, DEGRADING, {"gac": SYNC})
    row = llm_rows(tmp_path, {"AREAL-1": "reproduced"}, 200.0)[2]
    assert row["real"] == "not measured" and says in row["evidence"]


def test_a_search_that_has_not_finished_is_named_before_a_forced_pilot(tmp_path):
    flat = {("sync", e): SYNC for e in (2, 4)} | {("stale", e): [0.60, 0.60, 0.59] for e in (2, 4)}
    _study(tmp_path, flat, {"decoupled_ppo": SYNC, "gac": SYNC}, force=(2, 1e-3), name="a_pilot")
    sweep = study.load_sweep(tmp_path / "sweep.toml")
    study.write_report(sweep, study.collect(sweep, tmp_path / "no_runs"), tmp_path / "results/llm/study/b_gpu", "test")
    row = llm_rows(tmp_path, {"AREAL-1": "reproduced"}, 200.0)[2]
    assert row["real"] == "not measured" and "a_pilot" not in row["evidence"]
    assert "b_gpu/study.json: search incomplete (0 of 9 planned runs finished)" in row["evidence"]
    flat = {("sync", e): SYNC for e in (2, 4)} | {("stale", e): [0.60, 0.60, 0.59] for e in (2, 4)}
    _study(tmp_path, flat, name="c_cpu")  # a finished search without a degrading cell: not testable, the other named
    row = llm_rows(tmp_path, {"AREAL-1": "reproduced"}, 200.0)[2]
    assert row["real"] == "not testable" and "c_cpu/study.json" in row["evidence"]
    assert "not finished: " in row["evidence"] and "b_gpu/study.json: search incomplete (0 of 9" in row["evidence"]


def test_an_unreadable_or_foreign_study_file_is_skipped_and_named(tmp_path):
    d = tmp_path / "results/llm/study/old"
    d.mkdir(parents=True)
    (d / "study.json").write_text('{"rows": []}')
    row = llm_rows(tmp_path, {}, 200.0)[2]
    assert row["real"] == "not measured" and "schema: " in row["evidence"] and "old/study.json" in row["evidence"]


def _gac1_study(tmp_path, late: dict[str, list[float | None]]) -> Path:
    """GAC-1's trainer runs written by llm_scale.study: ``late`` {arm: per-seed cosine of the second half of
    the updates, None: the run has not finished}; the first half's cosines are 0.9, which the rule must not read."""
    (tmp_path / "gac1.toml").write_text(SWEEP.replace("eta = [2, 4]", "eta = [1]"))
    sweep = study.load_sweep(tmp_path / "gac1.toml")
    runs = tmp_path / "runs_gac1"
    for run in study.search_runs(sweep):
        c = late[run.arm][run.seed]
        if c is None:
            continue
        _finish(runs, run, 0.5)
        rows = [f"{step},{cos}" for step, cos in enumerate((0.9, 0.9, c, "nan" if run.seed == 0 else c))]
        (runs / run.key / "metrics.csv").write_text("step,grad_cos_within\n" + "\n".join(rows) + "\n")
    study.write_report(sweep, study.collect(sweep, runs), tmp_path / "results/llm/gac1_cpu", "test")
    return tmp_path


GAC1_TESTBED = {"GAC-1": "sync part holds (claim: not reproduced)", "GAC-1 claim": "not reproduced"}


@pytest.mark.parametrize("stale, real, agree", [([0.01, 0.04, -0.02], "not reproduced", "agree"),
                                                ([0.5, 0.55, 0.6], "reproduced", "disagree")])
def test_gac1_is_judged_whole_on_the_trainer_runs_by_the_testbeds_rule(tmp_path, stale, real, agree):
    _fingerprint(_gac1_study(tmp_path, {"sync": [0.02, -0.01, 0.03], "stale": stale}), [(8, 0.0)], 400.0)
    row = llm_rows(tmp_path, GAC1_TESTBED, m_testbed=200.0)[0]
    assert (row["testbed"], row["real"], row["agreement"]) == ("not reproduced", real, agree)
    assert "grpo: cosine at eta=1 above 0.2" in row["evidence"] and "Fingerprint: smollm2 on arith" in row["evidence"]
    assert "sync 0.013 +- 0.021 (n=3)" in row["evidence"] and "synchronous part only" not in row["evidence"]  # the second half only: the 0.9s are not read


def test_gac1_falls_back_to_the_fingerprints_sync_part_until_every_trainer_run_has_finished(tmp_path):
    _fingerprint(_gac1_study(tmp_path, {"sync": [0.02, -0.01, 0.03], "stale": [0.01, None, -0.02]}), [(8, 0.0)], 400.0)
    row = llm_rows(tmp_path, GAC1_TESTBED, m_testbed=200.0)[0]
    assert (row["testbed"], row["real"], row["agreement"]) == (GAC1_TESTBED["GAC-1"], "sync part holds", "agree")
    assert "the staleness part is not in the fingerprint" in row["evidence"]


def test_a_gac1_runs_table_without_the_late_cosine_is_skipped_not_an_error(tmp_path):
    _fingerprint(_gac1_study(tmp_path, {"sync": [0.02, -0.01, 0.03], "stale": [0.5, 0.55, 0.6]}), [(8, 0.0)], 400.0)
    runs = tmp_path / "results/llm/gac1_cpu/runs.csv"
    lines = runs.read_text().splitlines()
    drop = lines[0].split(",").index("late_grad_cos_within")
    runs.write_text("\n".join(",".join(c for i, c in enumerate(ln.split(",")) if i != drop) for ln in lines) + "\n")
    row = llm_rows(tmp_path, GAC1_TESTBED, m_testbed=200.0)[0]
    assert (row["real"], row["agreement"]) == ("sync part holds", "agree")  # the fingerprint's sync part only


VCPO1_TESTBED = {"VCPO-1": "inconclusive"}


def _trace(collapse_at: int | None, precursors: bool, stale: bool, last: int = 12) -> tuple[list, list, list]:
    """Per version 0..last: greedy accuracy 0.6 (0.2 from ``collapse_at`` on); per update 1..last: ESS 0.9
    (1.0 in sync) and gradient norm 3.0, with an ESS of 0.2 and a norm of 10 at the update before the collapse
    when ``precursors``."""
    acc = [0.2 if collapse_at is not None and v >= collapse_at else 0.6 for v in range(last + 1)]
    ess = [0.9 if stale else 1.0] * last
    norm = [3.0] * last
    if precursors and collapse_at is not None:
        ess[collapse_at - 2], norm[collapse_at - 2] = 0.2, 10.0  # update collapse_at - 2 makes version collapse_at - 1
    return acc, ess, norm


def _vcpo1_study(tmp_path, stale: list[tuple[int | None, bool, bool]], missing: int = 0, first_seed: int = 0,
                 look: str = "results/llm/vcpo1_cpu") -> Path:
    """VCPO-1's trainer runs written by llm_scale.study into ``look``: synchronous runs that never collapse, and
    per seed (from ``first_seed``) a stale run (collapse version or None, precursors before it, diverged: its
    evaluations stop at the collapse); ``missing`` of the sync runs have not finished."""
    seeds = list(range(first_seed, first_seed + len(stale)))
    text = SWEEP.replace("eta = [2, 4]", "eta = [4]").replace("steps = 4", "steps = 12").replace(
        "eval_every = 2", "eval_every = 1").replace("seeds = [0, 1, 2]\n[compare]", f"seeds = {seeds}\n[compare]")
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "vcpo1.toml").write_text(text)
    sweep = study.load_sweep(tmp_path / "vcpo1.toml")
    runs = tmp_path / "runs_vcpo1"
    for run in study.search_runs(sweep):
        if run.arm == "sync" and run.seed - first_seed < missing:
            continue
        collapse, pre, diverged = stale[run.seed - first_seed] if run.arm == "stale" else (None, False, False)
        acc, ess, norm = _trace(collapse, pre, run.arm == "stale")
        last = collapse if diverged else 12
        d = runs / run.key
        d.mkdir(parents=True, exist_ok=True)
        (d / "summary.json").write_text(json.dumps({"status": "diverged" if diverged else "finished", "of_steps": 12}))
        (d / "eval.csv").write_text("version,eval_reward\n" + "".join(f"{v},{acc[v]}\n" for v in range(last + 1)))
        (d / "metrics.csv").write_text("step,staleness_ess,grad_norm_raw\n"
                                       + "".join(f"{s},{ess[s]},{norm[s]}\n" for s in range(last)))
    study.write_report(sweep, study.collect(sweep, runs), tmp_path / look, "test")
    return tmp_path


def test_vcpo1_is_judged_on_the_trainer_runs_by_the_testbeds_collapse_rule(tmp_path):
    stale = [(9, True, False)] * 5 + [(9, True, True)]  # the last one diverges at version 9: a collapse there
    row = llm_rows(_vcpo1_study(tmp_path, stale), VCPO1_TESTBED)[1]
    assert (row["id"], row["testbed"], row["real"], row["agreement"]) == ("VCPO-1", "inconclusive", "reproduced",
                                                                        "not decided")
    assert "6 collapse(s)" in row["evidence"] and "6 after enough history (0 synchronous" in row["evidence"]
    assert "6 non-collapsing run ends" in row["evidence"] and "looks read together" not in row["evidence"]
    assert "ESS drop before the collapse (6/6 collapses; 0/6 non-collapsing run ends)" in row["evidence"]
    assert "fixed:4 lr=0.001 seed 5 at version 9" in row["evidence"]


def test_vcpo1_collapses_without_precursors_fail_and_early_ones_are_not_testable(tmp_path):
    row = llm_rows(_vcpo1_study(tmp_path / "a", [(9, False, False)] * 6), VCPO1_TESTBED)[1]
    assert row["real"] == "not reproduced" and "0/6 collapses" in row["evidence"]
    row = llm_rows(_vcpo1_study(tmp_path / "b", [(4, True, False)] * 6), VCPO1_TESTBED)[1]  # too little history
    assert (row["real"], row["agreement"]) == ("not testable", "not measured")
    assert "6 collapse(s)" in row["evidence"] and "0 after enough history" in row["evidence"]


def test_vcpo1s_second_look_is_read_with_the_first_at_the_two_look_level_once_it_has_finished(tmp_path):
    """Three collapses with an ESS drop in each look: 3 of 3 at the one-look 90% level (lower bound 0.368) and
    6 of 6 read together at 95% (lower bound 0.541, above one half: holds with the base rate 0 of 12)."""
    root = _vcpo1_study(tmp_path, [(9, True, False)] * 3 + [(None, False, False)] * 3)
    alone = llm_rows(root, VCPO1_TESTBED)[1]
    assert alone["real"] == "inconclusive" and "ESS drop before the collapse (3/3 collapses" in alone["evidence"]
    _vcpo1_study(tmp_path, [(9, True, False)] * 3 + [(None, False, False)] * 3, missing=1, first_seed=6,
                 look="results/llm/vcpo1_cpu_look2")
    unfinished = llm_rows(root, VCPO1_TESTBED)[1]
    assert unfinished["real"] == "inconclusive" and "vcpo1_cpu_look2 (11 of 12 runs finished)" in unfinished["evidence"]
    (tmp_path / "results/llm/vcpo1_cpu_look2/runs.csv").write_text("not,a,table\n")
    broken = llm_rows(root, VCPO1_TESTBED)[1]
    assert broken["real"] == "inconclusive" and "vcpo1_cpu_look2 (unreadable)" in broken["evidence"]
    _vcpo1_study(tmp_path, [(9, True, False)] * 3 + [(None, False, False)] * 3, first_seed=6,
                 look="results/llm/vcpo1_cpu_look2")
    both = llm_rows(root, VCPO1_TESTBED)[1]
    assert both["real"] == "reproduced" and "24 runs, 6 collapse(s)" in both["evidence"]
    assert "2 looks read together, each interval at 95%" in both["evidence"]
    assert "ESS drop before the collapse (6/6 collapses; 0/18 non-collapsing run ends)" in both["evidence"]
    assert bonferroni_level(1) == pytest.approx(0.90) and bonferroni_level(2) == pytest.approx(0.95)
    assert clopper_pearson(3, 3, bonferroni_level(1))[0] < 0.5 < clopper_pearson(6, 6, bonferroni_level(2))[0]


def test_vcpo1_is_not_measured_until_every_trainer_run_has_finished(tmp_path):
    row = llm_rows(_vcpo1_study(tmp_path, [(9, True, False)] * 6, missing=1), VCPO1_TESTBED)[1]
    assert row["real"] == "not measured" and "11 of 12 trainer runs" in row["evidence"]


def test_agreement_table():
    assert agreement("reproduced", "direction only") == "agree"
    assert agreement("not reproduced", "reproduced") == "disagree"
    assert agreement("inconclusive", "reproduced") == "not decided"
    assert agreement("not testable", "reproduced") == "not measured"
    assert agreement("not testable", "not testable") == "neither testable"
    assert agreement("reproduced", "not measured") == "not measured"
    assert agreement("sync part holds (claim: x)", "sync part undecided") == "not decided"
    assert agreement("reproduced", "sync part holds") == "not measured"


def test_an_earlier_look_of_a_search_is_superseded_by_the_later_look(tmp_path):
    """A first look (seeds 0-2) whose cell does not degrade, then a second look of the same search (the same runs and
    seeds 3-5) whose cell does: the claim is read from the second look alone and judged on its comparison (seeds
    3-5); the first is named as superseded, never as "not testable"."""
    sync, stale = [0.60, 0.61, 0.59, 0.60, 0.62, 0.60], [0.60, 0.45, 0.62, 0.45, 0.47, 0.44]
    looks = {"a_look1": "[0, 1, 2]", "b_look2": "[0, 1, 2, 3, 4, 5]"}
    runs = tmp_path / "runs"
    for name, seeds in looks.items():
        text = SWEEP.replace("seeds = [0, 1, 2]\n[compare]", f"seeds = {seeds}\n[compare]")
        (tmp_path / f"{name}.toml").write_text(text.replace('"decoupled_ppo"]\nseeds = [0, 1, 2]', '"decoupled_ppo"]\nseeds = [3, 4, 5]'))
        sweep = study.load_sweep(tmp_path / f"{name}.toml")
        for run in study.search_runs(sweep):
            _finish(runs, run, (sync if run.arm == "sync" or run.eta == 2 else stale)[run.seed])
        rep = study.collect(sweep, runs)
        for run in study.compare_runs(sweep, 4, 1e-3) if rep.chosen else []:
            if run.arm in sweep.recipes:
                _finish(runs, run, sync[run.seed])
        study.write_report(sweep, study.collect(sweep, runs), tmp_path / "results/llm/study" / name, "test")
    first = json.loads((tmp_path / "results/llm/study/a_look1/study.json").read_text())
    assert first["chosen"] is None and first["verdict"].startswith("not testable")  # the first look alone
    row = llm_rows(tmp_path, {"AREAL-1": "reproduced"}, 200.0)[2]
    assert row["real"] not in ("not testable", "not measured") and "b_look2/study.json: error" in row["evidence"]
    assert "a_look1/study.json superseded by " in row["evidence"] and "its 9 search runs are among that study's 18" in (
        row["evidence"])
    assert "a_look1/study.json: not testable" not in row["evidence"]
