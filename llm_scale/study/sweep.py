"""A study's sweep file and its runs: the file's tables (`load_sweep`), each run's settings and key (`Run`,
`make_run`), and the runs of the search and of the comparison (`search_runs`, `compare_runs`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from testbed.util.settings_file import read_settings

from ..config import TrainConfig, UsageError

SYNC, STALE = "sync", "stale"
MIN_SEEDS = 10  # the floor of [compare] min_seeds: fewer paired seeds never promote
GAP_TOL = 0.02  # the testbed's tolerance on a gap (testbed.validate.TOL)
# Settings left out of a run's key at these values: the behaviour of every run made before the setting existed
# (so those runs keep their keys); any other value, the default included, is part of the key.
KEY_NEUTRAL = {"max_grad_norm": 0.0}
# TrainConfig fields the study sets itself, per run: the sweep's [train] table may not set them.
STUDY_SET = ("recipe", "max_staleness", "lr", "seed", "out", "resume", "progress")


@dataclass(frozen=True)
class Sweep:
    """A study's sweep file: the common training settings, the search grid and rule, the comparison."""

    train: dict[str, Any]
    eval_every: int
    base: str = "grpo"
    etas: tuple[int, ...] = (2, 4)
    lrs: tuple[float, ...] = (1e-6,)
    search_seeds: tuple[int, ...] = (0, 1, 2)
    min_drop: float = 0.03
    min_se: float = 2.0
    last_evals: int = 1
    alpha: float | None = None  # family-wise one-sided level of the search over its cells (Holm); None: size rule only
    recipes: tuple[str, ...] = ("tis(c=2)+ess_lr", "dg", "gac", "decoupled_ppo")
    compare_seeds: tuple[int, ...] = (0, 1, 2)
    threshold: float = 0.5  # promote when the fraction of the gap closed is above this (interval's lower end)
    promote_alpha: float = 0.05  # one-sided level of each recipe's promotion: interval at 1 - 2 alpha
    min_seeds: int = MIN_SEEDS  # fresh paired seeds needed for a promotion verdict
    gap_tol: float = GAP_TOL  # a sync - stale gap below this leaves nothing to close (fraction NaN)
    source: str = ""

    @property
    def fresh_seeds(self) -> tuple[int, ...]:
        """The comparison seeds the promotion decision reads: those the search did not use."""
        return tuple(s for s in self.compare_seeds if s not in self.search_seeds)

    @property
    def eval_problems(self) -> int:
        """Held-out problems scored per run's accuracy: the evaluation size times the evaluations averaged."""
        return int(self.train.get("eval_size", TrainConfig.eval_size)) * self.last_evals


def read_tables(path: str | Path) -> dict[str, Any]:
    """The tables of a sweep file (TOML, or YAML with the same tables), parsed once (the experiments' one reader,
    `testbed.util.settings_file.read_settings`); one-line `UsageError` when it is missing or malformed."""
    return read_settings(path, "study: sweep file")


