"""The async_grpo experiment's settings: the grid in words and the simulator runs it needs (figures/budgets.py)."""

from __future__ import annotations

from figures import prereg
from figures.budgets import Budget
from testbed.config import RunConfig
from testbed.regimes import Regime, get_regime
from testbed.stabilizers.spec import SpecError

NAME = "async_grpo"
REGIME = "async_grpo"
RECIPES = ("grpo", "gac", "decoupled_ppo", "pg", "tis")
BASES = ("grpo", "pg", "tis")  # GAC-1 per base; grpo is the GAC paper's
CHANCE = 0.9
PROVISIONAL = Regime(
    REGIME, "provisional stand-in until testbed/regimes.py registers async_grpo: G = 10, K = 4 epochs x N = 4 "
    "minibatches, staleness bounded:8,4 and bounded:32,4 (AReaL's admission, actors 4x the learner's speed)",
    {"*": {"group_size": 10, "epochs": 4, "minibatches": 4}}, stale=("bounded:8,4", "bounded:32,4"))


def regime() -> tuple[Regime, bool]:
    """(the regime, whether it is the registered one)."""
    try:
        return get_regime(REGIME), True
    except SpecError:
        return PROVISIONAL, False


def levels() -> tuple[str, ...]:
    """sync and the regime's staleness levels."""
    reg, _ = regime()
    return ("sync", *reg.stale)


def run(b: Budget, recipe: str, delay: str, seed: int) -> RunConfig:
    reg, registered = regime()
    if registered:
        return RunConfig(task="mnist", recipe=recipe, delay=delay, seed=seed, steps=b.async_steps,
                         log_every=b.async_log, regime=REGIME)
    settings = {k: v for k, v in reg.for_task("mnist").items() if k in RunConfig.field_names() and k != "delay"}
    return RunConfig(task="mnist", recipe=recipe, delay=delay, seed=seed, steps=b.async_steps, log_every=b.async_log,
                     **settings)


def cell(b: Budget, recipe: str, delay: str, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    return [run(b, recipe, delay, s) for s in (b.async_seeds if seeds is None else seeds)]


def configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The first look's runs (``seeds``: those seeds instead), with the GAC threshold-sensitivity runs."""
    main = [c for r in RECIPES for d in levels() for c in cell(b, r, d, seeds)]
    return main + (sensitivity_configs(b, seeds) if seeds is None else [])


CLAIM_RECIPES = {"GAC-1": BASES, "GAC-2": ("grpo", "gac"), "AREAL-1": ("grpo", "decoupled_ppo")}

# GAC's threshold sensitivity (reported beside GAC-2, not judged): the projection's free parameters are a
# reconstruction (testbed/stabilizers/gradient.py), so the report shows how they move the result. Each variant
# runs at sync and at the regime's largest staleness level with the first look's seeds.
GAC_VARIANTS = {
    "default (fixed 0.2 / 0.9, skip)": "gac",
    "fixed 0.1 / 0.8": "gac(t_low=0.1, t_high=0.8)",
    "fixed 0.4 / 0.95": "gac(t_low=0.4, t_high=0.95)",
    "damp instead of skip": "gac(high_action=damp)",
    "dynamic thresholds": "gac(thresholds=dynamic)",
    "project only (never skip)": "gac(t_high=1.0)",
}


def sensitivity_configs(b: Budget, seeds: tuple[int, ...] | None = None) -> list[RunConfig]:
    """The runs of the threshold-sensitivity table (the default variant is the main grid's gac)."""
    reg, _ = regime()
    return [c for spec in GAC_VARIANTS.values() if spec != "gac" for d in ("sync", reg.stale[-1])
            for c in cell(b, spec, d, seeds)]


def describe(b: Budget) -> str:
    reg, registered = regime()
    settings = ", ".join(f"{k} = {v}" for k, v in reg.for_task("mnist").items())
    tag = "" if registered else " [PROVISIONAL: async_grpo is not registered in testbed/regimes.py]"
    return (f"MNIST in the async-GRPO regime ({settings}){tag}; staleness sync and {', '.join(reg.stale)}; "
            f"{b.async_steps:,} learner batches; {b.async_design.seeds_shown()}; recipes {', '.join(RECIPES)}")


def exact_recipe() -> str:
    """The recipe whose exact consecutive-update cosine GAC-1 reads (the registration's gac.exact_recipe)."""
    return str(prereg.load().section("gac")["exact_recipe"])


def exact_configs(b: Budget, seeds: tuple[int, ...]) -> list[RunConfig]:
    """The runs the exact-gradient probe re-trains: the GAC-1 base at sync and every stale level."""
    return [c for d in levels() for c in cell(b, exact_recipe(), d, seeds)]


def probe_loops(b: Budget, cap: bool, workers: int = 1) -> list[list[RunConfig]]:
    """The GAC probe's loops (as `figures.gac_probe.ensure` packs them for ``workers``): the first look's seeds, or
    every seed of the async design's cap."""
    from testbed.plan import MAX_LOOP, balanced_chunks

    seeds = b.all_seeds("async") if cap else b.async_seeds
    return balanced_chunks(exact_configs(b, tuple(seeds)), MAX_LOOP, workers)


def staged_runs(b: Budget, seeds: tuple[int, ...], claim_ids: list[str]) -> list[RunConfig]:
    """The runs a later look trains for the undecided claims ``claim_ids``: their recipes at every level."""
    recipes = sorted({r for c in claim_ids for r in CLAIM_RECIPES[c]})
    return [x for r in recipes for d in levels() for x in cell(b, r, d, seeds)]
