"""Typed evidence (figures/evidence.py): JSON round trip, fields refused when unknown, emptiness, truncation."""

from __future__ import annotations

import json
import math

import pytest

from figures.claims import by_experiment
from figures.evidence import cell_key, label, parse_label
from figures.experiments import EXPERIMENTS, async_grpo, contamination, experiment, mnist_delay
from testbed.util.errors import UsageError


def test_every_experiment_has_a_record_whose_empty_instance_is_falsy():
    for name in EXPERIMENTS:
        cls = experiment(name).Evidence
        assert not cls() and cls.from_json(cls().to_json()).to_json() == cls().to_json()


def test_round_trip_through_json_keeps_the_numbers_and_writes_nan_as_null():
    ev = mnist_delay.Evidence(seeds=[0, 1], delays=["sync"], floor=5e-4, error={("pg", "sync"): [0.1, math.nan]},
                              events=[{"recipe": "is", "seed": 1, "ess_drop": True}])
    assert ev
    text = json.dumps(ev.to_json())
    assert json.loads(text)["error"] == {"pg|sync": [0.1, None]}  # a cell is its label on disk
    back = mnist_delay.Evidence.from_json(json.loads(text))
    assert back.error == {("pg", "sync"): [0.1, None]} and back.events == ev.events and back.floor == 5e-4


def test_cells_are_tuples_in_memory_and_labels_on_disk_nested_ones_too():
    assert cell_key("pg", 1) == ("pg", "1") and label(("pg", "inf")) == "pg|inf" and label("a|b") == "a|b"
    assert parse_label("no ess_lr|fixed:100") == ("no ess_lr", "fixed:100") and parse_label("ce") == ("ce",)
    ev = contamination.Evidence(theory={"deltas": [0.1], "cases": {("cos", "rho=0.1", "pg"): [0.5]}},
                                measured={("stale", "dg", "late"): [0.2, None]})
    data = json.loads(json.dumps(ev.to_json()))
    assert data["theory"]["cases"] == {"cos|rho=0.1|pg": [0.5]} and data["measured"] == {"stale|dg|late": [0.2, None]}
    back = contamination.Evidence.from_json(data)
    assert back.theory == ev.theory and back.measured == ev.measured
    assert async_grpo.Evidence.from_json({"error": {"grpo|sync": [0.1]}}).error == {("grpo", "sync"): [0.1]}


def test_a_field_the_record_does_not_have_is_refused_by_name():
    with pytest.raises(ValueError, match="has no field"):
        mnist_delay.Evidence.from_json({"seeds": [0], "erorr": {}})
    with pytest.raises(UsageError, match="remake it with python -m figures vcpo_traces") as err:
        by_experiment({"vcpo_traces": {"evidence": {"mnist_delay": {"erorr": {}}}}})
    assert "\n" not in str(err.value)
    assert isinstance(by_experiment({"vcpo_traces": {"evidence": {"mnist_delay": {"seeds": [0]}}}})["mnist_delay"],
                      mnist_delay.Evidence)