def load_sweep(path: str | Path, raw: dict[str, Any] | None = None) -> Sweep:
    """Read and check a sweep file (TOML with [train], [search], [compare]); one-line `UsageError` if bad.
    ``raw``: its tables already parsed (`read_tables`), less any table another reader owns (a pilot's [pilot])."""
    path = Path(path)
    raw = read_tables(path) if raw is None else raw
    unknown = set(raw) - {"train", "search", "compare"}
    if unknown:
        raise UsageError(f"study: {path}: unknown table(s) {sorted(unknown)}; allowed: train, search, compare")
    train, search, compare = dict(raw.get("train", {})), dict(raw.get("search", {})), dict(raw.get("compare", {}))
    fixed = sorted(set(train) & set(STUDY_SET))
    if fixed:
        raise UsageError(f"study: {path}: [train] may not set {fixed} (the study sets them per run)")
    names = {f for f in TrainConfig.__dataclass_fields__}
    bad = sorted(set(train) - names - {"eval_every"})
    if bad:
        raise UsageError(f"study: {path}: [train] has unknown setting(s) {bad}; see python -m llm_scale train --help")
    eval_every = int(train.pop("eval_every", 0))
    if eval_every < 1:
        raise UsageError(f"study: {path}: [train] eval_every must be >= 1 (the study scores greedy accuracy)")
    allowed_search = {"base", "eta", "lr", "seeds", "min_drop", "min_se", "last_evals", "alpha"}
    allowed_compare = {"recipes", "seeds", "threshold", "alpha", "min_seeds", "gap_tol"}
    for name, table, allowed in (("search", search, allowed_search), ("compare", compare, allowed_compare)):
        extra = sorted(set(table) - allowed)
        if extra:
            raise UsageError(f"study: {path}: [{name}] has unknown key(s) {extra}; allowed: {sorted(allowed)}")
    sweep = Sweep(
        train=train, eval_every=eval_every, base=str(search.get("base", "grpo")),
        etas=tuple(int(e) for e in search.get("eta", (2, 4))), lrs=tuple(float(v) for v in search.get("lr", (1e-6,))),
        search_seeds=tuple(int(s) for s in search.get("seeds", (0, 1, 2))),
        min_drop=float(search.get("min_drop", 0.03)), min_se=float(search.get("min_se", 2.0)),
        last_evals=int(search.get("last_evals", 1)), alpha=float(search["alpha"]) if "alpha" in search else None,
        recipes=tuple(str(r) for r in compare.get("recipes", Sweep.recipes)),
        compare_seeds=tuple(int(s) for s in compare.get("seeds", (0, 1, 2))),
        threshold=float(compare.get("threshold", 0.5)), promote_alpha=float(compare.get("alpha", 0.05)),
        min_seeds=int(compare.get("min_seeds", MIN_SEEDS)), gap_tol=float(compare.get("gap_tol", GAP_TOL)),
        source=str(path),
    )  # fmt: skip
    for name, value in (("[search] alpha", sweep.alpha), ("[compare] alpha", sweep.promote_alpha)):
        if value is not None and not 0.0 < value < 0.5:
            raise UsageError(f"study: {path}: {name} must lie in (0, 0.5) (a one-sided level), got {value}")
    if not 0.0 <= sweep.threshold <= 1.0:
        raise UsageError(f"study: {path}: [compare] threshold must lie in [0, 1] (a fraction of the gap), got {sweep.threshold}")
    if sweep.min_seeds < MIN_SEEDS:
        raise UsageError(f"study: {path}: [compare] min_seeds must be >= {MIN_SEEDS}, got {sweep.min_seeds}")
    if not sweep.gap_tol > 0:
        raise UsageError(f"study: {path}: [compare] gap_tol must be > 0, got {sweep.gap_tol}")
    if not sweep.etas or min(sweep.etas) < 1:
        raise UsageError(f"study: {path}: [search] eta must list staleness bounds >= 1, got {list(sweep.etas)}")
    if len(sweep.search_seeds) < 2 or len(sweep.compare_seeds) < 2:
        raise UsageError(f"study: {path}: the rule needs a standard error: at least 2 seeds in [search] and [compare]")
    from testbed.stabilizers import build

    for spec in (sweep.base, *sweep.recipes):
        try:
            build(spec)
            _cfg(sweep, spec, "thread", 1, sweep.lrs[0], 0, "x").validate()
        except (ValueError, TypeError) as exc:
            raise UsageError(f"study: {path}: recipe {spec!r}: {str(exc).splitlines()[0]}") from None
    return sweep


