"""The registry and spec parser: every documented recipe resolves; composition; errors that list what is allowed."""

from __future__ import annotations

import math

import pytest

from testbed.stabilizers import available, build, parse_spec
from testbed.stabilizers.advantages import OPOB, Auto, Group
from testbed.stabilizers.dg import DG
from testbed.stabilizers.gradient import ESSLR, GAC
from testbed.stabilizers.importance import IS, MIS, TIS
from testbed.stabilizers.ppo_family import CISPO, GSPO, M2PO, PPO, DecoupledPPO
from testbed.stabilizers.surrogates import PG

ISSUE_2 = {
    "pg": PG, "is": IS, "tis": TIS, "mis": MIS, "ppo": PPO, "decoupled_ppo": DecoupledPPO, "cispo": CISPO,
    "gspo": GSPO, "m2po": M2PO, "dg": DG,
}


@pytest.mark.parametrize("name", sorted(ISSUE_2))
def test_every_surrogate_recipe_resolves(name):
    recipe = build(name)
    assert type(recipe.surrogate) is ISSUE_2[name] and isinstance(recipe.advantage, Auto) and recipe.transforms == []
    assert name in available()


def test_vcpo_and_gac_resolve():
    vcpo = build("vcpo")
    assert isinstance(vcpo.advantage, OPOB) and not vcpo.advantage.code_variant
    assert isinstance(vcpo.surrogate, TIS) and (vcpo.surrogate.level, vcpo.surrogate.c) == ("sequence", 8.0)
    assert [type(t) for t in vcpo.transforms] == [ESSLR]
    # gac is GAC on its paper's base: GRPO (group advantages, PPO clip) with the projection
    gac = build("gac")
    assert isinstance(gac.advantage, Group) and type(gac.surrogate) is PPO and [type(t) for t in gac.transforms] == [GAC]
    grpo = build("grpo")
    assert isinstance(grpo.advantage, Group) and type(grpo.surrogate) is PPO and grpo.transforms == []
    bare = build("pg+gac_projection")  # the projection on bare REINFORCE (batch-mean baseline)
    assert isinstance(bare.advantage, Auto) and type(bare.surrogate) is PG and [type(t) for t in bare.transforms] == [GAC]
    assert type(build("pg+gac").surrogate) is PG  # a core surrogate wins over gac's default one
    # parameters of a bundle go to the component that owns them
    v = build("vcpo(c=4, rho_base=0.55, code_variant=true)")
    assert v.surrogate.c == 4.0 and v.transforms[0].rho_base == 0.55 and v.advantage.code_variant is True
    assert build("vcpo(tis.level=token)").surrogate.level == "token"


def test_composition():
    r = build("dg+gac(t_low=0.1)")
    assert type(r.surrogate) is DG and r.transforms[0].t_low == 0.1 and r.transforms[0].t_high == 0.9
    r = build("tis(c=2)+ess_lr")
    assert type(r.surrogate) is TIS and r.surrogate.c == 2.0 and [type(t) for t in r.transforms] == [ESSLR]
    r = build("ppo(eps=0.2, dual_clip=3)")
    assert (r.surrogate.eps, r.surrogate.dual_clip) == (0.2, 3.0)
    r = build("opob + ppo + clip_norm(max_norm=0.5) + gac")
    assert isinstance(r.advantage, OPOB) and [t.name for t in r.transforms] == ["clip_norm", "gac_projection"]
    r = build("vcpo + gac(high_action=damp)")
    assert [t.name for t in r.transforms] == ["ess_lr", "gac_projection"] and r.transforms[1].high_action == "damp"
    assert build("tis(c=inf)").surrogate.c == math.inf
    assert build("is(level=sequence)").surrogate.level == "sequence"
    assert parse_spec("dg(eta=0.5)+gac") == [("dg", {"eta": 0.5}), ("gac", {})]


def test_unknown_name_lists_what_is_allowed():
    with pytest.raises(ValueError) as err:
        build("dgg")
    msg = str(err.value)
    assert "'dgg'" in msg and "allowed" in msg
    for name in [*ISSUE_2, "vcpo", "gac", "grpo", "pmpo", "gac_projection", "ess_lr", "opob", "kondo"]:
        assert name in msg


def test_unknown_parameter_lists_the_allowed_ones():
    with pytest.raises(ValueError) as err:
        build("tis(cc=2)")
    msg = str(err.value)
    assert "'cc'" in msg and "c" in msg and "level" in msg and "lo" in msg
    with pytest.raises(ValueError) as err:
        build("vcpo(t_low=0.1)")  # not a vcpo parameter: the message lists vcpo's, by component
    assert all(k in str(err.value) for k in ("'t_low'", "opob.eps", "tis.c", "ess_lr.rho_base"))


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("tis(c=-1)", "c must be"),
        ("tis(level=word)", "level"),
        ("mis(lo=2)", "lo"),
        ("ppo(dual_clip=0.5)", "dual_clip"),
        ("gac(t_low=0.9, t_high=0.1)", "t_low"),
        ("gac(high_action=stop)", "high_action"),
        ("ess_lr(rule=cubic)", "rule"),
        ("dg(eta=-1)", "eta"),
        ("kondo(quantile=2)", "quantile"),
        ("dg+ppo", "two surrogates"),
        ("gac+gac", "twice"),
        ("tis(c=2", "unbalanced"),
        ("", "non-empty"),
    ],
)
def test_bad_specs_raise_value_errors_naming_the_problem(spec, fragment):
    with pytest.raises(ValueError, match=fragment):
        build(spec)
