"""The pre-registration (figures/preregistration.toml, figures/prereg.py): valid, disjoint from every
exploratory seed, one-line errors, and the report's label refused whenever a rule or a seed breaks it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from figures import prereg
from figures.prereg import tomllib
from testbed.util.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reg() -> prereg.Prereg:
    return prereg.load()


def test_file_is_registered_and_covers_every_claim(reg):
    from figures.experiments import all_claims

    assert reg.data["registration"]["status"] == "registered"
    assert set(reg.claims) == {c.id for c in all_claims()}
    # every claim's margins name the ones its record judges, plus none it lacks
    for c in all_claims():
        assert {m["name"] for m in reg.claims[c.id]["margins"]} <= {m.name for m in c.margins} | {"solved"}, c.id


def test_typed_margins_are_the_judges_margins(reg):
    import math

    from figures.experiments import all_claims

    checked = 0
    for c in all_claims():
        for m in reg.claims[c.id]["margins"]:
            if m["source"] == "resolution" or m["name"] not in {x.name for x in c.margins}:
                continue
            judged = c.margin(m["name"])
            value = math.exp(judged.value) if judged.scale == "log" else judged.value
            assert (m["scale"] == "factor") == (judged.scale == "log"), (c.id, m["name"])
            assert value == pytest.approx(m["value"], rel=1e-5), (c.id, m["name"])
            checked += 1
    assert checked >= 12


def test_confirmatory_seeds_are_disjoint_from_every_exploratory_seed(reg):
    used = prereg.used_seeds(ROOT)
    # the scanner sees the exploratory budgets' seeds 0..14 and the sweeps' seeds (a known one: the MNIST sweep)
    assert set(range(15)) <= set(used)
    clash = sorted(set(used) & set(reg.block()))
    assert clash == [], f"confirmatory seed(s) {clash[:5]} already used in {used[clash[0]] if clash else ''}"
    assert reg.block().start >= reg.data["seeds"]["exploratory_below"] > max(used)
    for d in prereg.DESIGNS:
        assert set(reg.seeds(d)) <= set(reg.block())
        assert reg.seeds(d)[0] == reg.block().start


def test_seed_scanner_reads_keys_literals_counts_ranges_and_prose(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "a.json").write_text('{"x": {"seeds": [3, 7]}, "seed": 11, "seeds_needed": 5407}')
    (tmp_path / "results" / "b.toml").write_text("[grid]\nseed = [20, 21]\n[other]\nseeds = 3\n")
    (tmp_path / "results" / "c.py").write_text("cfg(seed=range(40, 43))\n")
    (tmp_path / "results" / "d.md").write_text("judged on seeds 50-52\n")
    found = {s for s in prereg.used_seeds(tmp_path, ("results",)) if s >= 3}
    assert {3, 7, 11, 20, 21, 40, 41, 42, 50, 51, 52} <= found
    assert 5407 not in found  # a count of seeds needed is not a seed
    assert 43 not in found and 53 not in found


def test_confirmatory_report_is_not_scanned(tmp_path):
    conf = tmp_path / prereg.CONFIRMATORY_DIRS[0]
    conf.mkdir(parents=True)
    (conf / "claims.json").write_text('{"seeds": [10000, 10001]}')
    assert 10000 not in prereg.used_seeds(tmp_path, ("results",))


def _write(tmp_path: Path, data: dict) -> Path:
    def toml(d: dict, prefix: str = "") -> list[str]:
        lines, subs = [], []
        for k, v in d.items():
            if isinstance(v, dict) and not (prefix.startswith("claims.") or k in ("paper_error",)):
                subs.append((k, v))
            else:
                lines.append(f'"{k}" = {_value(v)}')
        out = lines
        for k, v in subs:
            name = f"{prefix}.{k}" if prefix else k
            out += ["", f'[{".".join(f"{chr(34)}{p}{chr(34)}" for p in name.split("."))}]', *toml(v, name)]
        return out

    p = tmp_path / "prereg.toml"
    p.write_text("\n".join(toml(data)) + "\n")
    return p


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f'"{k}" = {_value(x)}' for k, x in v.items()) + "}"
    return repr(v)


def test_round_trip_writer_reads_the_real_file(tmp_path):
    data = tomllib.loads(prereg.PATH.read_text())
    assert prereg.load(_write(tmp_path, data)).data == data


@pytest.mark.parametrize("edit, says", [
    (lambda d: d["registration"].update(status="draft"), "registration.status must be 'registered'"),
    (lambda d: d["seeds"].update(block_start=14), "lies among the exploratory seeds"),
    (lambda d: d["designs"]["async"].update(cap=500), "designs.async"),
    (lambda d: d["claims"]["GAC-2"].update(estimator="trimmed"), "stability claim is judged on its tail"),
    (lambda d: d["claims"]["GAC-2"].update(kind="vibes"), "kind 'vibes' is not one of"),
    (lambda d: d["claims"]["VCPO-2"]["margins"][0].update(value=1.167), "computed, not typed"),
    (lambda d: d["claims"]["DG-1"]["margins"][0].pop("value"), "needs a number value"),
    (lambda d: d["claims"]["DDG-1"].pop("endpoint"), "lacks endpoint"),
    (lambda d: d["claims"]["DDG-1"]["margins"][0].update(scale="log"), "scale 'log' is not one of"),
    (lambda d: d.pop("phase"), "missing section(s) phase"),
])
def test_bad_file_is_one_line_naming_the_value(tmp_path, edit, says):
    data = copy.deepcopy(tomllib.loads(prereg.PATH.read_text()))
    edit(data)
    with pytest.raises(UsageError) as exc:
        prereg.load(_write(tmp_path, data))
    assert says in str(exc.value) and "\n" not in str(exc.value)


def test_cli_bad_file_exit_2_one_line(tmp_path, capsys):
    bad = tmp_path / "x.toml"
    bad.write_text("[registration\n")
    assert prereg.main(["check", "--file", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not valid TOML" in err
    assert prereg.main(["nonsense"]) == 2


def test_cli_check_counts_the_claims_a_file_judges(capsys):
    later = Path(prereg.__file__).parent / "registrations" / "vcpo1_spike.toml"
    block = prereg.registration(later).block()
    assert prereg.main(["check", "--file", str(later)]) == 0
    assert f": registered, 1 claim(s) (VCPO-1), block {block.start}..{block.stop - 1}" in capsys.readouterr().out
    assert prereg.main(["check"]) == 0
    assert f"registered, {len(prereg.load().claims)} claim(s) (GAC-1, " in capsys.readouterr().out


def test_label_confirmatory_only_when_the_protocol_holds(reg):
    seeds = reg.seeds("async")
    used = {0: "results/paper/claims.json", 14: "figures/budgets.py"}
    assert prereg.label(reg, "abc", None, seeds, used) == ("confirmatory", [])
    assert prereg.label(reg, "abc", reg.sha256, seeds, used) == ("confirmatory", [])
    # a rule changed after the first confirmatory run
    lab, why = prereg.label(reg, "abc", "0" * 64, seeds, used)
    assert lab == "exploratory" and "rules changed after the first confirmatory run" in why[0]
    # the file is edited or not committed
    lab, why = prereg.label(reg, None, None, seeds, used)
    assert lab == "exploratory" and "not committed" in why[0]
    # a confirmatory seed appears in an earlier record
    lab, why = prereg.label(reg, "abc", None, seeds, {**used, seeds[3]: "results/x.json"})
    assert lab == "exploratory" and f"seed(s) {seeds[3]} appear in earlier records (results/x.json)" in why[0]
    # an exploratory seed judged
    lab, why = prereg.label(reg, "abc", None, (*seeds, 3), used)
    assert lab == "exploratory" and "outside the block" in why[0]
    # a claim judged by code that does not read its registered design
    lab, why = prereg.label(reg, "abc", None, seeds, used, unwired=["GAC-2"])
    assert lab == "exploratory" and why == ["the judges of GAC-2 do not read their pre-registered endpoint and "
                                            "estimator"]


# --- later registrations (figures/registrations/) ---------------------------------------------------------------

LATER = """
[registration]
status = "registered"
supersedes = "figures/preregistration.toml"
claims = ["DG-1"]
[seeds]
block_start = 10100
block_size = 100
[budget]
samples_k = [1]
[task_args]
train_size = 800
[output]
report = "results/later_report"
cache = "results/later_cache"
"""


def test_every_committed_later_registration_loads_and_its_block_is_unseen():
    used = prereg.used_seeds(ROOT)
    files = prereg.later_files(ROOT)
    assert files, "figures/registrations holds the later registrations"
    first = prereg.load().block()
    for f in files:
        p = prereg.load_later(f)
        assert set(p.later["claims"]) <= set(p.claims)
        assert not set(p.block()) & set(first), f
        assert not set(p.block()) & set(used), (f, sorted(set(p.block()) & set(used))[:3])


def test_a_later_registration_inherits_every_rule_and_changes_only_its_own(tmp_path, reg, monkeypatch):
    from figures.budgets import confirmatory_budget

    f = tmp_path / "later.toml"
    f.write_text(LATER)
    p = prereg.load_later(f)
    assert {k: v for k, v in p.data.items() if k not in ("seeds", "later")} == \
        {k: v for k, v in reg.data.items() if k != "seeds"}
    assert p.block() == range(10100, 10200) and p.sha256 not in (reg.sha256,)
    b = confirmatory_budget(p)
    assert b.mnist_seeds == tuple(range(10100, 10100 + reg.section("designs")["mnist"]["n0"]))
    assert (b.claims, b.samples_k, b.mnist_task_args) == (("DG-1",), (1,), (("train_size", 800),))
    assert confirmatory_budget(reg).mnist_task_args == () and confirmatory_budget(reg).claims == ()
    from figures.experiments.mnist_samples.settings import cell

    assert {c.task_args["train_size"] for c in cell(b, "pg", 1)} == {800}
    st = prereg.stamp_of(p)
    assert st["commit"] is None and st["claims"] == ["DG-1"] and st["seed_block"] == [10100, 10199]


SPIKE = """
[spike]
reference = "early"
early_steps = 1000
factor_grid = [2.0, 30.0]
false_alarm = 0.05
"""


def test_a_later_registration_may_restate_the_spike_rule_and_says_why(tmp_path, reg):
    """[spike] is the one rule section a later registration may restate (whole, not merged key by key), only with
    registration.after_data; the merged registration judges by it, and its stamp names it."""
    from figures.confirm import SpikeReference

    f = tmp_path / "later.toml"
    f.write_text(LATER.replace('claims = ["DG-1"]', 'claims = ["VCPO-1"]\nafter_data = "read seeds 10000-10009"') + SPIKE)
    p = prereg.load_later(f)
    assert p.section("spike") == {"reference": "early", "early_steps": 1000, "factor_grid": [2.0, 30.0], "false_alarm": 0.05}
    assert SpikeReference.of(p.section("spike")) == SpikeReference("early", 1000)
    assert {k: v for k, v in p.data.items() if k not in ("seeds", "later", "spike")} == \
        {k: v for k, v in reg.data.items() if k not in ("seeds", "spike")}
    st = prereg.stamp_of(p)
    assert st["rules"] == ["spike"] and "rules" not in prereg.stamp_of(prereg.load_later(_plain(tmp_path)))
    f.write_text(LATER.replace('claims = ["DG-1"]', 'claims = ["VCPO-1"]') + SPIKE)
    with pytest.raises(UsageError, match=r"says why in registration\.after_data"):
        prereg.load_later(f)


def _plain(tmp_path):
    g = tmp_path / "plain.toml"
    g.write_text(LATER)
    return g


@pytest.mark.parametrize(("edit", "message"), [
    (('reference = "early"', 'reference = "global"'), "spike.reference 'global' is not one of local, early"),
    (("early_steps = 1000", "early_steps = 0"), "spike.early_steps must be an integer >= 1"),
    (("factor_grid = [2.0, 30.0]", "factor_grid = [0.5]"), "spike.factor_grid must be a non-empty list of numbers > 1"),
    (("false_alarm = 0.05", "false_alarm = 5"), "spike.false_alarm must be a rate in (0, 1)"),
    (("false_alarm = 0.05", "false_alarm = 0.05\nspan = 3"), "spike has unknown key(s) span"),
])
def test_a_bad_restated_spike_rule_is_refused_in_one_line(tmp_path, edit, message):
    f = tmp_path / "later.toml"
    f.write_text(LATER.replace('claims = ["DG-1"]', 'claims = ["VCPO-1"]\nafter_data = "why"') + SPIKE.replace(*edit))
    with pytest.raises(UsageError) as err:
        prereg.load_later(f)
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("edit", "message"), [
    (("block_start = 10100", "block_start = 10050"), "outside the first registration's block"),
    (("block_start = 10100", "block_start = 500"), "above the exploratory seeds"),
    (('claims = ["DG-1"]', 'claims = ["XX-9"]'), "registration.claims must list"),
    (("samples_k = [1]", "mnist_steps = 5"), "cannot be set by a later registration"),
    (('supersedes = "figures/preregistration.toml"', 'supersedes = "other.toml"'), "registration.supersedes"),
    (("train_size = 800", "width = 3"), "task_args"),
    (('cache = "results/later_cache"', ""), "output must name report and cache"),
])
def test_a_bad_later_registration_is_refused_in_one_line(tmp_path, edit, message):
    f = tmp_path / "later.toml"
    f.write_text(LATER.replace(*edit))
    with pytest.raises(UsageError) as err:
        prereg.load_later(f)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_later_registrations_own_outputs_and_file_are_not_exploratory_records(tmp_path):
    (tmp_path / "figures" / "registrations").mkdir(parents=True)
    (tmp_path / "figures" / "registrations" / "later.toml").write_text(LATER + "\n# seeds 10100-10102\n")
    for d in ("results/later_report", "results/later_cache", "results/other"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "results/later_report/claims.json").write_text('{"seeds": [10100, 10101]}')
    (tmp_path / "results/later_cache/r.json").write_text('{"seed": 10102}')
    assert not {10100, 10101, 10102} & set(prereg.used_seeds(tmp_path, ("results", "figures")))
    (tmp_path / "results/other/x.json").write_text('{"seed": 10101}')
    assert prereg.used_seeds(tmp_path, ("results",))[10101] == "results/other/x.json"


def test_figures_refuses_a_bad_registration_in_one_line(tmp_path, capsys):
    from figures.__main__ import main

    f = tmp_path / "later.toml"
    f.write_text(LATER.replace("block_start = 10100", "block_start = 10050"))
    assert main(["all", "--registration", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "10050" in err[0] and not (tmp_path / "o").exists()


def test_a_later_registration_loads_without_its_data_and_its_run_names_the_missing_data(tmp_path, capsys):
    """Loading, stamping and labelling read the file only (a fresh machine without the data set still checks the
    committed registrations); the run, which reads the data, refuses in one line naming the directory."""
    from figures.__main__ import main

    f = tmp_path / "later.toml"
    f.write_text(LATER.replace("train_size = 800", f'data_dir = "{tmp_path / "absent"}"'))
    p = prereg.load_later(f)
    assert p.later["task_args"] == {"data_dir": str(tmp_path / "absent")}
    assert prereg.stamp_of(p)["seed_block"] == [10100, 10199]
    assert main(["all", "--registration", str(f), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "absent" in err[0] and not (tmp_path / "o").exists()
