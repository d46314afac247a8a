"""The model ladder: the rungs' fingerprints like for like, the pocket LM's cells (figures/llm_column/), and the
pilot's learning-rate rule and power (llm_scale/pocket_design/design.py), on hand-made files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from figures.llm_column import fingerprints, llm_rows, markdown, pocket_cells, rung_fingerprints
from llm_scale.pocket_design import choose_lr, collapsed, design, sync_health
from testbed.util.stats import seeds_needed


def _fp(model: str, date: str, ess1: float, entropy: float = 1.0) -> dict:
    return {"model": model, "task": "arithmetic", "date": date, "noise_scale": 50.0, "entropy": entropy,
            "zero_advantage_frac": 0.5, "truncated_frac": 0.25, "cosine_by_minibatch": [],
            "staleness": [{"lag": 1, "ess_seq": ess1, "ess_token": 0.99, "clip_frac": 0.01},
                          {"lag": 4, "ess_seq": ess1 / 2, "ess_token": 0.9, "clip_frac": 0.1}],
            "extra": {"max_new_tokens": 23, "length_mean": 12.0, "lr": 1e-4, "update_sequences": 16, "reward_mean": 0.2}}  # fmt: skip


def _write(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_pocket_fingerprints_are_a_rung_of_their_own(tmp_path):
    _write(tmp_path / "results/llm/fingerprint/smollm2-135m-instruct__arithmetic.json", _fp("smollm2-135m-instruct", "2026-01-01", 0.88, 1.9))
    pocket = _fp("pocket-arithmetic", "2026-01-02", 0.5, 0.7)
    pocket["extra"]["staleness_by_lr"] = {"0.001": [{"lag": 1, "ess_seq": 0.1, "ess_token": 0.5, "clip_frac": 0.3}]}
    _write(tmp_path / "results/llm/fingerprint/pocket/version0/pocket-arithmetic__arithmetic.json", pocket)
    assert [f["model"] for f in fingerprints(tmp_path)] == ["smollm2-135m-instruct"]  # the web-pretrained rung alone
    rows = {(r["rung"], r["phase"]): r for r in rung_fingerprints(tmp_path)}
    pocket = rows[("pocket LM", "version 0")]
    assert pocket["ess_seq"] == {1: 0.5, 2: pocket["ess_seq"][2], 4: 0.25} and math.isnan(pocket["ess_seq"][2])
    assert pocket["entropy"] == 0.7 and pocket["budget"] == 23 and pocket["update_sequences"] == 16
    assert rows[("SmolLM2", "version 0")]["entropy"] == 1.9
    other = rows[("pocket LM", "version 0, lr 0.001")]  # an extra learning rate: its staleness, the batch's stats
    assert other["lr"] == 1e-3 and other["ess_seq"][1] == 0.1 and other["entropy"] == 0.7
    assert rows[("pocket LM", "learning phase")]["file"] is None
    assert rows[("testbed", "regime")]["file"] is None
    text = "\n".join(markdown(llm_rows(tmp_path, {}, 200.0), tmp_path))
    assert "| pocket LM | version 0 | 23 | 12.0 | 0.0001 x 16 | 0.50/-/0.25 | 0.99/-/0.90 | 0.01/-/0.10 | 0.70 |" in text


def test_pocket_cells_say_what_each_design_needs(tmp_path):
    (tmp_path / "sweeps/llm").mkdir(parents=True)
    (tmp_path / "sweeps/llm/pocket_prereg.toml").write_text(
        'status = "draft"\npilot = "p/design.json"\n[claims.GAC-1]\ndesign = "D1"\nrule = "R1"\npower = "P1"\n'
        'gpu_command = "G1"\ngpu_cost = "C1"\n[claims.AREAL-1]\ndesign = "D2"\n')
    _write(tmp_path / "p/design.json", {"GAC-1": {"seeds": {"sync": 3, "stale": 7}, "cpu_hours": 1.25},
                                        "AREAL-1/GAC-2": {"seeds": None, "cpu_hours": None}})
    cells = pocket_cells(tmp_path)
    _write(tmp_path / "p/design.json", {"GAC-1": {"seeds": {"sync": 3, "stale": None}, "cpu_hours": None,
                                                  "seeds_either_way": {"sync": 3, "stale": 4}, "cpu_hours_either_way": 0.81}})  # fmt: skip
    assert "either way: 4 seeds per arm, 0.8 CPU-hours" in pocket_cells(tmp_path)["GAC-1"]["pocket_evidence"]
    assert cells["GAC-1"]["pocket"] == "not measured"
    assert "7 seeds per arm, 1.2 CPU-hours" in cells["GAC-1"]["pocket_evidence"]  # the larger arm's need
    assert cells["GAC-1"]["gpu"] == "not measured: needs G1 (C1)"
    assert "not computable from the pilot (its spread is undefined)" in cells["AREAL-1"]["pocket_evidence"]
    assert cells["VCPO-1"]["pocket_evidence"] == "no design in sweeps/llm/pocket_prereg.toml"


def test_collapse_rule_and_the_learning_rate_choice():
    assert collapsed([0.4, 0.5, 0.29])  # 0.21 below the best
    assert not collapsed([0.4, 0.5, 0.31, math.nan])
    health = [{"lr": 1e-4, "healthy": [True, True], "mean_gain": 0.05, "learns": True},
              {"lr": 3e-4, "healthy": [True, True], "mean_gain": 0.09, "learns": True},
              {"lr": 1e-3, "healthy": [True, False], "mean_gain": 0.2, "learns": False}]
    assert choose_lr(health)["lr"] == 3e-4  # the largest that learns; the unhealthy one never
    quiet = [{**h, "learns": False} for h in health]
    assert choose_lr(quiet)["lr"] == 3e-4  # no rate learns: the healthy one with the largest gain
    assert choose_lr([health[2]]) is None


def _pilot(tmp_path: Path) -> Path:
    rows, ups = [], []
    acc = {(1e-4, 0): (0.50, 0.45), (1e-4, 1): (0.54, 0.45), (1e-3, 0): (0.70, 0.60), (1e-3, 1): (0.66, 0.62)}
    for (lr, seed), (sync, stale) in acc.items():
        for arm, a in (("sync", sync), ("stale", stale)):
            key = f"{arm}{lr}{seed}"
            rows.append({"key": key, "stage": "search", "arm": arm, "eta": 4, "lr": lr, "seed": seed, "finished": True,
                         "accuracy": a, "diverged": False, "accuracy_v0": 0.4, "wall_seconds": 60.0,
                         "late_grad_cos_within": (0.05 if arm == "sync" else 0.4) + seed / 100})  # fmt: skip
            ups += [{"key": key, "version": v, "eval_reward": e} for v, e in ((0, 0.4), (10, math.nan), (20, a), (30, a))]
    p = tmp_path / "pilot"
    p.mkdir()
    pd.DataFrame(rows).to_csv(p / "runs.csv", index=False)
    pd.DataFrame(ups).to_csv(p / "updates.csv", index=False)
    (p / "study.json").write_text(json.dumps({"eval_problems": 512, "rule": {"last_evals": 2}}))
    return p


def test_pilot_design_numbers(tmp_path):
    p = _pilot(tmp_path)
    runs, ups = pd.read_csv(p / "runs.csv"), pd.read_csv(p / "updates.csv")
    health = {h["lr"]: h for h in sync_health(runs[runs["stage"] == "search"], ups, 256, 512)}
    se = math.sqrt((0.4 * 0.6 / 256 + 0.5 * 0.5 / 512 + 0.4 * 0.6 / 256 + 0.54 * 0.46 / 512) / 2 / 2)
    assert math.isclose(health[1e-4]["gain_se"], se) and math.isclose(health[1e-4]["mean_gain"], 0.12)
    out = design(p)
    assert out["chosen_lr"] == 1e-3 and out["chosen_learns"]
    # paired drops: lr 1e-4: 0.05, 0.09; lr 1e-3: 0.10, 0.04 -> pooled SD sqrt((0.0008 + 0.0018) / 2)
    assert math.isclose(out["AREAL-1/GAC-2"]["sd"], math.sqrt(0.0013)) and out["AREAL-1/GAC-2"]["df"] == 2
    floor = math.sqrt(2 * 0.68 * 0.32 / 512)  # sync score 0.68 at the chosen rate, 512 problems
    assert math.isclose(out["AREAL-1/GAC-2"]["binomial_floor_sd"], floor) and floor < math.sqrt(0.0013)
    assert math.isclose(out["seconds_per_update"], 2.0)  # 60 s over 30 updates
    assert out["VCPO-1"]["events"] == 0 and out["VCPO-1"]["needed_is_lower_bound"]
    assert out["stale_drops"] == pytest.approx([0.10, 0.04])  # at the chosen rate, by seed
    gac = out["GAC-1"]  # means at the chosen rate (1e-3), SDs pooled over the cell's rates: seeds 0, 1 differ by 0.01
    assert gac["mean"] == pytest.approx({"sync": 0.055, "stale": 0.405})
    assert gac["sd"]["sync"] == pytest.approx(math.sqrt(0.00005)) and gac["df"]["sync"] == 2
    assert gac["seeds_either_way"]["stale"] == seeds_needed(math.sqrt(0.00005), 0.205) == gac["seeds"]["stale"]


def test_transfer_output_command(tmp_path, monkeypatch, capsys):
    from figures.llm_column import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "claims.json").write_text(json.dumps({"llm": [{"id": "AREAL-1", "testbed": "reproduced"}]}))
    assert main(["--claims", "claims.json", "--out", "t.md"]) == 0
    text = (tmp_path / "t.md").read_text()
    assert "| AREAL-1 | reproduced | not measured | not measured | not measured: no GPU command in" in text
    assert "## Rungs' fingerprints, like for like" in text
    (tmp_path / "bad.json").write_text("[]")
    assert main(["--claims", "bad.json"]) == 2
    assert capsys.readouterr().err.strip() == "error: --claims 'bad.json' is not a claims report with an 'llm' list"


def test_pocket_setting_line_reads_the_chosen_setting(tmp_path):
    from figures.llm_column import pocket_setting

    (tmp_path / "sweeps/llm").mkdir(parents=True)
    (tmp_path / "sweeps/llm/pocket_prereg.toml").write_text('status = "draft"\npilot = "p/design.json"\n')
    _write(tmp_path / "p/design.json", {"chosen_cell": "b256", "chosen_lr": 1e-4, "chosen_learns": True, "stale_drops": [0.02, -0.01],
                                        "health": [{"cell": "b64", "lr": 1e-4, "gains": [0.5]},
                                                   {"cell": "b256", "lr": 1e-4, "gains": [0.137, 0.127], "mean_gain": 0.132, "gain_se": 0.027}]})  # fmt: skip
    assert pocket_setting(tmp_path) == ["", "Setting of the pocket LM's designs (p/design.json): b256, lr 0.0001; synchronous "
                                        "GRPO learns: greedy-accuracy gain per seed +0.137, +0.127, mean +0.132 (binomial SE "
                                        "0.027). Stale arm (naive GRPO, eta = 4) there: paired drop sync - stale per seed "
                                        "+0.020, -0.010."]  # fmt: skip


def test_lag_rule_takes_the_smallest_lag_that_degrades_the_baseline(tmp_path):
    from llm_scale.pocket_design import MARGIN, choose_lag

    def pilot(name: str, rows: list[tuple[str, int, int, float]], chosen: bool = False) -> Path:
        d = tmp_path / name
        d.mkdir()
        pd.DataFrame([{"key": f"{name}{i}", "stage": "search", "cell": "b256", "arm": arm, "eta": eta, "lr": 1e-4,
                       "seed": seed, "finished": True, "accuracy": acc} for i, (arm, eta, seed, acc) in enumerate(rows)]
                     ).to_csv(d / "runs.csv", index=False)
        if chosen:
            (d / "design.json").write_text(json.dumps({"chosen_cell": "b256", "chosen_lr": 1e-4}))
            (d / "study.json").write_text(json.dumps({"eval_problems": 512}))
        return d

    base = pilot("base", [("sync", 4, s, 0.56) for s in range(3)] + [("stale", 4, s, 0.56 + 0.01) for s in range(3)], True)
    lag8 = pilot("lag8", [("stale", 8, s, 0.56 - MARGIN + 0.005) for s in range(3)])
    lag16 = pilot("lag16", [("stale", 16, 0, 0.50), ("stale", 16, 1, 0.52), ("stale", 16, 2, 0.53)])
    res = choose_lag(base, [lag8, lag16])
    assert res["per_eta"][4]["mean_drop"] == pytest.approx(-0.01)
    assert res["per_eta"][8]["mean_drop"] == pytest.approx(MARGIN - 0.005)  # below the margin: not this lag
    assert res["per_eta"][16]["drops"] == pytest.approx([0.06, 0.04, 0.03]) and res["eta"] == 16
    floor = math.sqrt(2 * 0.56 * 0.44 / 512)  # the evaluation's binomial floor exceeds these drops' spread
    assert res["power"]["sd"] == pytest.approx(floor) and res["power"]["seeds"] == seeds_needed(floor, MARGIN)
    assert choose_lag(base, [lag8])["eta"] is None and "not testable" in choose_lag(base, [lag8])["reading"]
    twice = choose_lag(base, [lag8, lag16], min_drop=2 * MARGIN)  # the second registration's rule: eta 16's 0.043 < 0.06
    assert twice["eta"] is None and twice["min_drop"] == 2 * MARGIN and "does not degrade by 0.06" in twice["reading"]
    assert choose_lag(base, [lag16], min_drop=0.04)["eta"] == 16


def test_gac1_registered_seeds_decide_each_part_either_way():
    from llm_scale.pocket_design import BAND, gac1_seeds

    assert gac1_seeds(0.9, 0.05, "sync") == 3  # far from the band's edge: the floor of 3
    n = seeds_needed(0.1, abs(0.3 - BAND))
    assert gac1_seeds(0.3, 0.1, "stale") == min(10, max(3, n))
    assert gac1_seeds(-0.15, 0.05, "sync") == min(10, max(3, seeds_needed(0.05, 0.05)))  # the nearer edge is -0.2
    assert gac1_seeds(BAND + 0.001, 0.2, "stale") == 10  # the cap
    assert gac1_seeds(math.nan, 0.1, "sync") is None


def test_pocket_gac1_is_judged_by_the_testbeds_rule_on_its_confirmatory_runs(tmp_path):
    from figures.llm_column import POCKET_GAC1, pocket_gac1

    def runs(sync: list[float], stale: list[float], finished: bool = True, first: int = 100) -> None:
        for arm, vals in (("sync", sync), ("stale", stale)):
            d = tmp_path / POCKET_GAC1 / arm
            d.mkdir(parents=True, exist_ok=True)
            rows = [{"arm": arm, "eta": 4, "seed": first + i, "finished": finished, "late_grad_cos_split_half": v}
                    for i, v in enumerate(vals)]
            pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)

    prereg = {"common": {"seeds_from": 100}}
    runs([0.88, 0.86, 0.9], [0.6, 0.58, 0.62])  # aligned at sync: the sync part fails
    assert pocket_gac1(tmp_path, prereg)["pocket"] == "not reproduced"
    runs([0.01, -0.03, 0.02], [0.6, 0.58, 0.62])  # near orthogonal at sync, high when stale
    cell = pocket_gac1(tmp_path, prereg)
    assert cell["pocket"] == "reproduced" and "seeds 100..102" in cell["pocket_evidence"]
    runs([0.01, -0.03, 0.02], [0.6, 0.58, 0.62], finished=False)
    assert pocket_gac1(tmp_path, prereg) is None  # not every run has finished
    runs([0.01, -0.03, 0.02], [0.6, 0.58, 0.62], first=0)
    assert pocket_gac1(tmp_path, prereg) is None  # exploratory seeds are never read


def test_pocket_rescue_is_judged_by_the_testbeds_rule_on_its_confirmatory_runs(tmp_path):
    from figures.llm_column import POCKET_RESCUE, pocket_cells, pocket_rescue

    noise = [0.004, -0.006, 0.002, 0.0, -0.003, 0.005, -0.001, 0.003, -0.004]

    def runs(scores: dict[str, float], finished: bool = True, first: int = 100, diverged: str = "",
             spread: float = 0.0) -> None:
        d = tmp_path / POCKET_RESCUE
        d.mkdir(parents=True, exist_ok=True)
        rows = [{"arm": arm, "eta": 0 if arm == "sync" else 8, "seed": first + i, "finished": finished,
                 "diverged": arm == diverged and i == 0, "accuracy": score + e + (spread * (-1) ** i if arm == "stale" else 0)}
                for arm, score in scores.items() for i, e in enumerate(noise)]  # fmt: skip
        pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
        (d / "study.json").write_text('{"eval_problems": 512}')

    prereg = {"common": {"seeds_from": 100}, "claims": {"AREAL-1": {"margin": 0.03}, "GAC-2": {"margin": 0.03}}}
    assert pocket_rescue(tmp_path, prereg, "GAC-2") is None  # nothing tabulated
    runs({"sync": 0.55, "stale": 0.48, "decoupled_ppo": 0.55, "gac": 0.48})
    cell = pocket_rescue(tmp_path, prereg, "AREAL-1")
    assert cell["pocket"] == "reproduced" and "seeds 100..108, 27 runs" in cell["pocket_evidence"]
    assert pocket_rescue(tmp_path, prereg, "GAC-2")["pocket"] == "not reproduced"  # no better than stale grpo
    cells = pocket_cells(tmp_path)  # the transfer table's cells read the same runs (no registration: not measured)
    assert cells["AREAL-1"]["pocket"] == "not measured"
    runs({"sync": 0.55, "stale": 0.55, "decoupled_ppo": 0.55, "gac": 0.55})
    assert pocket_rescue(tmp_path, prereg, "GAC-2")["pocket"] == "not testable"  # grpo does not degrade at the lag
    runs({"sync": 0.55, "stale": 0.522, "decoupled_ppo": 0.55, "gac": 0.55}, spread=0.03)
    cell = pocket_rescue(tmp_path, prereg, "GAC-2")  # a drop below the margin whose interval reaches it
    assert cell["pocket"] == "inconclusive" and "grpo degrades at eta8" in cell["pocket_evidence"]
    runs({"sync": 0.55, "stale": 0.48, "decoupled_ppo": 0.55, "gac": 0.48}, finished=False)
    cell = pocket_rescue(tmp_path, prereg, "GAC-2")
    assert cell["pocket"] == "not measured" and "0 of 27 runs" in cell["pocket_evidence"]
    runs({"sync": 0.55, "stale": 0.48, "decoupled_ppo": 0.55, "gac": 0.48}, first=0)
    assert pocket_rescue(tmp_path, prereg, "GAC-2") is None  # exploratory seeds are never read
    runs({"sync": 0.55, "stale": 0.48, "decoupled_ppo": 0.55, "gac": 0.48}, diverged="decoupled_ppo")
    cell = pocket_rescue(tmp_path, prereg, "AREAL-1")  # a diverged run scores 0: error 1 on that seed
    assert cell["pocket"] == "inconclusive"  # no seed trimmed: the diverged seed widens the match past its margin


def test_a_sequential_rescue_design_reads_its_looks_and_the_earlier_registrations_precondition(tmp_path):
    """Two looks (4 then 8 seeds per arm, Pocock): the first decided look gives the verdict; an undecided look whose
    next look has not finished is "not measured" with what it read; the precondition comes from the earlier
    registration's runs, and a base that does not degrade there makes the claim "not testable"."""
    from figures.llm_column import pocket_rescue
    from testbed.util.sequential import Design

    def table(folder: str, first: int, scores: dict[str, list[float]], finished: int | None = None) -> None:
        d = tmp_path / folder
        d.mkdir(parents=True, exist_ok=True)
        rows = [{"arm": arm, "eta": 0 if arm == "sync" else 8, "seed": first + i, "diverged": False, "accuracy": v,
                 "finished": finished is None or i < finished} for arm, vals in scores.items() for i, v in enumerate(vals)]
        pd.DataFrame(rows).to_csv(d / "runs.csv", index=False)
        (d / "study.json").write_text('{"eval_problems": 512}')

    (tmp_path / "p3.toml").write_text('[common]\nseeds_from = 300\n[claims.GAC-2]\nruns = "r3"\n')
    noise = [0.004, -0.006, 0.002, 0.0, -0.003, 0.005, -0.001, 0.003]
    table("r3", 300, {"sync": [0.55 + e for e in noise], "stale": [0.47 - e for e in noise]})  # degrades by 8 points
    prereg = {"common": {"seeds_from": 400}, "claims": {"GAC-2": {
        "runs": "r4", "precondition": "p3.toml", "margin": 0.03, "looks": [4, 8], "spending": "pocock",
        "seeds": list(range(400, 408))}}}
    assert pocket_rescue(tmp_path, prereg, "GAC-2") is None  # nothing tabulated
    table("r4", 400, {"sync": [0.55 + e for e in noise[:4]], "gac": [0.55 - e for e in noise[:4]]})
    cell = pocket_rescue(tmp_path, prereg, "GAC-2")
    level = Design(4, 4, 8, alpha=0.05).level(0)
    assert cell["pocket"] == "reproduced", cell
    assert "look 1 of 2 (4 seeds per arm, 400..403" in cell["pocket_evidence"] and f"{100 * level:.1f}%" in cell["pocket_evidence"]
    assert "grpo degrades at eta8 (p3.toml, seeds 300..307)" in cell["pocket_evidence"] and "look 2" not in cell["pocket_evidence"]
    wide = [0.06, -0.05, 0.05, -0.04]
    table("r4", 400, {"sync": [0.55] * 4, "gac": [0.55 + e for e in wide]})  # undecided at look 1, look 2 not run
    cell = pocket_rescue(tmp_path, prereg, "GAC-2")
    assert cell["pocket"] == "not measured" and "-> undecided" in cell["pocket_evidence"]
    assert "look 2 (8 seeds per arm, 400..407): 8 of 16 runs" in cell["pocket_evidence"]
    table("r4", 400, {"sync": [0.55] * 8, "gac": [0.55 + e for e in wide * 2]}, finished=6)
    assert "look 2 (8 seeds per arm, 400..407): 12 of 16 runs" in pocket_rescue(tmp_path, prereg, "GAC-2")["pocket_evidence"]
    table("r4", 400, {"sync": [0.55] * 8, "gac": [0.55 + e for e in wide * 2]})  # undecided at the last look
    assert pocket_rescue(tmp_path, prereg, "GAC-2")["pocket"] == "inconclusive"
    table("r4", 400, {"sync": [0.55] * 8, "gac": [0.45 + e for e in noise]})  # 10 points worse: fails at look 1
    cell = pocket_rescue(tmp_path, prereg, "GAC-2")
    assert cell["pocket"] == "not reproduced" and "look 2" not in cell["pocket_evidence"]
    table("r4", 390, {"sync": [0.55] * 18, "gac": [0.2] * 10 + [0.55 + e for e in noise]})  # seeds below 400 unread
    assert pocket_rescue(tmp_path, prereg, "GAC-2")["pocket"] == "reproduced"
    table("r3", 300, {"sync": [0.55 + e for e in noise], "stale": [0.55 - e for e in noise]})  # no degradation
    assert pocket_rescue(tmp_path, prereg, "GAC-2")["pocket"] == "not testable"


