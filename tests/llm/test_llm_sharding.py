"""Gradient transforms on sharded gradients, through the plugins' own paths, with 2 gloo ranks on CPU.

Each rank holds a part of the same gradients (DTensor shards as FSDP2 gives them, a real FSDP1
FlatParameter shard, ZeRO-3-style partitions, or whole replicated gradients) and half of the batch's
sequences; the recipe gac + ess_lr runs through the verl optimizer hook (`install_gradient_transforms`,
where verl is installed; else the same `TransformStep` behind a torch optimizer hook) and through the TRL
callback. Every rank's decisions (gac's cosine, projection and skip, ess_lr's ESS and lr scale) and the
parameters after each SGD step must equal the single-process run on the full gradient and all sequences.
"""

from __future__ import annotations

import importlib.util
import os
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")

SPEC = "gac(t_low=0.3, t_high=0.97, max_skips=1)+ess_lr"
STEPS = 5
N_SEQ = 8
LAYOUTS = ("dtensor", "flat_shard", "zero_partition", "replicated")
PATHS = ("hook", *(p for p in ("trl", "verl") if importlib.util.find_spec(p)))  # verl runs in its own venv


def _full_grad(step: int) -> torch.Tensor:
    """The step's full gradient of Linear(3, 2), flattened as FSDP1 flattens it (weight, then bias)."""
    base = torch.randn(8, generator=torch.Generator().manual_seed(7))
    noise = torch.randn(8, generator=torch.Generator().manual_seed(100 + step))
    return base * (1.0 if step % 3 else -0.2) + 0.4 * noise  # skip, project and pass all occur


def _logp(step: int) -> torch.Tensor:
    return 0.3 * torch.randn(N_SEQ, 3, generator=torch.Generator().manual_seed(500 + step))


def _run(path: str, params: list, set_grads, rows: slice, world: tuple[int, int] | None = None) -> list[dict]:
    """STEPS steps of SGD(lr=1) on ``params`` with the recipe on ``path``; per step the metrics and the parameters."""
    from llm_scale.integrations.hooks import TransformStep
    from testbed.stabilizers import build

    opt = torch.optim.SGD(params, lr=1.0)
    if path == "verl":
        from llm_scale.integrations import verl as plugin

        plugin._HOOKS.recipes.clear()
        plugin.install_gradient_transforms(opt, SPEC)

        def collect(logp, mask):
            plugin._HOOKS.step.collect(logp, torch.zeros_like(logp), mask)

        def metrics():
            return plugin._HOOKS.last_metrics
    elif path == "trl":
        from llm_scale.integrations.trl import GradientTransformCallback

        cb = GradientTransformCallback(build(SPEC), batch_stats=True)  # as StabilizerGRPOTrainer builds it
        model = SimpleNamespace(parameters=lambda: iter(params))

        def collect(logp, mask):
            cb.collect(logp, torch.zeros_like(logp), mask)

        def metrics():
            return cb.step.history[-1]
    else:
        recipe, step = build(SPEC), TransformStep()

        def pre(o, a, k):  # what verl's optimizer hook does (`_TransformHooks.pre_hook`)
            step.before_step(recipe, o)

        opt.register_step_pre_hook(pre)
        opt.register_step_post_hook(lambda o, a, k: step.after_step(o))

        def collect(logp, mask):
            step.collect(logp, torch.zeros_like(logp), mask)

        def metrics():
            return step.history[-1]

    out = []
    for s in range(STEPS):
        set_grads(_full_grad(s))
        collect(_logp(s)[rows], torch.ones(N_SEQ, 3)[rows])
        if path == "trl":
            cb.on_pre_optimizer_step(None, None, None, model=model, optimizer=opt)
            opt.step()
            cb.on_optimizer_step(None, None, None, optimizer=opt)
        else:
            opt.step()
        out.append({"metrics": dict(metrics()), "params": [p.detach().clone() for p in params]})
    return out


def _reference() -> list[dict]:
    """One process, the full gradient (weight (2, 3) and bias (2,)) and all sequences."""
    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(2))]

    def set_grads(g):
        params[0].grad, params[1].grad = g[:6].reshape(2, 3).clone(), g[6:].clone()

    run = _run("hook", params, set_grads, slice(None))
    for r in run:
        r["params"] = torch.cat([p.reshape(-1) for p in r["params"]])
    return run


def _gather(local: torch.Tensor) -> torch.Tensor:
    parts = [torch.zeros_like(local) for _ in range(2)]
    dist.all_gather(parts, local.contiguous())
    return torch.cat(parts)