def _cfg(sweep: Sweep, recipe: str, mode: str, eta: int, lr: float, seed: int, out: str) -> TrainConfig:
    return TrainConfig(**{**sweep.train, "recipe": recipe, "mode": mode, "max_staleness": eta, "lr": lr, "seed": seed,
                          "eval_every": sweep.eval_every, "out": out, "progress": False})  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One training run of the study: its arm, cell and seed, and the configuration that names it."""

    stage: str  # search | compare
    arm: str  # sync, stale, or the recipe spec added to the stale base
    eta: int
    lr: float | None  # None: the model's default
    seed: int
    options: tuple[tuple[str, Any], ...]  # the TrainConfig fields (without out)

    @property
    def recipe(self) -> str:
        """The recipe spec the run trains."""
        return str(dict(self.options)["recipe"])

    @property
    def label(self) -> str:
        """The run in words, for a command's lines: arm, staleness bound, learning rate (or "default") and seed."""
        lr = "default" if self.lr is None else f"{self.lr:g}"
        return f"{self.arm} eta={self.eta} lr={lr} seed={self.seed}"

    @property
    def key(self) -> str:
        """Hash of the configuration: the run's directory name (same settings, same run, whatever the stage)."""
        keyed = {k: v for k, v in self.options if k not in KEY_NEUTRAL or v != KEY_NEUTRAL[k]}
        text = json.dumps(keyed, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def argv(self, out: Path) -> list[str]:
        """The ``train`` command line of this run."""
        args = ["train"]
        for name, value in self.options:
            flag = "--" + name.replace("_", "-")
            if value is None or name in ("tiny",):
                continue
            if isinstance(value, bool):
                args.append(flag if value else "--no-" + name.replace("_", "-"))
            elif isinstance(value, tuple | list):
                args += [flag, *map(str, value)]
            else:
                args += [flag, str(value)]
        return [*args, "--out", str(out)]


def make_run(sweep: Sweep, stage: str, arm: str, eta: int, lr: float, seed: int) -> Run:
    """The run of ``arm`` (sync, stale, or a recipe spec trained stale) in cell (eta, lr) with ``seed``."""
    recipe = sweep.base if arm in (SYNC, STALE) else arm
    mode = "sync" if arm == SYNC else ("thread" if sweep.train.get("mode", "thread") == "sync" else sweep.train.get("mode", "thread"))
    return config_run(_cfg(sweep, recipe, mode, 0 if arm == SYNC else eta, lr, seed, "-"), stage, arm, eta)


def config_run(cfg: TrainConfig, stage: str, arm: str, eta: int) -> Run:
    """The run that trains ``cfg`` (its ``out`` ignored), labelled with its ``stage``, ``arm`` and cell's ``eta``:
    its options are the fields that differ from `TrainConfig`'s defaults, the `KEY_NEUTRAL` fields, and always the
    recipe, mode, staleness bound, learning rate and seed; its key (`Run.key`) is a hash of them, so the same
    training settings are the same run (the same directory) in a study, a pilot or an LLM sweep."""
    defaults = asdict(TrainConfig())
    options = {k: v for k, v in asdict(cfg).items() if k not in ("out", "tiny") and v != defaults.get(k)}
    options.update({k: getattr(cfg, k) for k in KEY_NEUTRAL})  # always on the command line; in the key unless neutral
    options.update(recipe=cfg.recipe, mode=cfg.mode, max_staleness=cfg.max_staleness, lr=cfg.lr, seed=cfg.seed)
    return Run(stage, arm, eta, cfg.lr, cfg.seed, tuple(sorted(options.items())))


def search_runs(sweep: Sweep) -> list[Run]:
    runs = []
    for eta in sweep.etas:
        for lr in sweep.lrs:
            for seed in sweep.search_seeds:
                runs += [make_run(sweep, "search", SYNC, eta, lr, seed), make_run(sweep, "search", STALE, eta, lr, seed)]
    return runs


def compare_runs(sweep: Sweep, eta: int, lr: float) -> list[Run]:
    arms = (SYNC, STALE, *sweep.recipes)
    return [make_run(sweep, "compare", arm, eta, lr, seed) for arm in arms for seed in sweep.compare_seeds]


# -- runs on disk -----------------------------------------------------------------------------------