def test_pocket_pilot_refuses_an_arm_its_file_does_not_name(tmp_path, capsys):
    from llm_scale.pocket_design import main

    sweep = tmp_path / "s.toml"
    sweep.write_text('[train]\nmodel = "pocket-arithmetic"\nsteps = 2\neval_every = 1\n\n[search]\neta = [8]\nlr = [1e-4]\nseeds = [100, 101]\n\n'
                     '[compare]\nrecipes = ["gac"]\nseeds = [0, 1]\n')
    assert main(["pilot", str(sweep), str(tmp_path / "r"), str(tmp_path / "o"), "sync,tis", "collect"]) == 2
    assert "arm 'tis' is neither sync, stale nor one of" in capsys.readouterr().err
    assert main(["pilot", str(sweep), str(tmp_path / "r"), str(tmp_path / "o"), "sync,gac", "--parallel", "0"]) == 2
    assert "--parallel takes a whole number >= 1, got '0'" in capsys.readouterr().err
    assert main(["pilot", str(sweep), str(tmp_path / "r"), str(tmp_path / "o"), "sync", "--executor", "slurm"]) == 2
    assert "--executor must be one of local, ray, got 'slurm'" in capsys.readouterr().err
    assert main(["pilot", str(sweep), str(tmp_path / "r"), str(tmp_path / "o"), "sync", "--address", "h:1"]) == 2
    assert "--address 'h:1' is for --executor ray" in capsys.readouterr().err
    assert main(["pilot", str(sweep), str(tmp_path / "r"), str(tmp_path / "o"), "sync,gac", "collect"]) == 0
    table = pd.read_csv(tmp_path / "o" / "runs.csv")  # nothing run: one unfinished row per arm
    assert list(table["arm"]) == ["sync", "gac", "sync", "gac"] and not table["finished"].any()


