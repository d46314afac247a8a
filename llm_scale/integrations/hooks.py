"""Gradient transforms around someone else's ``optimizer.step()`` (shared by the verl and TRL plugins).

The loss calls of an accumulation window deposit their per-sequence log-ratios (`collect`);
just before the step, `before_step` applies the recipe's transforms to the optimizer's gradients
with those statistics (hence ESS) and multiplies every param group's lr by the transforms' scale;
`after_step` restores the lr, so the scale lasts for that step only (as ``Recipe.step`` does). A
scale of exactly 0 (gac's skip) makes the step a no-op, as ``Recipe.step`` skips it: the gradients
are set to None, and torch optimizers leave parameters without a gradient (and their state) alone.

Before its first step on an optimizer, `before_step` reads what the ranks hold of the gradients
(`sharding.layout`: DTensor shards, FSDP1 flat shards, ZeRO partitions, replicated) and makes the
recipe's transforms reduce over it, or refuses with one line (`sharding.configure`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from testbed.stabilizers import BatchStats, Recipe
from testbed.stabilizers.numerics import sequence_log_ratio
from testbed.util.files import atomic_open

from . import sharding


def needs_batch_stats(recipe: Recipe) -> list[str]:
    """The names of ``recipe``'s gradient transforms that read the batch's sequence log-ratios (ess_lr's ESS)."""
    from testbed.stabilizers.gradient import ESSLR

    return [t.name for t in recipe.transforms if isinstance(t, ESSLR)]


class TransformStep:
    def __init__(self) -> None:
        self.pending: list[tuple[Tensor, Tensor]] = []
        self.saved_lr: dict[int, list[float]] = {}
        self.history: list[dict[str, float]] = []
        self.layouts: dict[int, str] = {}  # per optimizer id: the gradient layout the recipe was configured for

    def collect(self, logp: Tensor, behavior_logp: Tensor, mask: Tensor) -> None:
        """Record the sequence log-ratios of one loss call (detached)."""
        with torch.no_grad():
            self.pending.append((sequence_log_ratio(logp.detach(), behavior_logp, mask), mask.bool().any(dim=-1)))

    def batch_stats(self) -> BatchStats:
        """The statistics gathered since the last step (emptied); no ratios if no loss call recorded any."""
        stats = BatchStats()
        if self.pending:
            stats.seq_log_ratio = torch.cat([lr.reshape(-1).float() for lr, _ in self.pending])
            stats.seq_mask = torch.cat([ok.reshape(-1) for _, ok in self.pending])
        self.pending.clear()
        return stats

    def before_step(self, recipe: Recipe, optimizer: Any, params: Any = None) -> dict[str, float]:
        """Transform the gradients of ``params`` (default: the optimizer's) and scale lr; return the metrics."""
        if params is None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
        if id(optimizer) not in self.layouts:
            self.layouts[id(optimizer)] = kind = sharding.layout(params, optimizer)
            sharding.configure(recipe, kind)
        scale, raw = recipe.transform_gradients(params, self.batch_stats())
        scale = float(scale)
        metrics = {key: float(value) for key, value in raw.items()}
        self.history.append(metrics)
        if scale == 0.0:
            for p in params:
                p.grad = None
        elif scale != 1.0:
            self.saved_lr[id(optimizer)] = [group["lr"] for group in optimizer.param_groups]
            for group in optimizer.param_groups:
                group["lr"] = group["lr"] * scale
        return metrics

    def after_step(self, optimizer: Any) -> None:
        saved = self.saved_lr.pop(id(optimizer), None)
        if saved is not None:
            for group, lr in zip(optimizer.param_groups, saved, strict=True):
                group["lr"] = lr


# -- the recipe's state in a host's checkpoint ------------------------------------------------------

STATE_FILE = "stabilizer_state.pt"
STATE_FORMAT = 1


def write_state(path: str | Path, payload: dict[str, Any]) -> Path:
    """``torch.save`` ``payload`` (tagged with `STATE_FORMAT`) to ``path`` atomically (testbed/util/files.py)."""
    path = Path(path)
    with atomic_open(path, "wb") as fh:
        torch.save({**payload, "format": STATE_FORMAT}, fh)
    return path


def read_state(path: str | Path) -> dict[str, Any] | None:
    """The payload written by `write_state` at ``path``; None when there is no file.

    ValueError (one line, naming the file) when the file is unreadable or of another format: a
    damaged file must not pass for "no state".
    """
    path = Path(path)
    if not path.is_file():
        return None
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"stabilizer state {path} is unreadable ({type(exc).__name__}: {' '.join(str(exc).split())[:200]}); "
                         "delete it to restart the stabilizer from nothing, or resume from another checkpoint") from None  # fmt: skip
    found = payload.get("format") if isinstance(payload, dict) else None
    if found != STATE_FORMAT:
        raise ValueError(f"stabilizer state {path} has format {found!r}; this version reads format {STATE_FORMAT}")
    return payload


def save_recipe_state(recipe: Recipe, directory: str | Path) -> Path:
    """Write ``recipe.state_dict()`` (gac's reference gradient and history, a gate's random stream, ...) to
    ``directory/stabilizer_state.pt`` atomically; return the path."""
    return write_state(Path(directory) / STATE_FILE, {"spec": recipe.spec, "recipe": recipe.state_dict()})


def read_recipe_state(directory: str | Path) -> dict[str, Any] | None:
    """The payload of `save_recipe_state` in ``directory`` (None when there is none); ValueError when damaged."""
    return read_state(Path(directory) / STATE_FILE)


def load_recipe_state(recipe: Recipe, directory: str | Path) -> bool:
    """Load the state saved in ``directory`` into ``recipe``; False when the checkpoint holds none.

    ValueError when the file is damaged or was written for another recipe spec.
    """
    payload = read_recipe_state(directory)
    if payload is None:
        return False
    if payload.get("spec") != recipe.spec:
        raise ValueError(f"stabilizer state in {Path(directory) / STATE_FILE} is for recipe {payload.get('spec')!r}, "
                         f"not {recipe.spec!r}; resume with the same recipe")  # fmt: skip
    recipe.load_state_dict(payload["recipe"])
    return True


def missing_state_warning(host: str, checkpoint: str | Path, spec: str) -> str:
    """The one line printed when a resumed host run finds no stabilizer state to restore."""
    return (f"WARNING: {host} resumed from {checkpoint}, which holds no stabilizer state ({STATE_FILE}): recipe {spec!r} "
            "restarts its state (gac's reference gradient, ess_lr, gate streams) from nothing")  # fmt: skip
