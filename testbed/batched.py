"""Several runs of one small-model configuration as one batched computation, bit for bit.

``run_batched(configs)`` trains S runs ("slots") that share a model shape: the same task and task
options, batch size, actors, group size, optimizer, steps and logging interval. Seeds, recipes,
staleness models, frictions, learning rates, aggregation and the proximal setting may differ per
slot. The learner's parameters of all slots are stacked (``[S, ...]``, as
``torch.func.stack_module_state`` does) and every learner step is *one* forward (``torch.func.vmap``
over the slots) and *one* backward; the optimizer updates the stacked tensors.

Results are identical, bit for bit, to running each config alone with `testbed.runner.run`: the
per-slot work (actors, sampling, advantages, the recipe's loss and gradient transforms, diagnostics,
evaluation) is done by an ordinary `Runner` per slot whose parameters are views into the stacked
tensors, with the same generators in the same order; only the learner's forward/backward and the
optimizer update are batched, and those are made to round exactly as the unbatched ops do:

* ``vmap`` alone is not exact on CPU: its rule for ``F.linear`` with a bias is ``bmm`` then ``add``
  (two roundings, where the unbatched call's fused ``addmm`` rounds once), and its rule for layer
  norm reduces the weight and bias gradients in another order. Under `exact_batching` these ops
  run slot-wise on the underlying ``[S, ...]`` tensors instead: linear as ``baddbmm`` with a
  backward in ``addmm``'s operand order, layer norm once per slot, scaled dot-product attention
  with the slot dimension folded into its batch dimension (vmap would loop over slots, with a
  warning). Everything else uses vmap's own rules, which are exact for these models
  (tests/integration/test_batched_seeds.py compares every logged number and every parameter).
  Not covered: a linear layer fed a non-contiguous input of 3 or more dimensions (its weight
  gradient may differ in the last bit); no task here has one.
* The optimizer is `StackedOptimizer`: the same elementwise ops as ``torch.optim.Adam``
  (``foreach``) and ``torch.optim.SGD``, with the same Python-float scalars, applied to the stacked
  tensors (slots whose step count and learning rate agree share one call; a slot whose gradient
  transforms scaled its learning rate, or skipped the step, gets its own).

A slot that diverges is recorded exactly as `Runner.run` records it and dropped from the batch; the
others go on. The CLI (``python -m testbed run --batch-seeds``) and sweeps (``batch_seeds = true``)
group their configs with `group_configs` and run each group here.

Speed: on a CPU the batched matmuls are no faster per FLOP than the unbatched ones; the gain is the
per-step Python and dispatch overhead paid once per step instead of once per run (see
benchmarks/README.md for the measured ratios).
"""

from __future__ import annotations

import time
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch._functorch.pyfunctorch import temporarily_pop_interpreter_stack
from torch.func import vmap
from torch.overrides import TorchFunctionMode

from testbed import diagnostics as diag
from testbed.runner import Chunk, Diverged, RunConfig, Runner, RunResult, derive_seed
from testbed.stabilizers import PolicyTerms
from testbed.tasks import make_task

DEFAULT_GROUP = 8  # runs per batch when a sweep says batch_seeds = true
# Fields that fix the shape of the batched computation: slots must agree on them.
SHARED_FIELDS = ("task", "task_args", "steps", "log_every", "batch_size", "n_actors", "group_size", "optimizer")


# -- exact batching rules ------------------------------------------------------------------------