def test_a_later_registration_decides_a_claim_once_its_runs_have_finished(tmp_path):
    from figures.llm_column import POCKET_REDESIGNS, pocket_cells

    (tmp_path / "sweeps/llm").mkdir(parents=True)
    (tmp_path / "sweeps/llm/pocket_prereg.toml").write_text(
        'status = "run"\n[common]\nseeds_from = 100\n[claims.GAC-1]\ndesign = "D1"\n[claims.AREAL-1]\nmargin = 0.03\n'
        '[claims.GAC-2]\nmargin = 0.03\n')
    (tmp_path / POCKET_REDESIGNS[0]).write_text(
        '[common]\nseeds_from = 200\n[claims.GAC-1]\nruns = "g2"\nsweeps = "S"\ncpu_cost = "C"\n'
        '[claims.AREAL-1]\nruns = "r2"\nmargin = 0.03\nlag_choice = "lag2.json"\n')

    def gac1(folder: str, first: int, sync: list[float]) -> None:
        for arm, vals in (("sync", sync), ("stale", [0.6, 0.58, 0.62])):
            d = tmp_path / folder / arm
            d.mkdir(parents=True, exist_ok=True)
            pd.DataFrame([{"arm": arm, "eta": 4, "seed": first + i, "finished": True, "late_grad_cos_split_half": v}
                          for i, v in enumerate(vals)]).to_csv(d / "runs.csv", index=False)

    gac1("results/llm/pocket/gac1_confirm", 100, [1.3, 0.4])  # the first design: sync's interval reaches the band
    cells = pocket_cells(tmp_path)
    assert cells["GAC-1"]["pocket"] == "inconclusive"
    assert "a later design is registered (sweeps/llm/pocket_prereg2.toml, seeds from 200): not yet run" in \
        cells["GAC-1"]["pocket_evidence"]
    gac1("g2", 200, [0.88, 0.86, 0.9])  # the second design's seeds: aligned at sync, the sync part fails
    cell = pocket_cells(tmp_path)["GAC-1"]
    assert cell["pocket"] == "not reproduced" and "g2/{sync,stale}/runs.csv (seeds 200..202" in cell["pocket_evidence"]
    assert "earlier design: inconclusive (confirmatory runs results/llm/pocket/gac1_confirm" in cell["pocket_evidence"]
    gac1("g2", 100, [0.88, 0.86, 0.9])  # the first block's seeds in the second design's folder are never read
    assert pocket_cells(tmp_path)["GAC-1"]["pocket"] == "inconclusive"
    assert pocket_cells(tmp_path)["AREAL-1"]["pocket"] == "not measured"  # nothing tabulated by either design
    _write(tmp_path / "lag2.json", {"eta": None, "reading": "not testable on the pocket LM: naive GRPO does not degrade "
                                                             "by 0.06 at any lag tried (4, 16)",
                                    "per_eta": {"4": {"mean_drop": -0.005}, "16": {"mean_drop": 0.035}}})
    cell = pocket_cells(tmp_path)["AREAL-1"]
    assert cell["pocket"] == "not testable" and "does not degrade by 0.06" in cell["pocket_evidence"]
    assert "mean paired drop sync - stale, pilot seeds: eta 4 -0.005, eta 16 +0.035)" in cell["pocket_evidence"]
    assert pocket_cells(tmp_path)["GAC-2"]["pocket"] == "not measured"  # the later registration holds no GAC-2 design


@pytest.mark.parametrize("value", ["x", "-0.1", "nan"])
def test_the_lag_rules_min_drop_must_be_a_positive_number(value, capsys):
    from llm_scale.pocket_design import main

    assert main(["lag", "base", "out.json", "lag16", "--min-drop", value]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: lag: --min-drop takes a positive score difference, got {value!r}"]


@pytest.mark.parametrize("module, argv, want", [
    ("llm_scale.pocket_design", ["lag"], "error: lag BASE_PILOT OUT.json LAG_PILOT..."),
    ("figures.llm_column", ["--nope"], "error: unrecognized arguments: --nope"),
])
def test_the_packages_run_as_commands(module, argv, want):
    """``python -m`` of the two packages reaches their command line: a bad one is one error line, exit 2."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", module, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(want) and len(done.stderr.strip().splitlines()) == 1