def _worker(rank: int, init_file: str, out_dir: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=2)
    rows = slice(rank * N_SEQ // 2, (rank + 1) * N_SEQ // 2)  # each rank holds half the sequences
    results = {}
    try:
        for path in PATHS:
            for kind in LAYOUTS:
                if kind == "dtensor":
                    mesh = init_device_mesh("cpu", (2,))
                    params = [
                        torch.nn.Parameter(distribute_tensor(torch.zeros(2, 3), mesh, [Shard(0)])),
                        torch.nn.Parameter(distribute_tensor(torch.zeros(2), mesh, [Shard(0)])),
                    ]

                    def set_grads(g, params=params, mesh=mesh):
                        params[0].grad = distribute_tensor(g[:6].reshape(2, 3), mesh, [Shard(0)])
                        params[1].grad = distribute_tensor(g[6:].clone(), mesh, [Shard(0)])

                    def full(ps):
                        return torch.cat([p.full_tensor().reshape(-1) for p in ps])
                elif kind == "flat_shard":  # a real FSDP1 FlatParameter (use_orig_params=False), 4 of 8 elements
                    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

                    model = FSDP(torch.nn.Linear(3, 2), device_id=torch.device("cpu"), use_orig_params=False)
                    with torch.no_grad():
                        for p in model.parameters():
                            p.zero_()
                    params = list(model.parameters())
                    assert len(params) == 1 and params[0].numel() == 4 and params[0]._is_flat_param

                    def set_grads(g, params=params):
                        params[0].grad = g[4 * rank : 4 * rank + 4].clone()

                    def full(ps):
                        return _gather(ps[0].detach())
                elif kind == "zero_partition":  # ZeRO-3 style: each parameter partitioned, tagged with ds_id
                    params = [torch.nn.Parameter(torch.zeros(3)), torch.nn.Parameter(torch.zeros(1))]
                    for i, p in enumerate(params):
                        p.ds_id = i

                    def set_grads(g, params=params):
                        params[0].grad = g[:6][3 * rank : 3 * rank + 3].clone()
                        params[1].grad = g[6:][rank : rank + 1].clone()

                    def full(ps):
                        w, b = _gather(ps[0].detach()), _gather(ps[1].detach())
                        return torch.cat([w, b])
                else:  # DDP: every rank holds the whole gradient
                    params = [torch.nn.Parameter(torch.zeros(2, 3)), torch.nn.Parameter(torch.zeros(2))]

                    def set_grads(g, params=params):
                        params[0].grad, params[1].grad = g[:6].reshape(2, 3).clone(), g[6:].clone()

                    def full(ps):
                        return torch.cat([p.detach().reshape(-1) for p in ps])

                run = _run(path, params, set_grads, rows)
                results[(path, kind)] = [{"metrics": r["metrics"], "params": full(r["params"])} for r in run]
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_every_rank_decides_as_one_process_on_the_full_gradient(tmp_path):
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    reference = _reference()
    decisions = {(m["metrics"]["projected"], m["metrics"]["skipped"]) for m in reference}
    assert len(decisions) >= 2 and min(m["metrics"]["ess"] for m in reference) < 0.99  # the cases are not trivial
    for rank in range(2):
        results = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        assert set(results) == {(p, k) for p in PATHS for k in LAYOUTS}
        for (path, kind), run in results.items():
            for step, (got, ref) in enumerate(zip(run, reference, strict=True)):
                where = f"rank {rank}, {path}, {kind}, step {step}"
                assert got["metrics"].keys() == ref["metrics"].keys(), where
                for key, value in ref["metrics"].items():
                    assert got["metrics"][key] == pytest.approx(value, abs=1e-6, nan_ok=True), (where, key)
                assert torch.allclose(got["params"], ref["params"], atol=1e-6), where


def test_layout_detection_and_refusals_without_a_process_group():
    from llm_scale.integrations import sharding
    from testbed.stabilizers import build

    p = torch.nn.Parameter(torch.zeros(3))
    assert sharding.layout([p]) == "local"
    recipe = build(SPEC)
    sharding.configure(recipe, "flat_shard")
    assert recipe.transforms[0].sharded is True
    sharding.configure(recipe, "dtensor")
    assert recipe.transforms[0].sharded is False
    with pytest.raises(ValueError, match=r"clip_norm .* FSDP1 flat parameters.*max_grad_norm"):
        sharding.configure(build("clip_norm+gac"), "flat_shard")
    with pytest.raises(ValueError, match=r"DeepSpeed ZeRO partitions"):
        sharding.configure(build("clip_norm"), "zero_partition")
    sharding.configure(build("clip_norm"), "dtensor")  # torch's clip_grad_norm_ reduces DTensor norms
    with pytest.raises(ValueError, match="gradient layout must be one of"):
        sharding.configure(recipe, "bogus")