class _BatchedAddmm(torch.autograd.Function):
    """out[s] = b[s] + x[s] @ w[s].T for every slot s, rounding as ``torch.addmm`` does per slot.

    Forward is ``baddbmm`` (one rounding, like ``addmm``). Backward repeats the operand order of
    autograd's ``addmm`` backward for ``F.linear`` (weight transposed, i.e. column-major ``mat2``):
    grad_x = g @ w, grad_w = g.T @ x, grad_b = sum over rows of g.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, b: Tensor) -> Tensor:
        ctx.save_for_backward(x, w)
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        gx = torch.bmm(g, w) if ctx.needs_input_grad[0] else None
        gw = torch.bmm(g.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        gb = g.sum(1) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


def _linear(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """Slot-wise ``F.linear`` on ``[S, ...]`` tensors, rounding as the unbatched call does.

    Unbatched, ``F.linear`` with a bias runs one fused ``addmm`` on the input flattened to 2-D when
    the input is 2-D or contiguous, else ``matmul`` then ``add``. Per slot, the first case is
    `_BatchedAddmm` on ``[S, rows, in]``; the second is ``matmul`` + ``add`` here too, which rounds
    the forward alike but not always the weight gradient: a linear layer fed a non-contiguous
    input of 3 or more dimensions is the one case here that is not bit-exact (none of the tasks'
    models has one).
    """
    n = x.shape[0]
    if (x.dim() == 3 or x.is_contiguous()) and x.stride(-1) == 1 and w.stride(-1) == 1:
        with temporarily_pop_interpreter_stack():  # plain tensors: no vmap level for this Function
            out = _BatchedAddmm.apply(x.reshape(n, -1, x.shape[-1]), w, b)
        return out.reshape(*x.shape[:-1], w.shape[1])
    wt = w.transpose(1, 2).reshape(n, *([1] * (x.dim() - 3)), *w.shape[2:0:-1])
    return torch.matmul(x, wt) + b.reshape(n, *([1] * (x.dim() - 2)), b.shape[-1])


def _layer_norm(x: Tensor, shape: tuple, w: Tensor | None, b: Tensor | None, eps: float) -> Tensor:
    """Slot-wise ``F.layer_norm``, one call per slot (vmap's rule reduces the weight and bias
    gradients in another order)."""
    return torch.stack([F.layer_norm(x[s], shape, None if w is None else w[s], None if b is None else b[s], eps)
                        for s in range(x.shape[0])])


def _sdpa(q: Tensor, k: Tensor, v: Tensor, is_causal: bool) -> Tensor:
    """Slot-wise scaled dot-product attention: the slot dimension folded into the batch dimension
    (each (batch, head) is computed independently, so this is exact; vmap would loop with a warning)."""
    lead = q.shape[:2]
    out = F.scaled_dot_product_attention(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), is_causal=is_causal)
    return out.unflatten(0, lead)


def _arg(args: tuple, kwargs: dict, i: int, name: str, default: Any = None) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


_F = torch._C._functorch  # vmap's BatchedTensor primitives (torch.func's own vmap uses them)


def _physical(tensors: Sequence[Tensor | None]) -> tuple[list[Tensor | None], int] | None:
    """The tensors of one vmap level as plain ``[S, ...]`` tensors and that level, or None when they
    are not all batched at one level (then the op runs under vmap's own rule)."""
    levels = {_F.maybe_get_level(t) for t in tensors if t is not None}
    if len(levels) != 1 or any(t is not None and not _F.is_batchedtensor(t) for t in tensors):
        return None
    level = levels.pop()
    out = []
    for t in tensors:
        if t is None:
            out.append(None)
            continue
        inner = _F.get_unwrapped(t)
        if _F.is_batchedtensor(inner):
            return None  # nested vmap
        out.append(inner.movedim(_F.maybe_get_bdim(t), 0))
    return out, level


class exact_batching(TorchFunctionMode):
    """Within this mode, a ``vmap`` over stacked parameters rounds exactly as the unbatched model does:
    ``F.linear`` (with bias), ``F.layer_norm`` and ``F.scaled_dot_product_attention`` on tensors
    batched at one vmap level run slot-wise on the underlying ``[S, ...]`` tensors (`_linear`,
    `_layer_norm`, `_sdpa`), and their results are handed back to vmap. Anything else, or the same
    ops on unbatched or doubly batched tensors, runs as usual."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.linear:
            tensors = [args[0], _arg(args, kwargs, 1, "weight"), _arg(args, kwargs, 2, "bias")]
            if tensors[2] is not None and (found := _physical(tensors)):
                (x, w, b), level = found
                return _F._add_batch_dim(_linear(x, w, b), 0, level)
        elif func is F.layer_norm:
            tensors = [args[0], _arg(args, kwargs, 2, "weight"), _arg(args, kwargs, 3, "bias")]
            if found := _physical(tensors):
                (x, w, b), level = found
                shape = tuple(_arg(args, kwargs, 1, "normalized_shape"))
                return _F._add_batch_dim(_layer_norm(x, shape, w, b, _arg(args, kwargs, 4, "eps", 1e-5)), 0, level)
        elif func is F.scaled_dot_product_attention:
            extra = {k: v for k, v in kwargs.items() if k != "is_causal"}
            if len(args) == 3 and not extra and (found := _physical(args)):
                (q, k, v), level = found
                if q.dim() == 5:
                    return _F._add_batch_dim(_sdpa(q, k, v, bool(kwargs.get("is_causal", False))), 0, level)
        return func(*args, **kwargs)


# -- the optimizer ----------------------------------------------------------------------------------


class StackedOptimizer:
    """Adam (``foreach``, as the runner builds it) or plain SGD over stacked ``[S, ...]`` parameters.

    ``step(lr_scales)`` takes one learning-rate multiplier per slot (`Recipe.step`'s semantics: 1.0
    leaves the lr as it is, 0.0 skips the slot's step and leaves its state untouched). Every slot
    goes through the same elementwise ops with the same Python-float scalars as
    ``torch.optim.Adam(foreach=True)`` / ``torch.optim.SGD`` on its own parameters.
    """

    def __init__(self, params: list[Tensor], kind: str, lrs: Sequence[float], betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        if kind not in ("adam", "sgd"):
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {kind!r}")
        self.params, self.kind, self.lrs = params, kind, [float(x) for x in lrs]
        self.betas, self.eps = betas, eps
        n = len(self.lrs)
        self.steps = [0] * n
        self.exp_avg = [torch.zeros_like(p) for p in params] if kind == "adam" else []
        self.exp_avg_sq = [torch.zeros_like(p) for p in params] if kind == "adam" else []

    def keep(self, slots: list[int], params: list[Tensor]) -> None:
        """Restrict the state to ``slots`` (after a slot diverged); ``params`` are the new stacked tensors."""
        self.params = params
        self.lrs = [self.lrs[s] for s in slots]
        self.steps = [self.steps[s] for s in slots]
        self.exp_avg = [m[slots].clone() for m in self.exp_avg]
        self.exp_avg_sq = [v[slots].clone() for v in self.exp_avg_sq]

    @torch.no_grad()
    def step(self, lr_scales: Sequence[float]) -> None:
        groups: dict[tuple[int, float], list[int]] = defaultdict(list)
        for s, scale in enumerate(lr_scales):
            if scale == 0.0:
                continue
            lr = self.lrs[s] if scale == 1.0 else self.lrs[s] * scale  # as recipe.scaled_lr does
            self.steps[s] += 1
            groups[(self.steps[s], lr)].append(s)
        n = len(self.lrs)
        for (step, lr), slots in groups.items():
            if len(slots) == n:
                self._apply(None, step, lr)
            else:
                for s in slots:
                    self._apply(s, step, lr)

    def _apply(self, index: int | None, step: int, lr: float) -> None:
        """Update slot ``index`` (None: every slot, on the whole stacked tensors)."""
        def part(x: Tensor) -> Tensor:
            return x if index is None else x[index]

        grads = [part(p.grad) for p in self.params]
        params = [part(p.detach()) for p in self.params]
        if self.kind == "sgd":
            for p, g in zip(params, grads, strict=True):
                p.add_(g, alpha=-lr)
            return
        beta1, beta2 = self.betas
        step_size = (lr / (1 - beta1**step)) * -1
        bias_correction2_sqrt = (1 - beta2**step) ** 0.5
        for p, g, m, v in zip(params, grads, self.exp_avg, self.exp_avg_sq, strict=True):
            m, v = part(m), part(v)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2)
            v.addcmul_(g, g, value=1 - beta2)
            denom = v.sqrt()
            denom.div_(bias_correction2_sqrt)
            denom.add_(self.eps)
            p.addcdiv_(m, denom, value=step_size)


# -- the batched runner -------------------------------------------------------------------------------


def check_shared(configs: Sequence[RunConfig]) -> list[RunConfig]:
    """Validate and resolve ``configs``; ValueError naming the field on which they disagree."""
    if not configs:
        raise ValueError("run_batched needs at least one config")
    resolved = [c.validate() for c in configs]
    first = resolved[0]
    for c in resolved[1:]:
        for name in SHARED_FIELDS:
            if getattr(c, name) != getattr(first, name):
                raise ValueError(
                    f"configs run as one batch must agree on {', '.join(SHARED_FIELDS)}; they differ in "
                    f"{name} ({getattr(first, name)!r} vs {getattr(c, name)!r})"
                )
    ids = [c.run_id for c in resolved]
    if len(set(ids)) != len(ids):
        raise ValueError("run_batched: the same config appears twice")
    return resolved


class BatchedRunner:
    """Runs ``configs`` (which agree on `SHARED_FIELDS`) as one batched computation."""

    def __init__(self, configs: Sequence[RunConfig], task: Any = None) -> None:
        cfgs = check_shared(configs)
        self.task = task if task is not None else make_task(cfgs[0].task, **cfgs[0].task_args)
        self.runners = [Runner(c, task=self.task) for c in cfgs]
        first = self.runners[0]
        if first.buffers:
            raise NotImplementedError("run_batched: policies with buffers are not supported")
        stacked = {k: torch.stack([r.params[k].detach() for r in self.runners]) for k in first.params}
        self.slots = list(range(len(cfgs)))  # original index of each active slot
        self._bind(stacked)
        self.optimizer = StackedOptimizer(list(self.params.values()), cfgs[0].optimizer, [c.lr for c in cfgs])

    def _bind(self, stacked: dict[str, Tensor]) -> None:
        """Make ``stacked`` the learner's parameters; point each active slot's runner at its views."""
        self.params = {k: v.detach().requires_grad_(True) for k, v in stacked.items()}
        for i, s in enumerate(self.slots):
            r = self.runners[s]
            r.params = {k: v[i] for k, v in self.params.items()}  # views (grad flows to the stack)
            r.optimizer = None  # the stacked optimizer replaces it

    def _drop(self, positions: list[int]) -> None:
        keep = [i for i in range(len(self.slots)) if i not in positions]
        self.slots = [self.slots[i] for i in keep]
        if not keep:
            return
        stacked = {k: v.detach()[keep].clone() for k, v in self.params.items()}
        self._bind(stacked)
        self.optimizer.keep(keep, list(self.params.values()))

    def token_logp(self, contexts: Tensor, actions: Tensor) -> Tensor:
        """log pi(a_t | x, a_<t) of every slot, [S, B, T], in one batched forward."""
        first = self.runners[0]
        with warnings.catch_warnings(), exact_batching():
            warnings.filterwarnings("ignore", message=".*batching rule.*")
            return vmap(first.token_logp)(self.params, contexts, actions)

    def run(self, progress: bool = False) -> list[RunResult]:
        runners = self.runners
        cfg0 = runners[0].cfg
        n = len(runners)
        starts = [defaultdict(list) for _ in range(n)]
        due = [defaultdict(list) for _ in range(n)]
        consume: list[dict[int, list[Chunk]]] = [{} for _ in range(n)]
        for s, r in enumerate(runners):
            for t in range(cfg0.steps):
                consume[s][t] = [Chunk(t, a, r.sizes[a]) for a in range(r.cfg.n_actors)]
                for a, chunk in enumerate(consume[s][t]):
                    starts[s][t - int(r.lags[t, a])].append(chunk)
        rows: list[list[dict[str, Any]]] = [[] for _ in range(n)]
        status = ["ok"] * n
        prev_grad: list[Tensor | None] = [None] * n
        windows: list[list[float]] = [[] for _ in range(n)]
        peak_queue = [0] * n
        eval_gen = torch.Generator()
        t0 = time.perf_counter()
        bar = None
        if progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=cfg0.steps, desc=f"{n} runs batched", leave=False)
        try:
            for t in range(cfg0.steps):
                if not self.slots:
                    break
                log_now = self._logs(t)
                batches = []
                for s in self.slots:
                    r = runners[s]
                    for chunk in starts[s].pop(t, []) + due[s].pop(t, []):
                        nxt = r._generate(chunk, t)
                        if nxt is not None:
                            due[s][nxt].append(chunk)
                    batches.append(r._batch(consume[s].pop(t)))
                    if log_now:
                        peak_queue[s] = max(peak_queue[s], r.queue_bytes(consume[s]))
                # the flat gradient is only read by the diagnostics of this step and of the next one
                keep_grad = log_now or self._logs(t + 1)
                results = self._update(t, batches, [prev_grad[s] for s in self.slots], log_now, keep_grad)
                dropped = []
                for i, (s, batch, res) in enumerate(zip(list(self.slots), batches, results, strict=True)):
                    r = runners[s]
                    if isinstance(res, Diverged):
                        status[s] = "diverged"
                        rows[s].append({"step": t + 1, "diverged_at": t + 1})
                        dropped.append(i)
                        continue
                    row, grad = res
                    windows[s].append(float(batch["true_rewards"].mean()))
                    if log_now:
                        eval_gen.manual_seed(derive_seed(r.cfg.seed, "eval", t))
                        with torch.no_grad():
                            row.update(r.apply(r.params, r.task.evaluate, eval_gen))
                        row["reward_avg"] = float(np.mean(windows[s]))
                        windows[s].clear()
                        rows[s].append(row)
                    prev_grad[s] = grad
                if dropped:
                    self._drop(dropped)
                if bar is not None:
                    bar.update(1)
        finally:
            if bar is not None:
                bar.close()
        wall = time.perf_counter() - t0
        out = []
        for s, r in enumerate(runners):
            info = {"wall_s": wall / n, "batch_wall_s": wall, "batched_runs": n, "queue_peak_bytes": peak_queue[s],
                    "param_bytes": sum(p[0].numel() * p.element_size() for p in self.params.values())}
            out.append(RunResult(r.cfg, rows[s], status[s], info))
        return out

    @torch.no_grad()
    def _finite(self, positions: list[int]) -> dict[int, bool]:
        """Per slot, the runner's divergence test: every parameter tensor has a finite 2-norm.

        All slots' norms are computed at once; a slot whose batched norms are not all far below
        float32 overflow (1e18, whose square is 1e36) is re-tested exactly as `Runner._update` does,
        so a reduction order cannot change the verdict."""
        norms = torch.stack([torch.linalg.vector_norm(p.detach().flatten(1), dim=1) for p in self.params.values()])
        safe = (norms < 1e18).all(0).tolist()
        out = {}
        for i in positions:
            if safe[i]:
                out[i] = True
            else:
                views = [p.detach()[i] for p in self.params.values()]
                out[i] = bool(torch.stack(torch._foreach_norm(views)).isfinite().all())
        return out

    def _logs(self, t: int) -> bool:
        cfg = self.runners[0].cfg
        return (t + 1) % cfg.log_every == 0 or t + 1 == cfg.steps

    def _update(self, t: int, batches: list[dict[str, Tensor]], prev_grads: list[Tensor | None],
                log_now: bool, keep_grad: bool = True) -> list[tuple[dict, Tensor | None] | Diverged]:
        """One learner step of every active slot (mirrors `Runner._update`)."""
        contexts = torch.stack([b["contexts"] for b in batches])
        actions = torch.stack([b["actions"] for b in batches])
        logp = self.token_logp(contexts, actions)
        results: list[Any] = [None] * len(self.slots)
        losses, terms_of, outs = [], {}, {}
        for i, (s, batch) in enumerate(zip(self.slots, batches, strict=True)):
            r = self.runners[s]
            cfg, recipe = r.cfg, r.recipe
            logp_s, blogp = logp[i], batch["behavior_logp"]
            mask = torch.ones_like(logp_s, dtype=torch.bool)
            group_ids = batch.get("group_ids")
            score = r._score_sq_norms(batch["contexts"], batch["actions"]) if recipe.needs_score_norms else None
            adv = recipe.advantages(batch["rewards"], group_ids=group_ids, logp=logp_s.detach(), behavior_logp=blogp,
                                    mask=mask, score_sq_norms=score)
            terms = PolicyTerms(logp_s, blogp, adv, mask,
                                proximal_logp=logp_s.detach() if cfg.proximal == "current" else None,
                                versions=batch["versions"], group_ids=group_ids, rewards=batch["rewards"])
            try:
                out = recipe.loss(terms, cfg.agg)
            except ValueError as exc:
                if "non-finite" not in str(exc):
                    raise
                results[i] = Diverged(t)
                continue
            if not bool(torch.isfinite(out.loss)):
                results[i] = Diverged(t)
                continue
            losses.append(out.loss)
            terms_of[i], outs[i] = terms, out
        for p in self.params.values():
            p.grad = None
        if losses:
            torch.stack(losses).sum().backward()
        for p in self.params.values():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        scales = [0.0] * len(self.slots)
        grads: dict[int, Tensor | None] = {}
        rows: dict[int, dict[str, Any]] = {}
        metrics_of: dict[int, dict[str, float]] = {}
        for i, s in enumerate(self.slots):
            if i not in outs:
                continue
            r = self.runners[s]
            views = []
            if r.recipe.transforms or keep_grad:
                # The transforms get freshly allocated gradients, not views into the stacked gradient:
                # BLAS reductions (gac's dot products) round according to memory alignment, which a
                # view at slot offset i would change.
                for p in self.params.values():
                    view = p.detach()[i]
                    view.grad = p.grad[i].clone() if r.recipe.transforms else p.grad[i]
                    views.append(view)
            grads[i] = diag.flat_grad(views) if keep_grad else None
            if log_now:
                rows[i] = r._diagnostics(t, batches[i], logp[i].detach(), batches[i]["behavior_logp"], outs[i],
                                         grads[i], prev_grads[i])
            scales[i], metrics_of[i] = r.recipe.transform_gradients(views, terms_of[i])
            if r.recipe.transforms:
                for p, view in zip(self.params.values(), views, strict=True):
                    p.grad[i] = view.grad
        self.optimizer.step(scales)
        finite = self._finite(list(outs))
        for i in outs:
            if not finite[i]:
                results[i] = Diverged(t)
                continue
            row = rows.get(i, {})
            if log_now:
                row = {**{k: float(v) for k, v in metrics_of[i].items()}, **row}
            results[i] = (row, grads[i])
        return results


def run_batched(configs: Sequence[RunConfig], progress: bool = False, task: Any = None) -> list[RunResult]:
    """Run ``configs`` as one batch; the results, in order, equal ``[run(c) for c in configs]``."""
    return BatchedRunner(configs, task=task).run(progress=progress)


def group_configs(configs: Iterable[RunConfig], max_size: int = 8) -> list[list[RunConfig]]:
    """Split ``configs`` into batches of at most ``max_size`` that agree on `SHARED_FIELDS` (order kept
    within a batch; batches in order of their first config)."""
    if not isinstance(max_size, int) or isinstance(max_size, bool) or max_size < 1:
        raise ValueError(f"batch size must be an integer >= 1, got {max_size!r}")
    groups: dict[str, list[list[RunConfig]]] = {}
    order: list[list[RunConfig]] = []
    for c in configs:
        r = c.resolved()
        key = repr([getattr(r, f) if f != "task_args" else sorted(r.task_args.items()) for f in SHARED_FIELDS])
        bucket = groups.setdefault(key, [])
        if not bucket or len(bucket[-1]) >= max_size:
            bucket.append([])
            order.append(bucket[-1])
        bucket[-1].append(c)
    return order


def parse_batch_seeds(value: Any) -> int:
    """A sweep file's ``batch_seeds`` (true = 8, false = 0, or a group size >= 1) as an int (0: off)."""
    if value is None or value is False:
        return 0
    if value is True:
        return DEFAULT_GROUP
    if isinstance(value, int) and value >= 1:
        return value
    raise ValueError(f"batch_seeds must be true, false or an integer >= 1 (runs per batch), got {value!r}")


def run_groups(configs: Sequence[RunConfig], out: str, size: int = 8, workers: int = 1, threads: int = 1,
               on_done: Any = None) -> None:
    """Run ``configs`` in batches of up to ``size`` (`group_configs`), saving each result under ``out``
    (`testbed.results.ResultStore`); with ``workers > 1`` the batches go to worker processes.
    ``on_done(n)`` is called after every batch with its number of runs."""
    groups = group_configs(configs, size)
    if workers == 1:
        torch.set_num_threads(threads)
        for group in groups:
            _save_group([c.to_dict() for c in group], out)
            if on_done is not None:
                on_done(len(group))
        return
    import concurrent.futures as cf
    import multiprocessing

    from testbed.sweep import _worker_init

    ctx = multiprocessing.get_context("spawn")
    with cf.ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init, initargs=(threads,)) as pool:
        futures = {pool.submit(_save_group, [c.to_dict() for c in g], out): len(g) for g in groups}
        try:
            for fut in cf.as_completed(futures):
                fut.result()
                if on_done is not None:
                    on_done(futures[fut])
        except BaseException:
            for f in futures:
                f.cancel()
            raise


def _save_group(configs: list[dict[str, Any]], out: str) -> None:
    from testbed.results import ResultStore

    store = ResultStore(out)
    for result in run_batched([RunConfig(**c) for c in configs]):
        store.save(result)
