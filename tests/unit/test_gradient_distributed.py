"""gac and ess_lr under torch.distributed (2 CPU processes, gloo): the module's reduction rule.

Every case must give exactly the single-process result on the full gradient: DTensor shards
(FSDP2, uneven split), a 2-D mesh whose replicated dimension must *not* be summed (HSDP),
plain flat shards with ``sharded=True`` (FSDP1 / ZeRO), and plain replicated gradients (DDP).
ess_lr's ESS is over the sequences of all ranks.
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from testbed.stabilizers import BatchStats
from testbed.stabilizers.gradient import ESSLR, GAC

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

SHAPES = [(5,), (3, 2)]
STEPS = 5


def _grads(step: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    base = [torch.randn(s, generator=torch.Generator().manual_seed(7)) for s in SHAPES]
    # strongly aligned with a common direction, so the bands (skip / project / unchanged) all occur
    return [b * (1.0 if step % 3 else -0.2) + 0.4 * torch.randn(s, generator=g) for b, s in zip(base, SHAPES)]


def _run(gac: GAC, make_grad) -> list[tuple[list[torch.Tensor], dict, float]]:
    out = []
    for step in range(STEPS):
        params = [SimpleNamespace(grad=make_grad(g)) for g in _grads(step)]
        res = gac(params, BatchStats())
        out.append(([p.grad for p in params], res.metrics, res.lr_scale))
    return out


def _worker(rank: int, init_file: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    try:
        kw = {"t_low": 0.3, "t_high": 0.97, "max_skips": 1}
        reference = _run(GAC(**kw), lambda g: g.clone())  # replicated (DDP): no reduction at all

        def same(run, to_full):
            for (grads, metrics, lr), (ref_grads, ref_metrics, ref_lr) in zip(run, reference):
                assert lr == ref_lr and metrics.keys() == ref_metrics.keys()
                for k in metrics:  # an undefined cosine (the first step) is NaN on both sides
                    assert metrics[k] == pytest.approx(ref_metrics[k], abs=1e-6, nan_ok=True), k
                for g, r in zip(grads, ref_grads):
                    assert torch.allclose(to_full(g), r, atol=1e-6)

        assert {m["projected"] for _, m, _ in reference} == {0.0, 1.0}
        mesh = init_device_mesh("cpu", (2,))
        same(_run(GAC(**kw), lambda g: distribute_tensor(g, mesh, [Shard(0)])), lambda g: g.full_tensor())
        mesh2 = init_device_mesh("cpu", (2, 1), mesh_dim_names=("replicate", "shard"))
        same(_run(GAC(**kw), lambda g: distribute_tensor(g, mesh2, [Replicate(), Shard(0)])), lambda g: g.full_tensor())

        # plain flat shards (FSDP1-like): rank r holds rows r::2 of each gradient's flat view
        def shard(g):
            return g.reshape(-1)[rank::2].clone()

        def unshard(g):
            even, odd = _all_gather_1d(g)
            full = torch.zeros(even.numel() + odd.numel())
            full[0::2], full[1::2] = even, odd
            return full

        run = _run(GAC(sharded=True, **kw), shard)
        for (grads, metrics, lr), (ref_grads, ref_metrics, ref_lr) in zip(run, reference):
            assert lr == ref_lr and metrics["grad_cos_prev"] == pytest.approx(ref_metrics["grad_cos_prev"], abs=1e-6, nan_ok=True)
            for g, r in zip(grads, ref_grads):
                assert torch.allclose(unshard(g), r.reshape(-1), atol=1e-6)

        # ess over all ranks: rank 0 holds w = [1, 3], rank 1 holds w = [2] (and a tokenless one)
        if rank == 0:
            stats = BatchStats(seq_log_ratio=torch.log(torch.tensor([1.0, 3.0])))
        else:
            stats = BatchStats(seq_log_ratio=torch.log(torch.tensor([2.0, 9.0])), seq_mask=torch.tensor([True, False]))
        rho = (1 + 3 + 2) ** 2 / (3 * (1 + 9 + 4))
        res = ESSLR()([], stats)
        assert res.metrics["ess"] == pytest.approx(rho) and res.lr_scale == pytest.approx(math.sqrt(rho))
        local = ESSLR(distributed=False)([], stats).metrics["ess"]
        assert local == pytest.approx(0.8 if rank == 0 else 1.0)
    finally:
        dist.destroy_process_group()


def _all_gather_1d(g: torch.Tensor) -> list[torch.Tensor]:
    """Every rank's 1-D tensor (sizes may differ: gloo needs equal sizes, so pad and trim)."""
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(2)]
    dist.all_gather(sizes, torch.tensor([g.numel()]))
    n = max(int(k) for k in sizes)
    padded = [torch.zeros(n) for _ in range(2)]
    dist.all_gather(padded, torch.cat([g, torch.zeros(n - g.numel())]))
    return [q[: int(k)] for q, k in zip(padded, sizes)]


def test_gac_and_ess_lr_reduce_correctly_across_two_ranks(tmp_path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    # Import once here (DTensor's first use pulls in torch._dynamo, seconds) and fork, so the two
    # workers start warm instead of re-importing torch.
    import torch._dynamo
    import torch.distributed.tensor  # noqa: F401

    mp.start_processes(_worker, args=(str(tmp_path / "init"),), nprocs=2, join=True, start_method="fork")
