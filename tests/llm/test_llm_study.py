"""The promotion study: the sweep file's checks, the fixed search rule, run keys, and cached, resumable runs."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from llm_scale import study
from testbed.util import stats

ROOT = Path(__file__).resolve().parents[2]
DRY = ROOT / "sweeps" / "llm" / "dry_tiny.toml"


@pytest.mark.parametrize("name", ["promotion.toml", "pilot_cpu.toml", "dry_tiny.toml"])
def test_the_shipped_sweep_files_load(name):
    sweep = study.load_sweep(ROOT / "sweeps" / "llm" / name)
    assert sweep.recipes == ("tis(c=2)+ess_lr", "dg", "gac", "decoupled_ppo") and sweep.base == "grpo"


def test_gac1s_sweep_holds_the_settings_its_header_fixes():
    """Minibatches of 8 sequences (the testbed regime's m / B_noise with the real model's B_noise), one epoch as
    in the testbed regime, exactly one lag, three seeds, and enough updates for a second half at full lag."""
    sweep = study.load_sweep(ROOT / "sweeps" / "llm" / "gac1_cpu.toml")
    t = sweep.train
    assert t["prompts_per_step"] * t["group_size"] // t["minibatches"] == 8 and t["epochs"] == 1
    assert sweep.etas == (1,) and t["lag_policy"] == "fixed" and len(sweep.search_seeds) == 3
    assert t["steps"] - t["steps"] // 2 >= sweep.etas[0]  # the second half's updates are all at full lag


def test_vcpo1s_sweep_holds_the_settings_its_header_fixes():
    """The testbed's VCPO-1 setting: one optimizer step per batch, an evaluation after every update on the same
    problems, a fixed lag; the degradation rule off (no difference of accuracies reaches 1, so no comparison)."""
    sweep = study.load_sweep(ROOT / "sweeps" / "llm" / "vcpo1_cpu.toml")
    t = sweep.train
    assert t["epochs"] == t["minibatches"] == 1 and sweep.eval_every == 1 and t["eval_size"] == 32
    assert sweep.etas == (4,) and t["lag_policy"] == "fixed" and sweep.lrs == (1e-4, 5e-5, 3e-5)
    assert sweep.search_seeds == (0, 1, 2) and sweep.min_drop == 1.0
    assert t["steps"] >= 12  # a collapse needs 3 updates of history before its 3-update window


def test_vcpo1s_second_look_differs_from_the_first_only_where_its_header_says():
    """Twice the updates, the first look's one lr whose runs did not collapse before version 6, new seeds (no run
    shared with the first look, whose runs it is read with); every other setting and the rule as in the first."""
    first, second = (study.load_sweep(ROOT / "sweeps" / "llm" / n) for n in ("vcpo1_cpu.toml", "vcpo1_cpu_look2.toml"))
    assert second.train["steps"] == 2 * first.train["steps"] and second.lrs == (3e-5,) and 3e-5 in first.lrs
    assert second.search_seeds == tuple(range(3, 11)) and not set(second.search_seeds) & set(first.search_seeds)
    assert {k: v for k, v in second.train.items() if k != "steps"} == {k: v for k, v in first.train.items() if k != "steps"}
    assert (second.etas, second.base, second.min_drop, second.eval_every) == (first.etas, first.base, first.min_drop,
                                                                           first.eval_every)
    assert not {r.key for r in study.search_runs(first)} & {r.key for r in study.search_runs(second)}


def test_the_gpu_sized_study_differs_from_the_full_one_only_where_its_header_says():
    """One search cell (the full grid's largest eta and lr), half the updates, no checkpoints, no gradient clipping,
    the two recipes the real-LLM column reads; every other training setting, the size rule and the search seeds as
    in promotion.toml."""
    gpu, full = (study.load_sweep(ROOT / "sweeps" / "llm" / n) for n in ("promotion_gpu.toml", "promotion.toml"))
    assert (gpu.etas, gpu.lrs) == ((max(full.etas),), (max(full.lrs),)) and gpu.recipes == ("decoupled_ppo", "gac")
    assert gpu.train["steps"] * 2 == full.train["steps"] and gpu.train["checkpoint_every"] == 0
    fixed = ("steps", "checkpoint_every", "keep_checkpoints", "max_grad_norm")  # its runs are unclipped (pinned 0)
    assert gpu.train["max_grad_norm"] == 0.0 and "max_grad_norm" not in full.train  # the full study clips (default)
    assert {k: v for k, v in gpu.train.items() if k not in fixed} == {k: v for k, v in full.train.items() if k not in fixed}
    assert (gpu.base, gpu.min_drop, gpu.min_se, gpu.last_evals, gpu.eval_every) == (
        full.base, full.min_drop, full.min_se, full.last_evals, full.eval_every)
    assert gpu.search_seeds == full.search_seeds


def test_the_gpu_studys_second_look_adds_seeds_to_the_first_and_reads_the_spending_boundary():
    """Its runs start with the first look's (the same keys: none is rerun) and add seeds 3-8; everything but the
    seeds and the boundary is the first look's; min_se is the second boundary of a 0.04 one-sided budget whose
    first look spent 1 - Phi(2) at information fraction 3 / 9 (Lan-DeMets; the correlation of the two looks'
    z statistics is sqrt(3 / 9)), rounded up to two decimals."""
    from scipy import stats as st
    from scipy.optimize import brentq

    first, second = (study.load_sweep(ROOT / "sweeps" / "llm" / n) for n in ("promotion_gpu.toml", "promotion_gpu_look2.toml"))
    keys_first, keys_second = ([r.key for r in study.search_runs(s)] for s in (first, second))
    assert keys_second[: len(keys_first)] == keys_first and len(keys_second) == 3 * len(keys_first)
    assert second.search_seeds == tuple(range(9)) and first.search_seeds == (0, 1, 2)
    assert (second.train, second.etas, second.lrs, second.base, second.min_drop, second.last_evals, second.recipes) == (
        first.train, first.etas, first.lrs, first.base, first.min_drop, first.last_evals, first.recipes)
    r = math.sqrt(3 / 9)
    both = st.multivariate_normal(mean=[0.0, 0.0], cov=[[1.0, r], [r, 1.0]], seed=0)
    spent_first = st.norm.sf(first.min_se)
    c = brentq(lambda c: st.norm.cdf(first.min_se) - both.cdf([first.min_se, c]) - (0.04 - spent_first), 1.0, 4.0)
    assert c == pytest.approx(2.008, abs=2e-3) and second.min_se == math.ceil(c * 100) / 100


def test_the_cpu_study_searches_vcpo1s_runs_by_the_full_studys_rule():
    """Its search runs are VCPO-1's (the same run keys, so none is rerun), judged by promotion.toml's rule."""
    cpu, vcpo1, full = (study.load_sweep(ROOT / "sweeps" / "llm" / n)
                        for n in ("promotion_cpu.toml", "vcpo1_cpu.toml", "promotion.toml"))  # fmt: skip
    assert [r.key for r in study.search_runs(cpu)] == [r.key for r in study.search_runs(vcpo1)]
    assert (cpu.min_drop, cpu.min_se, cpu.last_evals) == (full.min_drop, full.min_se, full.last_evals)
    assert cpu.recipes == ("decoupled_ppo", "gac") and cpu.compare_seeds == cpu.search_seeds == (0, 1, 2)


def test_the_full_study_has_three_seeds_and_the_rule_of_the_design():
    sweep = study.load_sweep(ROOT / "sweeps" / "llm" / "promotion.toml")
    assert len(sweep.search_seeds) >= 3 and len(sweep.etas) * len(sweep.lrs) == 9
    assert (sweep.min_drop, sweep.min_se, sweep.alpha) == (0.03, 2.0, 0.05)  # Holm over the 9 cells
    assert len(sweep.fresh_seeds) == len(sweep.compare_seeds) >= sweep.min_seeds >= 10  # fresh seeds only
    assert (sweep.threshold, sweep.promote_alpha, sweep.gap_tol) == (0.5, 0.05, 0.02)
    assert sweep.train["epochs"] * sweep.train["minibatches"] > 1  # K x N steps per batch


@pytest.mark.parametrize(
    "text, message",
    [
        ("[train]\neval_every = 1\nrecipe = 'pg'\n", "may not set ['recipe']"),
        ("[train]\neval_every = 1\nbogus = 3\n", "unknown setting(s) ['bogus']"),
        ("[train]\neval_every = 0\n", "eval_every must be >= 1"),
        ("[train]\neval_every = 1\n[search]\nseeds = [0]\n", "at least 2 seeds"),
        ("[train]\neval_every = 1\n[compare]\nrecipes = ['nope']\n", "nope"),
        ("[oops]\n", "unknown table(s) ['oops']"),
    ],
)
def test_bad_sweep_files_are_one_line_errors(tmp_path, capsys, text, message):
    path = tmp_path / "s.toml"
    path.write_text(text)
    assert study.main([str(path), "--plan", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_the_search_rule_needs_both_the_drop_and_two_standard_errors_of_the_paired_difference():
    def seeds(*values):
        return dict(enumerate(values))

    clear = study.degrades(seeds(0.50, 0.62, 0.38), seeds(0.40, 0.53, 0.27), 0.03, 2.0)  # differences .10 .09 .11
    assert clear["degrades"] and clear["drop"] == pytest.approx(0.10) and clear["pairs"] == 3
    assert clear["drop_se"] == pytest.approx(0.01 / math.sqrt(3))  # sd of the differences 0.01
    noisy = study.degrades(seeds(0.70, 0.30, 0.50), seeds(0.40, 0.42, 0.38), 0.03, 2.0)  # drop 0.10, SE 0.12
    assert not noisy["degrades"]
    small = study.degrades(seeds(0.50, 0.52, 0.48), seeds(0.48, 0.50, 0.46), 0.03, 2.0)  # exact, but 0.02 < 0.03
    assert not small["degrades"]
    assert not study.degrades(seeds(0.5), seeds(0.1), 0.03, 2.0)["degrades"]  # one pair: no standard error
    unpaired = study.degrades({0: 0.5, 1: 0.6}, {1: 0.4, 2: 0.3}, 0.03, 2.0)  # only seed 1 in both arms
    assert unpaired["pairs"] == 1 and not unpaired["degrades"]
    # equal differences of one problem in 16 (SE 0) are not a degradation: the evaluation's binomial noise is the floor
    steps = study.degrades(seeds(0.5625, 0.625), seeds(0.5, 0.5625), 0.03, 2.0, eval_problems=16)
    assert not steps["degrades"] and steps["drop_se"] == pytest.approx(math.sqrt((0.59375 * 0.40625 + 0.53125 * 0.46875) / 32))


def test_runs_are_keyed_by_their_configuration():
    sweep = study.load_sweep(DRY)
    search = study.search_runs(sweep)
    compare = study.compare_runs(sweep, sweep.etas[0], sweep.lrs[0])
    keys = {r.key for r in search}
    assert len(keys) == len(search)  # every run distinct
    shared = [r for r in compare if r.arm in (study.SYNC, study.STALE)]
    assert not {r.key for r in shared} & keys  # fresh seeds: the comparison's sync and stale runs are its own
    again = study.make_run(sweep, "compare", study.SYNC, sweep.etas[0], sweep.lrs[0], sweep.search_seeds[0])
    assert again.key in keys  # a comparison seed that the search used is the search's run (never rerun)
    sync = next(r for r in search if r.arm == study.SYNC)
    argv = sync.argv(Path("OUT"))
    assert argv[:1] == ["train"] and "--mode" in argv and argv[argv.index("--mode") + 1] == "sync"
    assert argv[argv.index("--max-staleness") + 1] == "0"


def test_a_run_counts_as_done_only_when_finished_through_its_last_version(tmp_path):
    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "finished", "of_steps": 4, "device": "cpu"}))
    (run / "eval.csv").write_text("version,eval_reward\n0,0.1\n2,0.2\n")
    assert study.run_result(run) is None  # the evaluation at version 4 is missing: not complete
    (run / "eval.csv").write_text("version,eval_reward\n0,0.1\n2,0.2\n4,0.4\n")
    assert study.run_result(run, last_evals=2)["accuracy"] == pytest.approx(0.3)
    (run / "summary.json").write_text(json.dumps({"status": "stopped", "of_steps": 4}))
    assert study.run_result(run) is None
    (run / "summary.json").write_text(json.dumps({"status": "diverged", "of_steps": 4}))
    diverged = study.run_result(run)
    assert diverged["diverged"] and math.isnan(diverged["accuracy"])  # done, and never rerun, but no accuracy
    assert math.isnan(stats.mean_se([0.5, math.nan, 0.4])[0])


def test_a_run_started_by_other_code_is_no_result_and_is_trained_afresh(tmp_path):
    """run_result with the run's recipe: a run whose code.json names other code is not a result; without a
    code.json (a run from before runs recorded their code) it is not judged; `execute` trains the former afresh."""
    from llm_scale.trainer import CODE_FILE, run_code
    from testbed.stabilizers import build

    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "finished", "of_steps": 2}))
    (run / "eval.csv").write_text("version,eval_reward\n0,0.1\n2,0.5\n")
    assert study.run_result(run, recipe="grpo")["accuracy"] == 0.5  # no record of its code: not judged
    (run / CODE_FILE).write_text(json.dumps(run_code(build("grpo"))))
    assert study.run_result(run, recipe="grpo")["accuracy"] == 0.5
    assert study.run_result(run, recipe="tis(c=2)") is None  # a recipe whose components the record does not hold
    (run / CODE_FILE).write_text(json.dumps({**run_code(build("grpo")), "trainer": "0" * 16}))
    assert study.run_result(run, recipe="grpo") is None and study.run_result(run)["accuracy"] == 0.5
    sweep = study.load_sweep(DRY)
    first = study.search_runs(sweep)[0]
    moved = tmp_path / "runs" / first.key
    moved.parent.mkdir()
    run.rename(moved)
    (moved / CODE_FILE).write_text(json.dumps({**run_code(build(first.recipe)), "trainer": "0" * 16}))
    log = io.StringIO()
    assert study.execute([first], tmp_path / "runs", budget_s=-1.0, parallel=1, device=None, log=log) == 0  # too late
    assert not moved.exists()  # removed, to be trained afresh
    assert "ran other code (trainer): trained afresh" in log.getvalue()


@pytest.mark.parametrize("cosines, late", [((0.9, 0.9, 0.1, "nan"), 0.1), ((0.9, 0.2, 0.4), 0.4),
                                           ((0.9, 0.9, "nan", "nan"), math.nan)])
def test_the_late_within_batch_cosine_is_the_nan_aware_mean_of_the_second_half_of_the_updates(tmp_path, cosines,
                                                                                              late):
    run = tmp_path / "r"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"status": "finished", "of_steps": 2, "device": "cpu"}))
    (run / "eval.csv").write_text("version,eval_reward\n0,0.1\n2,0.2\n")
    (run / "metrics.csv").write_text("step,grad_cos_within\n" + "".join(f"{i},{c}\n" for i, c in enumerate(cosines)))
    got = study.run_result(run)["late_grad_cos_within"]
    assert got == pytest.approx(late) if math.isfinite(late) else math.isnan(got)


@pytest.mark.slow
def test_dry_study_is_cached_and_resumes_across_invocations(tmp_path):
    """Cut by a short budget, the study resumes where it stopped; a finished study reruns nothing."""
    args = [str(DRY), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--force-cell", "1,1e-3"]
    assert study.main([*args, "--budget-s", "25"]) == 0
    first = json.loads((tmp_path / "out" / "study.json").read_text())["runs_finished"]
    for _ in range(12):
        assert study.main([*args, "--budget-s", "120", "--parallel", "2"]) == 0
        record = json.loads((tmp_path / "out" / "study.json").read_text())
        if record["runs_finished"] == record["runs_planned"]:
            break
    assert first < record["runs_finished"] == record["runs_planned"] == 16
    runs = (tmp_path / "out" / "runs.csv").read_text()
    assert runs.count(",cpu,") == 16  # each run records its device
    mtimes = {p: p.stat().st_mtime for p in (tmp_path / "runs").glob("*/summary.json")}
    assert study.main([*args, "--budget-s", "60"]) == 0
    assert {p: p.stat().st_mtime for p in (tmp_path / "runs").glob("*/summary.json")} == mtimes


def test_updates_table_puts_each_updates_metrics_on_the_version_it_made(tmp_path):
    """updates.csv: version v carries its evaluation and the metrics of update v - 1 (none at v = 0); a version
    without an evaluation has NaN there, never 0."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "eval.csv").write_text("version,eval_reward\n0,0.5\n2,0.25\n")
    (run / "metrics.csv").write_text("step,staleness_ess,grad_norm_raw,loss\n0,1.0,2.0,0.1\n1,0.5,8.0,0.2\n")
    rows = study.run_updates(run)
    assert [r["version"] for r in rows] == [0, 1, 2]
    assert rows[0]["eval_reward"] == 0.5 and math.isnan(rows[0]["staleness_ess"]) and math.isnan(rows[0]["grad_norm_raw"])
    assert math.isnan(rows[1]["eval_reward"]) and (rows[1]["staleness_ess"], rows[1]["grad_norm_raw"]) == (1.0, 2.0)
    assert (rows[2]["eval_reward"], rows[2]["staleness_ess"], rows[2]["grad_norm_raw"], rows[2]["loss"]) == (0.25, 0.5, 8.0, 0.2)
    assert math.isnan(rows[2]["reward_mean"])  # a column the run did not log
    assert study.run_updates(tmp_path / "absent") == []


def test_search_only_runs_the_search_and_no_comparison_even_where_a_cell_is_chosen(tmp_path):
    """--search-only: the search's runs finish and are judged; no comparison run starts, though the cell is forced."""
    args = [str(DRY), "--runs", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--force-cell", "1,1e-3"]
    assert study.main([*args, "--budget-s", "300", "--parallel", "2", "--search-only"]) == 0
    record = json.loads((tmp_path / "out" / "study.json").read_text())
    searched = {run.key for run in study.search_runs(study.load_sweep(DRY))}
    assert record["runs_finished"] == len(searched) == 4 < record["runs_planned"]
    assert {p.name for p in (tmp_path / "runs").iterdir() if p.is_dir()} == searched


# -- the promotion rule -------------------------------------------------------------------------------
RULE = {"threshold": 0.5, "alpha": 0.05, "min_seeds": 10, "gap_tol": 0.02}


def _arms(rng, n, gap, fraction, sd=0.05):
    """Paired accuracies of sync, stale and a recipe closing ``fraction`` of ``gap``: a shared seed effect plus noise."""
    base = 0.5 + 0.1 * rng.standard_normal(n)
    sync, stale = base + sd * rng.standard_normal(n), base - gap + sd * rng.standard_normal(n)
    recipe = base - gap + fraction * gap + sd * rng.standard_normal(n)
    return (dict(enumerate(a.tolist())) for a in (sync, stale, recipe))


def _rate(verdict, reps, **kw):
    import numpy as np

    rng = np.random.default_rng(12345)
    return sum(study.promotion(*_arms(rng, **kw), **RULE)["verdict"] == verdict for _ in range(reps)) / reps


def test_a_recipe_on_the_threshold_is_promoted_at_most_at_the_rules_level():
    """Simulated null: the recipe closes exactly the threshold's half of a real gap, 10 seeds. The rule promotes it
    at most alpha = 5% of the time (+3 Monte Carlo SE); and it does use its level (>= 3%), so the bound is not
    met by never promoting."""
    reps = 3000
    rate = _rate("promote", reps, n=10, gap=0.1, fraction=0.5)
    slack = 3 * math.sqrt(0.05 * 0.95 / reps)
    assert 0.03 <= rate <= 0.05 + slack


def test_no_gap_is_never_a_promotion_and_a_real_rescue_is():
    reps = 1000
    assert _rate("promote", reps, n=10, gap=0.0, fraction=1.0) <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    assert _rate("promote", 300, n=10, gap=0.2, fraction=1.0) >= 0.9  # power where the recipe closes the whole gap
    assert _rate("do not promote", 300, n=10, gap=0.2, fraction=0.0) >= 0.9


def test_the_search_spends_its_error_over_its_cells():
    """Nine null cells (no drop), three seeds each: with Holm the chance that any cell degrades stays within
    alpha; the same cells judged each at alpha would find one about a third of the time."""
    import numpy as np

    rng = np.random.default_rng(7)
    reps, any_holm, any_raw = 2000, 0, 0
    for _ in range(reps):
        rows = []
        for _cell in range(9):
            sync, stale = rng.normal(0.5, 0.05, 3), rng.normal(0.5, 0.05, 3)
            row = study.degrades(dict(enumerate(sync)), dict(enumerate(stale)), 0.0, 0.0, alpha=0.05)
            rows.append({**row, "complete": True})
        any_raw += any(r["degrades"] for r in rows)
        study.holm_cells(rows, 0.05)
        any_holm += any(r["degrades"] for r in rows)
    assert any_holm / reps <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)
    assert any_raw / reps >= 0.25


def test_promotion_verdicts_follow_the_rule():
    seeds = range(10)
    sync, stale = {k: 0.6 + 0.01 * (k % 3) for k in seeds}, {k: 0.4 + 0.01 * (k % 2) for k in seeds}
    full = study.promotion(sync, stale, {k: sync[k] - 0.005 * (k % 2) for k in seeds}, **RULE)
    assert full["verdict"] == "promote" and full["fraction_lo"] > 0.5 and full["pairs"] == 10
    none = study.promotion(sync, stale, {k: stale[k] + 0.005 * (k % 2) for k in seeds}, **RULE)
    assert none["verdict"] == "do not promote" and none["fraction_hi"] < 0.5
    few = study.promotion({k: sync[k] for k in range(5)}, stale, sync, **RULE)
    assert few["verdict"] == "too few seeds" and few["pairs"] == 5 and few["fraction_closed"] == pytest.approx(1.0)
    flat = study.promotion(stale, stale, sync, **RULE)  # sync = stale: nothing to close
    assert flat["verdict"] == "no gap to close" and math.isnan(flat["fraction_closed"]) and flat["gap"] == 0.0
    assert study.promotion({}, {}, {}, **RULE)["verdict"] == "too few seeds"
    assert "no gap to close" in study.format_promotion(flat) and "nan" in study.format_promotion(flat)


@pytest.mark.parametrize("table, message", [("[compare]\nmin_seeds = 3\n", "min_seeds must be >= 10"),
                                            ("[compare]\nthreshold = 1.5\n", "threshold must lie in [0, 1]"),
                                            ("[search]\nalpha = 0.5\n", "alpha must lie in (0, 0.5)"),
                                            ("[compare]\ngap_tol = 0\n", "gap_tol must be > 0")])
def test_a_bad_promotion_rule_is_a_one_line_error(tmp_path, capsys, table, message):
    path = tmp_path / "s.toml"
    path.write_text("[train]\neval_every = 1\n" + table)
    assert study.main([str(path), "--plan", "--runs", str(tmp_path / "r"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err


def test_a_forced_cell_without_a_gap_prints_nan_and_no_gap(tmp_path, capsys):
    """The comparison's table on finished runs where sync = stale: every recipe's fraction is NaN, "no gap to close"."""
    sweep = study.load_sweep(DRY)
    root = tmp_path / "runs"
    for run in study.search_runs(sweep) + study.compare_runs(sweep, 1, 1e-3):
        d = root / run.key
        d.mkdir(parents=True, exist_ok=True)
        (d / "summary.json").write_text(json.dumps({"status": "finished", "of_steps": 4, "device": "cpu"}))
        acc = 0.25 if run.arm == "dg" else 0.125
        (d / "eval.csv").write_text(f"version,eval_reward\n0,0.0\n4,{acc}\n")
    rep = study.collect(sweep, root, force=(1, 1e-3))
    text = study.format_report(rep)
    recipes = [r for r in rep.compare if "verdict" in r]
    assert len(recipes) == 4 and all(r["verdict"] == "no gap to close" and math.isnan(r["fraction_closed"]) for r in recipes)
    assert text.count("fraction closed nan: no gap to close") == 4 and "1.00" not in text


def test_the_plan_costs_the_unique_runs_at_the_references_median_scaled_by_updates(tmp_path):
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "study.json").write_text(json.dumps({"sweep": str(DRY)}))  # 4 updates per run
    (ref / "runs.csv").write_text("key,finished,wall_seconds,device_name\na,True,100,GPU X\nb,True,300,GPU X\n"
                                  "c,True,200,GPU X\nd,False,,GPU X\n")
    sweep = study.load_sweep(DRY)
    line = study.plan_cost(sweep, ref / "runs.csv", parallel=4)
    # dry_tiny: 2 sync + 2 stale search runs, 6 arms x 2 fresh seeds; 16 runs, 4 at a time, 200 s each
    assert line.startswith("planned runs: 4 search + 12 comparison = 16; at 200 s per run (3 finished runs")
    assert "on GPU X" in line and line.endswith(f"about {4 * 200 / 3600:.1f} device hours")


@pytest.mark.parametrize("name, keys", [("vcpo1_cpu", "results/llm/vcpo1_cpu"), ("gac1_cpu", "results/llm/gac1_cpu"),
                                        ("promotion_gpu_look2", "results/llm/study/promotion_gpu_look2"),
                                        ("promotion_cpu", "results/llm/study/promotion_cpu")])
def test_studies_already_run_keep_their_run_keys(name, keys):
    """Their sweep files pin max_grad_norm = 0 (how their runs were made): every search run's key is one that the
    committed runs.csv holds, so no run is redone or mixed with a clipped one."""
    import pandas as pd

    sweep = study.load_sweep(ROOT / "sweeps" / "llm" / f"{name}.toml")
    assert sweep.train["max_grad_norm"] == 0.0
    committed = set(pd.read_csv(ROOT / keys / "runs.csv")["key"])
    assert {r.key for r in study.search_runs(sweep)} <= committed
    clipped = study.make_run(study.load_sweep(DRY), "search", study.SYNC, 1, 1e-3, 0)
    assert dict(clipped.options)["max_grad_norm"] == 1.0 and "--max-grad-norm" in clipped.argv(Path("o"))


def test_late_split_half_cosine_reads_the_second_half_of_the_updates(tmp_path):
    """Updates 0..8 (n = 9): the window is updates 5..8 (the last n // 2), its pairs start at the window's second step."""
    from llm_scale.study import late_split_half_cosine
    from testbed.stabilizers import fingerprint as fp

    rows = ["update,grad_dot_prev,grad_half_dot"] + [f"{u},{10.0 + u},{1.0 + u}" for u in range(9)]
    (tmp_path / "grad_steps.csv").write_text("\n".join(rows) + "\n")
    want = fp.consecutive_cosine_split_half([16.0, 17.0, 18.0], [6.0, 7.0, 8.0, 9.0])
    assert late_split_half_cosine(tmp_path / "grad_steps.csv") == pytest.approx(want)
    assert want == pytest.approx(51.0 / math.sqrt(4 * 21.0 * 4 * 24.0))
    (tmp_path / "plain.csv").write_text("update,grad_cos_prev\n0,0.5\n")  # written without --grad-split-half
    assert math.isnan(late_split_half_cosine(tmp_path / "plain.csv"))
    assert math.isnan(late_split_half_cosine(tmp_path / "absent.csv"))


COMMITTED = sorted(p.parent.relative_to(ROOT).as_posix() for p in (ROOT / "results" / "llm").rglob("study.json"))


@pytest.mark.parametrize("where", COMMITTED)
def test_every_committed_run_is_one_its_file_still_plans(where):
    """Every run of a committed study or pilot table (runs.csv ``key``) is one that its sweep file (study.json
    ``sweep``) still plans: the search and, at the chosen cell, the comparison of a study; the pilot's cells and arms
    (`pocket_design.pilot_plan`) of a pilot. A run key that moved would retrain the run, or read another's result."""
    import pandas as pd

    from llm_scale.pocket_design import load_pilot, pilot_plan

    info = json.loads((ROOT / where / "study.json").read_text())
    committed = set(pd.read_csv(ROOT / where / "runs.csv")["key"])
    if "arms" in info:  # a pilot
        sweep, cells, _ = load_pilot(str(ROOT / info["sweep"]))
        planned = {run.key for run, *_ in pilot_plan(sweep, cells, tuple(info["arms"]))}
    else:
        sweep = study.load_sweep(ROOT / info["sweep"])
        planned = {r.key for r in study.search_runs(sweep)}
        if info.get("chosen"):
            planned |= {r.key for r in study.compare_runs(sweep, int(info["chosen"]["eta"]), float(info["chosen"]["lr"]))}
    assert committed and committed <= planned, sorted(committed - planned)[:3]


@pytest.mark.parametrize("argv, want", [(["--parallel", "x"], "error: --parallel: invalid int value: 'x'"),
                                        ([], "error: the following arguments are required: sweep")])
def test_a_bad_study_command_line_is_one_line(argv, want, capsys):
    assert study.main(argv) == 2
    assert capsys.readouterr().err == want + "\n"
