"""A run's configuration: `RunConfig` (what the user sets; its hash is the run id) and `RunSpec` (the same,
resolved and parsed once: recipe, staleness model, frictions and task options as typed objects, and the run id
computed once)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from testbed.delay import Staleness, parse_staleness
from testbed.frictions import Frictions, parse_frictions
from testbed.regimes import REGIMES, get_regime
from testbed.stabilizers import AGG_MODES, Recipe, build
from testbed.stabilizers.spec import SpecError
from testbed.tasks import runner_defaults, task_options
from testbed.util.seeding import SCHEME

DEFAULTS: dict[str, Any] = {"batch_size": 100, "lr": 1e-3, "n_actors": 1, "agg": "token-mean", "delay": "sync",
                            "group_size": 1, "epochs": 1, "minibatches": 1}
OPTIMIZERS = ("adam", "sgd")
PROXIMAL = ("current", "none")
# How a batch is cut into minibatches: "groups" = contiguous runs of whole prompt groups, in order, the same
# order every epoch (verl: ppo_mini_batch_size x n, no shuffling across groups); "random" = a fresh permutation
# of the samples per epoch (groups split across minibatches).
MINIBATCH_SPLITS = ("groups", "random")
# Fields left out of the run id at these values (runs recorded before the field existed keep their ids).
_ID_OMITTED = {"minibatch_split": "random"}
# Fields that fix the shape of the computation: runs trained in one loop must agree on them (the group size and
# how batches are cut too: a bandit's groups are computed once per group (`grouped_logits`), for all runs or none).
SHAPE_FIELDS = ("task", "task_args", "steps", "log_every", "batch_size", "n_actors", "epochs",
                "minibatches", "group_size", "minibatch_split")

# How the command line (`python -m testbed run`, testbed/cli.py) shows each field, in the order listed (fields
# not listed follow): its flag is --NAME (``_`` as ``-``), its type the field's (an integer at least ``min``,
# default 1; a float > 0), its default the field's; here the help line, the allowed values, other spellings.
# ``task_args`` has flags of its own (the task's options).
FLAGS: dict[str, dict[str, Any]] = {
    "task": {"help": 'task name, or name with options, e.g. "token_reversal(H=10, M=2)" (see `python -m testbed '
                     'list`)'},
    "recipe": {"help": 'stabilizer spec, e.g. dg, "tis(c=2)", "dg+gac"'},
    "delay": {"help": "staleness model: sync, fixed:D, uniform:D, geometric:p,max, pareto:alpha,max, "
                      "bounded:eta[,speed], and +mixed:q (default: the regime's, else sync)"},
    "frictions": {"flags": ("--friction", "--frictions"),
                  "help": 'frictions, e.g. "bug(frac=0.2, kind=random)+reward(p=0.1)+mismatch(sigma=0.1)"'},
    "steps": {},
    "seed": {"min": 0, "help": "first seed"},
    "batch_size": {"help": f"default: the task's, else {DEFAULTS['batch_size']}"},
    "lr": {"help": f"default: the task's, else {DEFAULTS['lr']}"},
    "n_actors": {"help": "actors per learner step (each has its own lag)"},
    "regime": {"choices": tuple(REGIMES),
               "help": "preset of the learner settings below (testbed/regimes.py); explicit flags win"},
    "group_size": {"help": "samples per context (GRPO groups)"},
    "epochs": {"help": "passes over each batch (PPO/GRPO trainers' K)"},
    "minibatches": {"help": "optimizer steps per pass (the batch split in N)"},
    "minibatch_split": {"choices": MINIBATCH_SPLITS,
                        "help": "how a batch is cut into minibatches: groups (whole prompt groups, in order, as verl; "
                                "the default when group-size > 1) or random (a permutation of the samples per epoch)"},
    "log_every": {"help": "diagnostics interval in steps"},
    "agg": {"choices": AGG_MODES, "help": "loss aggregation (verl's mode names)"},
    "optimizer": {"choices": OPTIMIZERS},
    "proximal": {"choices": PROXIMAL},
}


@dataclass
class RunConfig:
    """Everything that determines a run (its hash is the run id). ``None`` = the task's default.

    ``proximal="current"``: the proximal policy of decoupled PPO is the learner's policy at the start
    of the batch (AReaL's definition; with one step per batch, the current policy). ``epochs`` x
    ``minibatches`` optimizer steps per batch (PPO/GRPO trainers' regime; 1 x 1 is one step per batch).
    ``minibatch_split`` (`MINIBATCH_SPLITS`): default ``groups`` wherever groups exist (group_size > 1),
    else ``random``.
    """

    task: str = "mnist"
    recipe: str = "pg"
    delay: str | None = None
    frictions: str = "none"
    seed: int = 0
    steps: int = 1000
    batch_size: int | None = None
    lr: float | None = None
    n_actors: int | None = None
    group_size: int | None = None
    epochs: int | None = None
    minibatches: int | None = None
    log_every: int = 100
    agg: str | None = None
    optimizer: str = "adam"
    proximal: str = "current"
    regime: str = "one_step"
    minibatch_split: str | None = None
    task_args: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def resolved(self) -> RunConfig:
        """A copy with every ``None`` filled from the regime (testbed/regimes.py), then the task's
        ``runner_defaults``, then DEFAULTS."""
        values = asdict(self)
        preset = get_regime(self.regime).for_task(self.task)
        task_defaults = runner_defaults(self.task)
        for key, value in values.items():
            if value is None:
                values[key] = preset.get(key, task_defaults.get(key, DEFAULTS.get(key)))
        if values["minibatch_split"] is None:
            values["minibatch_split"] = "groups" if values["group_size"] > 1 else "random"
        values["task_args"] = dict(sorted(values["task_args"].items()))
        return RunConfig(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def run_id(self) -> str:
        """Hash of the resolved config and the seed scheme: the key under which results are stored."""
        payload = {**asdict(self.resolved()), "seed_scheme": SCHEME}
        for key, value in _ID_OMITTED.items():
            if payload[key] == value:
                del payload[key]
        text = json.dumps(payload, sort_keys=True, default=str)
        return hashlib.sha1(text.encode()).hexdigest()[:12]

    def parse(self) -> RunSpec:
        """Check every field and parse every spec once; the typed result the runner uses."""
        task_options(self.task)  # raises for an unknown task
        cfg = self.resolved()
        from testbed.tasks import coerce_option

        task_args = {k: coerce_option(cfg.task, k, v) for k, v in cfg.task_args.items()}
        ints = ("steps", "batch_size", "n_actors", "group_size", "epochs", "minibatches", "log_every")
        for name in ints:
            value = getattr(cfg, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SpecError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
            raise SpecError(f"seed must be an integer >= 0, got {cfg.seed!r}")
        if isinstance(cfg.lr, bool) or not isinstance(cfg.lr, int | float) or not 0 < cfg.lr < float("inf"):
            raise SpecError(f"lr must be a finite number > 0, got {cfg.lr!r}")
        for name, allowed in (("agg", AGG_MODES), ("optimizer", OPTIMIZERS), ("proximal", PROXIMAL),
                              ("minibatch_split", MINIBATCH_SPLITS)):
            if getattr(cfg, name) not in allowed:
                raise SpecError(f"{name} must be one of {', '.join(allowed)}, got {getattr(cfg, name)!r}")
        if cfg.batch_size < cfg.n_actors:
            raise SpecError(f"batch_size ({cfg.batch_size}) must be >= n_actors ({cfg.n_actors})")
        sizes = chunk_sizes(cfg.batch_size, cfg.n_actors)
        if any(size % cfg.group_size for size in sizes):
            raise SpecError(f"group_size {cfg.group_size} must divide every actor's share of the batch ({sizes})")
        if cfg.batch_size % cfg.minibatches:
            raise SpecError(f"minibatches ({cfg.minibatches}) must divide batch_size ({cfg.batch_size})")
        if cfg.minibatch_split == "groups" and (cfg.batch_size // cfg.minibatches) % cfg.group_size:
            raise SpecError(f"minibatch_split 'groups' needs whole groups in every minibatch: minibatches "
                            f"({cfg.minibatches}) must divide the number of groups per batch "
                            f"({cfg.batch_size}/{cfg.group_size}); or use minibatch_split 'random'")
        return RunSpec(cfg, build(cfg.recipe), parse_staleness(cfg.delay), parse_frictions(cfg.frictions), task_args,
                       cfg.run_id)

    def validate(self) -> RunConfig:
        """Check every field (building the recipe, parsing the specs); return the resolved config."""
        return self.parse().config


@dataclass
class RunSpec:
    """A run's config with its specs parsed: the recipe (fresh state: one run's), staleness model,
    frictions and task options as typed objects, and the run id (``config.run_id``, computed once)."""

    config: RunConfig  # resolved
    recipe: Recipe
    staleness: Staleness
    frictions: Frictions
    task_args: dict[str, Any]
    run_id: str

    @property
    def shape(self) -> tuple:
        """What runs trained in one loop must share (`SHAPE_FIELDS`)."""
        cfg = self.config
        return tuple(sorted(self.task_args.items()) if f == "task_args" else getattr(cfg, f) for f in SHAPE_FIELDS)


def chunk_sizes(batch_size: int, n_actors: int) -> list[int]:
    """How a batch is split among actors: as evenly as possible, the first ones one larger."""
    base, extra = divmod(batch_size, n_actors)
    return [base + (1 if a < extra else 0) for a in range(n_actors)]


class Loop(list):
    """The configs of one loop (a list of `RunConfig`) with what the plan already made of them: ``specs``, their
    parsed `RunSpec` (each used by one runner only: a recipe holds one run's state), and ``task``, the built
    task they share. `testbed.runner.Runner` takes either a plain list or a Loop."""

    def __init__(self, configs: list[RunConfig], specs: list[RunSpec], task: Any) -> None:
        super().__init__(configs)
        self.specs, self.task = specs, task
