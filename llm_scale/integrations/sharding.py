"""Which gradients a host's optimizer holds, and a recipe's gradient transforms made exact on them (or refused).

A gradient transform that reads a global quantity (gac's cosine between consecutive gradients, clip_norm's
norm, ess_lr's ESS over the batch's sequences) is exact only when every rank reduces its partial sums over
the ranks that hold *different* parts of the gradient. What a rank holds (`layout`):

* ``local``: torch.distributed is not initialised (one process): nothing to reduce.
* ``dtensor``: the gradients are DTensors (FSDP2, ``fully_shard``; verl's ``strategy: fsdp2``): the
  transforms reduce over the mesh dimensions the tensor is sharded on (testbed/stabilizers/gradient.py).
* ``flat_shard``: FSDP1 (``FullyShardedDataParallel``; verl's default ``strategy: fsdp``): the optimizer
  holds ``FlatParameter`` shards (``use_orig_params=False``) or original parameters flattened into them
  (``use_orig_params=True``, attribute ``_fsdp_flattened``); each rank's ``.grad`` is a plain tensor
  holding a disjoint slice.
* ``zero_partition``: DeepSpeed ZeRO: stage 3 parameters (attribute ``ds_id``) or a ZeRO optimizer
  (class ``DeepSpeedZeroOptimizer*``, possibly wrapped): each rank holds a disjoint partition.
* ``replicated``: plain tensors under torch.distributed (DDP): every rank holds the whole gradient.

`configure` then sets, per transform of the recipe: gac ``sharded=True`` on ``flat_shard`` and
``zero_partition`` (its dot products are summed over the default process group), ess_lr unchanged (its
ESS is always over the sequences of every rank), clip_norm refused on plain shards (torch's
``clip_grad_norm_`` would clip by one rank's norm: use the host's own clipping, which reduces), and any
other transform refused on plain shards, since it does not say how it reduces. FSDP1's ``NO_SHARD``
strategy holds whole gradients in flat parameters; it is read as ``replicated`` (shard size = whole size).
"""

from __future__ import annotations

from typing import Any

from testbed.stabilizers import Recipe
from testbed.stabilizers.gradient import ESSLR, GAC, ClipNorm, dist_ready

LAYOUTS = ("local", "replicated", "dtensor", "flat_shard", "zero_partition")
PLAIN_SHARDS = ("flat_shard", "zero_partition")


def _is_dtensor(t: Any) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - very old torch
        return False
    return isinstance(t, DTensor)


def _no_shard(p: Any) -> bool:
    """FSDP1's NO_SHARD: a flat parameter whose shard is the whole (unpadded) flat parameter."""
    sharded, whole = getattr(p, "_sharded_size", None), getattr(p, "_unpadded_unsharded_size", None)
    return sharded is not None and sharded == whole


def _zero_optimizer(optimizer: Any) -> bool:
    """True when ``optimizer`` (or one it wraps, e.g. accelerate's AcceleratedOptimizer) is a DeepSpeed ZeRO one."""
    seen = 0
    while optimizer is not None and seen < 4:
        if type(optimizer).__name__.startswith("DeepSpeedZeroOptimizer"):
            return True
        optimizer, seen = getattr(optimizer, "optimizer", None), seen + 1
    return False


def layout(params: list[Any], optimizer: Any = None) -> str:
    """What the ranks hold of the gradients of ``params`` (one of `LAYOUTS`; module docstring)."""
    if not dist_ready():
        return "local"
    if any(_is_dtensor(p) or _is_dtensor(getattr(p, "grad", None)) for p in params):
        return "dtensor"
    if _zero_optimizer(optimizer) or any(hasattr(p, "ds_id") for p in params):
        return "zero_partition"
    flat = [p for p in params if getattr(p, "_is_flat_param", False) or getattr(p, "_fsdp_flattened", False)]
    if flat:
        return "replicated" if all(_no_shard(p) for p in flat) else "flat_shard"
    return "replicated"


def refusal(spec: str, kind: str) -> str | None:
    """The one line that refuses ``spec``'s transforms on gradients of layout ``kind``; None when they are exact."""
    if kind not in PLAIN_SHARDS:
        return None
    host = "FSDP1 flat parameters" if kind == "flat_shard" else "DeepSpeed ZeRO partitions"
    return (f"gradient transform {{name}} of recipe {spec!r} cannot be exact on {host} (each rank holds a slice of "
            f"the gradient and {{name}} does not reduce over ranks): {{fix}}")  # fmt: skip


def configure(recipe: Recipe, kind: str) -> Recipe:
    """Make ``recipe``'s gradient transforms reduce correctly on layout ``kind`` (in place), or raise ValueError
    with one line naming the setting to change."""
    if kind not in LAYOUTS:
        raise ValueError(f"gradient layout must be one of {', '.join(LAYOUTS)}; got {kind!r}")
    line = refusal(recipe.spec, kind)
    for t in recipe.transforms:
        if isinstance(t, GAC):
            t.sharded = kind in PLAIN_SHARDS
        elif isinstance(t, ESSLR):
            continue  # always reduced over every rank's sequences
        elif line is not None:
            fix = ("drop it and use the host's clipping (TRL max_grad_norm, verl actor.grad_clip), which reduces "
                   "across ranks" if isinstance(t, ClipNorm)
                   else "use FSDP2 (verl actor.strategy=fsdp2; accelerate fsdp_version: 2), whose DTensor "
                        "gradients it reduces")  # fmt: skip
            raise ValueError(line.format(name=t.name, fix=fix))
    return recipe
