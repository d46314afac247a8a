"""The run configurations behind the simulator figures, in one place (quick and full settings).

Several figures read the same runs (the MNIST delay sweep feeds the DDG-1 error curves, the
alignment traces, the MNIST gradient cosines and the VCPO traces), so the grids live here and every
figure asks for exactly the configs it plots; the results store de-duplicates by config hash.

Full setting (the default of ``python -m figures``) versus the papers:

* MNIST: the embedded 5,000-image MNIST (4,000 train / 1,000 test), MLP width 100, Adam 1e-3,
  batch 100 (as DG-1/DDG-1), 2,000 learner steps (the papers: 10,000) and 3 seeds.
* Token reversal: M = 2, d_model 64, 2 layers, 2 heads, 100 episodes per step, Adam 3e-4 (the task's
  default), but H = 6 (the paper: H = 10), 400 steps, 2 actors and 2 seeds: a scaled-down version
  that fits CPU minutes. The reward is always the exact-sequence reward (M^-H = 1/64 at H = 6 under
  the uniform initial policy: found about once per step of 100 episodes, not rare). "Rare
  discovery" adds the task's wrong-habit warm start (``rare_p0 = 0.3``: the initial policy prefers a
  decoy answer and the exact sequence has probability about 0.3^H = 7e-4 at H = 6), the task's
  second documented mechanism. (Per-token partial credit, the task's "rare discovery off", learned
  *worse* than the exact reward in a probe: dg at H = 6 stalled at 38-69% error over 400 steps
  while the exact reward reached 0.8%, so it is not used as the friction-free baseline.)

Quick setting (``--quick``, CI): the same grids with a handful of steps and one seed, to exercise
every code path in seconds; its verdicts are not evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.runner import RunConfig

MNIST_RECIPES = ("pg", "is", "tis", "ppo", "decoupled_ppo", "vcpo", "gac", "dg")
VCPO_ABLATIONS = {
    "vcpo": "vcpo",
    "no ess_lr": "opob+tis(level=sequence, c=8)",
    "no opob": "tis(level=sequence, c=8)+ess_lr",
}
TOKEN_METHODS = ("pg", "ppo", "dg")
CONTAMINATION = "bug(frac=0.2, kind=random)"


@dataclass(frozen=True)
class Scale:
    mnist_steps: int
    mnist_log: int
    mnist_delays: tuple[str, ...]
    seeds: tuple[int, ...]
    samples_k: tuple[int, ...]
    areal_etas: tuple[int, ...]
    ablation_delays: tuple[str, ...]
    tr_H: int
    tr_steps: int
    tr_log: int
    tr_seeds: tuple[int, ...]
    tr_delay: str
    tr_horizons: tuple[int, ...]
    tr_gac_delays: tuple[str, ...]
    tr_n_eval: int


FULL = Scale(
    mnist_steps=2000, mnist_log=50, mnist_delays=("sync", "fixed:8", "fixed:128", "fixed:1000"), seeds=(0, 1, 2),
    samples_k=(1, 4, 16), areal_etas=(0, 4, 16, 64), ablation_delays=("fixed:128", "fixed:1000"),
    tr_H=6, tr_steps=400, tr_log=50, tr_seeds=(0, 1), tr_delay="fixed:8", tr_horizons=(4, 6, 8),
    tr_gac_delays=("sync", "fixed:8"), tr_n_eval=128,
)
QUICK = Scale(
    mnist_steps=20, mnist_log=10, mnist_delays=("sync", "fixed:10"), seeds=(0,),
    samples_k=(1, 4), areal_etas=(0, 8), ablation_delays=("fixed:10",),
    tr_H=3, tr_steps=8, tr_log=4, tr_seeds=(0,), tr_delay="fixed:3", tr_horizons=(2, 3),
    tr_gac_delays=("sync", "fixed:3"), tr_n_eval=32,
)


def scale(quick: bool) -> Scale:
    return QUICK if quick else FULL


def largest_delay(quick: bool) -> str:
    return scale(quick).mnist_delays[-1]


def lag_of(delay: str) -> int:
    """The nominal lag of a delay spec ("sync" -> 0, "fixed:D" -> D, "bounded:eta" -> eta)."""
    if delay == "sync":
        return 0
    return int(delay.split(":")[1].split(",")[0])


# -- MNIST -----------------------------------------------------------------------------------------


def mnist(recipe: str, delay: str, seed: int, s: Scale, frictions: str = "none", **kw) -> RunConfig:
    return RunConfig(task="mnist", recipe=recipe, delay=delay, frictions=frictions, seed=seed, steps=s.mnist_steps,
                     log_every=s.mnist_log, **kw)


def mnist_delay(quick: bool, recipes: tuple[str, ...] = MNIST_RECIPES) -> list[RunConfig]:
    s = scale(quick)
    return [mnist(r, d, seed, s) for r in recipes for d in s.mnist_delays for seed in s.seeds]


def mnist_contamination(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    return [mnist(r, "sync", seed, s, frictions=CONTAMINATION) for r in ("pg", "is", "dg") for seed in s.seeds]


def mnist_samples(quick: bool) -> list[RunConfig]:
    """On-policy, k samples per image: batch = 100 images x k, batch-mean baseline for every k."""
    s = scale(quick)
    return [mnist(f"{r}+mean", "sync", seed, s, batch_size=100 * k, group_size=k)
            for r in ("pg", "dg") for k in s.samples_k for seed in s.seeds]


def vcpo_ablation(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    return [mnist(spec, d, seed, s) for spec in VCPO_ABLATIONS.values() for d in s.ablation_delays for seed in s.seeds]


def areal(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    return [mnist(r, f"bounded:{eta}", seed, s) for r in ("ppo", "decoupled_ppo") for eta in s.areal_etas
            for seed in s.seeds]


# -- token reversal ------------------------------------------------------------------------------------

RARE_P0 = 0.3  # rare discovery: decoy warm start, exact sequence has probability about RARE_P0^H at the start
BUGS = "bug(frac=0.2, kind=random)"
CORRUPTION = "reward(p=0.1)"


def token_settings(quick: bool) -> dict[str, tuple[str, str, dict]]:
    """Friction settings: name -> (delay, frictions spec, extra task options)."""
    s = scale(quick)
    rare = {"rare_p0": RARE_P0}
    return {
        "none": ("sync", "none", {}),
        "staleness": (s.tr_delay, "none", {}),
        "actor bugs": ("sync", BUGS, {}),
        "reward corruption": ("sync", CORRUPTION, {}),
        "rare discovery": ("sync", "none", rare),
        "all four": (s.tr_delay, f"{BUGS}+{CORRUPTION}", rare),
    }


def token(recipe: str, delay: str, frictions: str, extra: dict, seed: int, s: Scale, H: int | None = None,
          ) -> RunConfig:
    args = {"H": H or s.tr_H, "n_eval": s.tr_n_eval, **extra}
    return RunConfig(task="token_reversal", recipe=recipe, delay=delay, frictions=frictions, seed=seed,
                     steps=s.tr_steps, log_every=s.tr_log, n_actors=2, task_args=args)


def token_match(delay: str, frictions: str, extra: dict) -> dict:
    """Column filters selecting one friction setting in a results table (see common.runs_of)."""
    return {"delay": delay, "frictions": frictions, "rare_p0": extra.get("rare_p0")}


def token_frictions(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    return [token(r, d, f, x, seed, s) for r in TOKEN_METHODS for (d, f, x) in token_settings(quick).values()
            for seed in s.tr_seeds]


def token_horizons(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    d, f, x = token_settings(quick)["all four"]
    return [token(r, d, f, x, seed, s, H=h) for r in TOKEN_METHODS for h in s.tr_horizons for seed in s.tr_seeds]


def token_gac(quick: bool) -> list[RunConfig]:
    s = scale(quick)
    return [token(r, d, "none", {}, seed, s) for r in ("pg", "gac") for d in s.tr_gac_delays for seed in s.tr_seeds]
