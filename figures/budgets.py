"""The two settings of ``python -m figures``: the papers' budgets (the default) and ``--quick`` (CI).

Full setting (`FULL`), against the papers (docs/ALGORITHMS.md, "Published claims"):

* MNIST bandit (DG arXiv 2603.14608, DDG arXiv 2603.20521): MLP width 100, Adam 1e-3, batch 100,
  **10,000 learner steps**, actor delays **sync / 10 / 100 / 1000**, **5 seeds**; DG-1's samples per
  image k = 1, 2, 4, 8, 16 (and k = infinity as exact expected updates). Data: the embedded 5,000-image
  MNIST subset (4,000 train / 1,000 test; the papers use the full 60,000), so absolute error levels are
  not the papers'; the rules compare methods with each other (ratios), not with the papers' levels.
* The async-GRPO regime (`testbed.regimes`, ``async_grpo``; GAC-1, GAC-2, AREAL-1): MNIST at the
  regime's staleness levels (`Regime.stale`) and sync, 5 seeds, `ASYNC_STEPS` learner batches (the
  budget of the regime search, sweeps/regime/).
* Token reversal (DDG arXiv 2603.20521): **H = 10, M = 2**, the 2-layer, 2-head, d_model 64 decoder,
  **10 actors, 100 episodes per learner step, 1,000 learner steps, 3 seeds**, each friction alone and
  all four together; the horizon sweep over **H = 2, 4, .., 16** (every second length: the whole run
  fits one session on 2 cores; a method's longest solved H is then read to the nearest even length below)
  with all four frictions.
  The grid is fixed, not adaptive: the longest length any method is reported to solve is 13 (DG), so
  16 covers "the longest solved length plus two" unless a method here does better than any in the
  paper; the DDG-3 rule checks that coverage and says "inconclusive: extend the grid" when it fails.

Seeds: each experiment has a sequential design (testbed/util/sequential.py, figures/staging.py), fixed here
before any run. ``*_seeds`` are the first look's seeds (n0); claims still undecided there (and still
decidable by more seeds) get more seeds in stages up to the design's cap (seeds 0 .. cap - 1,
`Budget.all_seeds`): MNIST one step per batch and the async-GRPO regime look at 5, 10 and 15 seeds (about 8 CPU-minutes per MNIST cell of 5
seeds); token reversal's frictions panel (DDG-2), whose runs cost about 20 times more, at 3 and 6. The
horizon sweep (DDG-3) has one look at the papers' 3 seeds: its second look would train every method at
every length again (96 runs, about 29 minutes of the two hours on 2 cores, a quarter of the budget),
which the full run cannot afford beside everything else; DDG-3 is judged at 3 seeds, its interval at the
single look's level. ``python -m figures.estimate`` gives the wall time at the first look and the upper
bound where every claim runs to its cap.

Token reversal evaluates every ``tr_log`` = 200 learner steps (5 evaluations in 1,000 steps, the learning
curves' points): its claims read the final evaluation only (the last 5% of 5, 10 or 20 evaluations is the
last one), which is the same number whatever the interval (evaluation draws from its own stream, keyed by
the step, and changes nothing in training: tests/integration/test_token_reversal.py), and one evaluation
of 2,048 sampled sequences (and as many greedy ones where the test split is not enumerated) costs about 9
learner steps at H = 10 and 28 at H = 16, so evaluating every 100 steps would add about 4% (H = 10) to 12%
(H = 16) to a run for finer learning curves only.

Quick setting (`QUICK`): the same experiments with a handful of steps and two seeds, so that every
code path (training, intervals, verdicts, HTML) runs in CI in seconds; its verdicts are not evidence.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from testbed.util.sequential import Design

ASYNC_STEPS = 1000  # learner batches per run in the async-GRPO regime: the regime search's budget
# the sequential design (Budget.<kind>_design) each staged experiment's seeds follow
DESIGN_OF = {"mnist_delay": "mnist", "mnist_samples": "mnist", "async_grpo": "async", "token_frictions": "tr",
             "token_horizon": "horizon"}


@dataclass(frozen=True)
class Budget:
    name: str
    # MNIST, one step per batch (the papers' setting)
    mnist_steps: int
    mnist_log: int
    mnist_seeds: tuple[int, ...]
    mnist_delays: tuple[str, ...]
    samples_k: tuple[int, ...]
    ablation_delays: tuple[str, ...]
    # MNIST in the async-GRPO regime
    async_steps: int
    async_log: int
    async_seeds: tuple[int, ...]
    async_exact_until: int  # batches the exact-gradient probe measures (figures/gac_probe.py; GAC-1)
    # token reversal
    tr_H: int
    tr_M: int
    tr_steps: int
    tr_log: int
    tr_seeds: tuple[int, ...]
    tr_actors: int
    tr_episodes: int
    tr_n_eval: int
    tr_horizons: tuple[int, ...]
    # theory figures
    stability_steps: int
    quadratic_steps: int
    quadratic_seeds: tuple[int, ...]
    contamination_deltas: int
    # sequential designs (first look = the *_seeds above)
    mnist_design: Design
    async_design: Design
    tr_design: Design
    horizon_design: Design
    # a later registration's design (figures/registrations/, `figures.prereg.load_later`): the MNIST task's options of
    # the mnist_samples runs and oracles, the claims it judges (empty: every claim) and its file ("" for the first)
    mnist_task_args: tuple[tuple[str, Any], ...] = ()
    claims: tuple[str, ...] = ()
    registration: str = ""

    @property
    def quick(self) -> bool:
        return self.name == "quick"

    def all_seeds(self, kind: str) -> tuple[int, ...]:
        """Every seed the design of ``kind`` (mnist, async, tr, horizon) may use, first look first."""
        first = {"mnist": self.mnist_seeds, "async": self.async_seeds, "tr": self.tr_seeds, "horizon": self.tr_seeds}[kind]
        design = getattr(self, f"{kind}_design")
        if len(first) != design.n0:
            raise ValueError(f"{kind}: {len(first)} first-look seeds but the design's n0 is {design.n0}")
        return tuple(first) + tuple(s for s in range(max(first) + 1, max(first) + 1 + design.cap) if s not in first)[
            : design.cap - len(first)]


FULL = Budget(
    name="full",
    mnist_steps=10_000, mnist_log=100, mnist_seeds=(0, 1, 2, 3, 4),
    mnist_delays=("sync", "fixed:10", "fixed:100", "fixed:1000"), samples_k=(1, 2, 4, 8, 16),
    ablation_delays=("fixed:100", "fixed:1000"),
    async_steps=ASYNC_STEPS, async_log=50, async_seeds=(0, 1, 2, 3, 4), async_exact_until=200,
    tr_H=10, tr_M=2, tr_steps=1000, tr_log=200, tr_seeds=(0, 1, 2), tr_actors=10, tr_episodes=100, tr_n_eval=2048,
    tr_horizons=tuple(range(2, 17, 2)),
    stability_steps=6000, quadratic_steps=600, quadratic_seeds=(0, 1, 2), contamination_deltas=40,
    mnist_design=Design(5, 5, 15), async_design=Design(5, 5, 15), tr_design=Design(3, 3, 6),
    horizon_design=Design(3, 3, 3),
)

QUICK = Budget(
    name="quick",
    mnist_steps=20, mnist_log=10, mnist_seeds=(0, 1),
    mnist_delays=("sync", "fixed:10"), samples_k=(1, 2), ablation_delays=("fixed:10",),
    async_steps=6, async_log=3, async_seeds=(0, 1), async_exact_until=6,
    tr_H=3, tr_M=2, tr_steps=6, tr_log=3, tr_seeds=(0, 1), tr_actors=2, tr_episodes=20, tr_n_eval=32,
    tr_horizons=(2, 3),
    stability_steps=400, quadratic_steps=80, quadratic_seeds=(0,), contamination_deltas=12,
    mnist_design=Design(2, 1, 2), async_design=Design(2, 1, 2), tr_design=Design(2, 1, 2),
    horizon_design=Design(2, 1, 2),
)


_ACTIVE: list[Budget] = []  # the budget that replaces FULL in a confirmatory run (`activate`)


def activate(b: Budget | None) -> None:
    """Make ``b`` the full setting's budget (None: back to `FULL`); ``python -m figures --confirmatory`` sets
    `confirmatory_budget`."""
    _ACTIVE.clear()
    if b is not None:
        _ACTIVE.append(b)


def budget(quick: bool) -> Budget:
    return QUICK if quick else (_ACTIVE[-1] if _ACTIVE else FULL)


def confirmatory_budget(p: Any) -> Budget:
    """The full budget with a pre-registration's (``p``: `figures.prereg.Prereg`) seeds (first look: the block's
    first n0), sequential designs, async-regime logging interval and unit horizon grid; a later registration's
    (`figures.prereg.load_later`) also its claims, task options, budget fields and file."""
    d = {k: Design(int(v["n0"]), int(v["step"]), int(v["cap"])) for k, v in p.section("designs").items()}
    ddg = p.section("ddg")
    later = p.later
    extra: dict[str, Any] = {}
    if later:  # a later registration: its claims, task options and budget fields, its file
        extra = {"claims": tuple(later["claims"]), "registration": p.file,
                 "mnist_task_args": tuple(sorted(later["task_args"].items())),
                 **{k: tuple(v) if isinstance(v, list) else v for k, v in later["budget"].items()}}
    return replace(
        FULL, name="confirmatory",
        mnist_seeds=p.seeds("mnist")[: d["mnist"].n0], async_seeds=p.seeds("async")[: d["async"].n0],
        tr_seeds=p.seeds("tr")[: d["tr"].n0], async_log=int(p.section("phase")["async_log"]),
        async_exact_until=int(p.section("gac")["exact_until"]),
        tr_horizons=tuple(range(int(ddg["h_min"]), int(ddg["h_max"]) + 1)),
        mnist_design=d["mnist"], async_design=d["async"], tr_design=d["tr"], horizon_design=d["horizon"], **extra)


def lag_of(delay: str) -> int:
    """The nominal lag of a delay spec ("sync" -> 0, "fixed:D" -> D, "uniform:D" -> D, "bounded:eta,..." -> eta)."""
    if delay == "sync":
        return 0
    return int(delay.split(":")[1].split(",")[0])
