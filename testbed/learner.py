"""The learner of the loop (testbed/runner.py): each run's batch of a step, its advantages, its K epochs x N
minibatches of optimizer steps (minibatches of whole groups or random rows), the per-step records
(testbed/health.py) and the logged diagnostics. `Learner` works on the loop's explicit state (testbed/state.py);
a run whose update fails leaves the computation at once and `Learner.learn` returns it for the runner to record."""

from __future__ import annotations

import functools
import sys
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from testbed import diagnostics as diag
from testbed import health
from testbed.delay import Chunk
from testbed.slots import cat, stack, take_rows
from testbed.stabilizers import PolicyTerms, Recipe
from testbed.stabilizers.numerics import sequence_log_ratio
from testbed.state import LoopState, RunState
from testbed.tasks.base import grouped_logits, token_logp
from testbed.util.seeding import generator


@dataclass
class Work:
    """The learner's view of one step's batches, by slot position (filtered when a run leaves)."""

    t: int
    batches: list[dict[str, Tensor]]
    x: Tensor  # [S, B, ...] contexts
    a: Tensor  # [S, B, T] actions
    start_logp: Tensor | None = None  # [S, B, T] under the policy at the start of the batch (K x N > 1)
    score: Tensor | None = None  # [S, B] per-sample squared score norms (OPOB)
    logits: Tensor | None = None  # [S, B, T, A] the whole batch's logits at the current policy, with their graph
    order: Tensor | None = None  # [S, B] this epoch's minibatch permutation
    advantages: list[Tensor] = field(default_factory=list)

    def keep(self, positions: list[int]) -> None:
        idx = torch.tensor(positions, dtype=torch.long)
        self.batches = [self.batches[p] for p in positions]
        self.x, self.a = self.x.index_select(0, idx), self.a.index_select(0, idx)
        for name in ("start_logp", "score", "order", "logits"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, value.index_select(0, idx))
        self.advantages = [self.advantages[p] for p in positions if p < len(self.advantages)]


class Learner:
    """The learner of every run of one loop: each run's update from its batch, with the run's recipe and
    optimizer, on the loop's stacked policy."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    # -- learner -------------------------------------------------------------------------------------
    def _batch(self, run: RunState, chunks: list[Chunk]) -> dict[str, Tensor]:
        batch = {name: cat([getattr(c, name) for c in chunks]) for name in
                 ("contexts", "actions", "behavior_logp", "versions", "rewards", "true_rewards")}
        g = run.cfg.group_size
        if g > 1:
            offsets, gids = 0, []
            for c in chunks:
                gids.append(c.group_ids + offsets)
                offsets += c.size // g
            batch["group_ids"] = torch.cat(gids)
        batch["buggy_frac"] = sum(c.size for c in chunks if c.buggy) / sum(c.size for c in chunks)  # type: ignore[assignment]
        return batch

    def learn(self, t: int, on_batch: Callable[[int, int, dict[str, Tensor]], None] | None = None) -> list[tuple[int, int]]:
        """Every active run's update(s) from its batch of step t: epochs x minibatches optimizer steps. A run whose
        parameters, loss or log-probs become non-finite leaves the computation (`LoopState.remove`) at once;
        returns (run index, update step) of each. ``on_batch(run, t, batch)``: called with every batch."""
        cfg0 = self.loop.cfg0
        log_now = self.loop.logs(t)
        batches = []
        for r in self.loop.active:
            run = self.loop.runs[r]
            batch = self._batch(run, run.schedule.take(t))
            run.reward_sum = run.reward_sum + batch["true_rewards"].mean()
            run.reward_n += 1
            if on_batch is not None:
                on_batch(r, t, batch)
            batches.append(batch)
        work = Work(t, batches, stack([b["contexts"] for b in batches]), stack([b["actions"] for b in batches]))
        n_steps = cfg0.epochs * cfg0.minibatches
        with torch.no_grad():
            if n_steps > 1:  # the policy at the start of the batch: advantages and the proximal policy
                work.start_logp = token_logp(grouped_logits(self.loop.task, self.loop.policy, work.x, work.a, cfg0.group_size), work.a)
        if any(self.loop.runs[r].recipe.needs_score_norms for r in self.loop.active):
            if n_steps == 1 and (cfg0.group_size <= 1 or self.loop.task.horizon != 1):
                # the one update's forward is the norms' (grouped_logits is task.logits here): made once for both
                work.score, work.logits = diag.score_sq_norms_and_logits(self.loop.task, self.loop.policy, work.x, work.a)
            else:
                work.score = diag.score_sq_norms(self.loop.task, self.loop.policy, work.x, work.a)
        step, diverged = 0, []
        for epoch in range(cfg0.epochs):
            work.order = self._minibatch_order(t, epoch) if cfg0.minibatches > 1 else None
            for mb in range(cfg0.minibatches):
                last = step == n_steps - 1
                if step > 0:
                    diverged += self._leave([(pos, t) for pos in self.loop.nonfinite()], work)
                if not self.loop.active:
                    return diverged
                size = cfg0.batch_size // cfg0.minibatches
                idx = None if work.order is None else work.order[:, mb * size : (mb + 1) * size]
                failed = self._update(work, idx, log_now and last, (epoch, mb))
                diverged += self._leave(failed, work)
                step += 1
        return diverged

    def _leave(self, failed: list[tuple[int, int]], work: Work) -> list[tuple[int, int]]:
        """Take the runs at the slot positions of ``failed`` [(position, update step)] out of the loop and of
        ``work``; (run index, update step) of each."""
        if not failed:
            return []
        positions = [pos for pos, _ in failed]
        keep = [pos for pos in range(len(self.loop.active)) if pos not in positions]
        runs = self.loop.remove(positions)
        work.keep(keep)
        return [(r, step) for r, (_, step) in zip(runs, failed, strict=True)]

    def _minibatch_order(self, t: int, epoch: int) -> Tensor:
        """Each active run's order of its batch's rows for this epoch [S, B]: with ``minibatch_split``
        ``groups`` the batch's own order (groups are contiguous rows, so consecutive minibatches hold whole,
        disjoint groups), with ``random`` a permutation from the run's own stream."""
        b = self.loop.cfg0.batch_size
        return torch.stack([torch.arange(b) if self.loop.runs[r].cfg.minibatch_split == "groups" else
                            torch.randperm(b, generator=generator(self.loop.runs[r].cfg.seed, "minibatch", t, epoch))
                            for r in self.loop.active])

    def _update(self, work: Work, idx: Tensor | None, log_now: bool, where: tuple[int, int]) -> list[tuple[int, int]]:
        """One optimizer step of every active run (``idx`` [S, b]: this minibatch's rows of each batch;
        ``where``: (epoch, minibatch)); returns (slot position, step of the update that diverged) of the runs
        that diverged."""
        t = work.t
        params = list(self.loop.policy.parameters())
        for p in params:
            p.grad = None
        xs, as_ = (work.x, work.a) if idx is None else (take_rows(work.x, idx), take_rows(work.a, idx))
        # a minibatch cut at random splits groups: its rows are computed one by one
        group = self.loop.cfg0.group_size if idx is None or self.loop.cfg0.minibatch_split == "groups" else 1
        if idx is None and work.logits is not None:  # made with the score norms: the same forward
            logits, work.logits = work.logits, None
        else:
            logits = grouped_logits(self.loop.task, self.loop.policy, xs, as_, group)
        logp = token_logp(logits, as_)
        losses, outs, terms_of = [], [], []
        for pos, r in enumerate(self.loop.active):
            run, batch = self.loop.runs[r], work.batches[pos]
            rows = slice(None) if idx is None else idx[pos]
            start = logp[pos].detach() if work.start_logp is None else work.start_logp[pos]
            if len(work.advantages) <= pos:
                work.advantages.append(run.recipe.advantages(
                    batch["rewards"], group_ids=batch.get("group_ids"), logp=start, behavior_logp=batch["behavior_logp"],
                    mask=torch.ones_like(start, dtype=torch.bool), score_sq_norms=None if work.score is None else work.score[pos]))
            group_ids = batch.get("group_ids")
            terms = PolicyTerms(logp[pos], batch["behavior_logp"][rows], work.advantages[pos][rows],
                                torch.ones_like(logp[pos], dtype=torch.bool),
                                proximal_logp=start[rows] if run.cfg.proximal == "current" else None,
                                versions=batch["versions"][rows], group_ids=None if group_ids is None else group_ids[rows],
                                rewards=batch["rewards"][rows])
            out = run.recipe.loss(terms, run.cfg.agg, nan_policy="ignore")  # logp and the loss are checked here
            losses.append(out.loss)
            outs.append(out)
            terms_of.append(terms)
        total = torch.stack(losses)
        finite = (torch.isfinite(total) & torch.isfinite(logp.detach()).flatten(1).all(1)).tolist()
        # (a version whose parameters blew up never gets here: `publish` removed it; so a non-finite loss or
        # log-prob is this update's: finite parameters whose forward overflowed, or a surrogate's)
        failed = [pos for pos, good in enumerate(finite) if not good]
        diverged = [(pos, t) for pos in failed]
        ok = [pos for pos in range(len(self.loop.active)) if pos not in failed]
        if not ok:
            return diverged
        total[ok].sum().backward()
        oracle = diag.oracle_gradients(self.loop.task, self.loop.policy, xs) if log_now and self.loop.oracle else None
        entries: dict[str, list] = defaultdict(list)
        rows: dict[int, dict[str, Any]] = {}
        grads = diag.flat_grads(params)  # [S, P]: every run's raw gradient, before its transforms
        records = self._step_records(t, where, ok, logits, logp.detach(), terms_of, grads)
        for pos in ok:
            run = self.loop.runs[self.loop.active[pos]]
            for leaf, p in zip(run.group["params"], params, strict=True):
                # transforms edit gradients in place: give them their own memory, as a run alone has
                leaf.grad = p.grad[pos].clone() if run.recipe.transforms else p.grad[pos]
            grad = grads[pos]
            if log_now:
                rows[pos] = self._diagnostics(t, work.batches[pos], logp[pos].detach(), terms_of[pos].behavior_logp,
                                              outs[pos], grad, run.prev_grad,
                                              None if oracle is None else (oracle[0][pos], oracle[1][pos]))
            run.prev_grad = grad
            entries[run.cfg.optimizer].append((pos, (run.recipe, run.group, terms_of[pos])))
        for kind, items in entries.items():
            metrics = Recipe.step_groups(self.loop.optimizers[kind], [entry for _, entry in items])
            for (pos, _), m in zip(items, metrics, strict=True):
                run = self.loop.runs[self.loop.active[pos]]
                rec = records[pos]
                rec["projected"] = float(m["projected"]) if "projected" in m else float("nan")
                rec["skipped"] = float(m["skipped"]) if "skipped" in m else float("nan")
                run.steps.append(rec)
                if pos in rows:
                    window = health.window_summary(run.steps[run.window:])
                    run.window = len(run.steps)
                    run.rows.append({**{k: float(v) for k, v in m.items()}, **rows[pos], **window})
        for p in params:
            p.grad = None
        for pos in ok:
            for leaf in self.loop.runs[self.loop.active[pos]].group["params"]:
                leaf.grad = None
        return diverged

    def _step_records(self, t: int, where: tuple[int, int], ok: list[int], logits: Tensor, logp: Tensor,
                      terms_of: list[PolicyTerms], grads: Tensor) -> dict[int, dict[str, Any]]:
        """The cheap per-optimizer-step record (testbed/health.py) of every run at the slot positions ``ok``, by
        position: `health.step_stats` of all of them at once, from the same functions as the logged diagnostics
        (`diag.ratio_stats`), so the values agree."""
        prev = [self.loop.runs[self.loop.active[pos]].prev_grad for pos in ok]
        # a run without a previous step gets a zero one: its cosine is undefined (NaN), as the rule says
        prev_grads = None if all(g is None for g in prev) else torch.stack(
            [torch.zeros_like(grads[0]) if g is None else g for g in prev])

        def rows(x: Tensor) -> Tensor:
            return x if len(ok) == x.shape[0] else x.index_select(0, torch.tensor(ok))

        stats = health.step_stats(rows(logits), rows(logp), torch.stack([terms_of[pos].behavior_logp for pos in ok]),
                                  [terms_of[pos].advantages for pos in ok], rows(grads), prev_grads)
        values = dict(zip(stats, torch.stack([v.double() for v in stats.values()]).tolist(), strict=True))
        kind = "within" if where != (0, 0) else "across"
        return {pos: {"step": t + 1, "epoch": where[0], "minibatch": where[1], "kind": kind,
                      **{name: column[i] for name, column in values.items()}} for i, pos in enumerate(ok)}

    def _diagnostics(self, t: int, batch: dict, logp: Tensor, blogp: Tensor, out: Any, grad: Tensor,
                     prev_grad: Tensor | None, oracle: tuple[Tensor, Tensor] | None) -> dict[str, Any]:
        lags = (t - batch["versions"]).float()
        seq_lr = sequence_log_ratio(logp, blogp, torch.ones_like(logp, dtype=torch.bool))
        row: dict[str, Any] = {
            "step": t + 1,
            "loss": float(out.loss.detach()),
            "reward": float(batch["rewards"].mean()),
            "true_reward": float(batch["true_rewards"].mean()),
            "lag_mean": float(lags.mean()),
            "lag_max": int(lags.max()),
            "buggy_frac": batch["buggy_frac"],
            "grad_norm": float(torch.linalg.vector_norm(grad)),
            "grad_cos_prev": diag.cosine(grad, prev_grad) if prev_grad is not None else float("nan"),
            **{k: float(v) for k, v in out.metrics.items()},
            **diag.ratio_stats(logp - blogp, seq_lr),
        }
        if oracle is not None:
            row["cos_true_pg"] = diag.cosine(grad, oracle[0])
            row["cos_ce"] = diag.cosine(grad, oracle[1])
        return row


class NoCompileAdam(torch.optim.Adam):
    """torch's Adam, stepped without its compile wrapper (which imports torch._dynamo: `skip_dynamo_import`);
    the wrapper's only effect outside torch.compile is to run the step without autograd, done here."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        return torch.optim.Adam.step.__wrapped__(self, closure)


class NoCompileSGD(torch.optim.SGD):
    """torch's SGD, stepped like `NoCompileAdam`."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        return torch.optim.SGD.step.__wrapped__(self, closure)


@functools.cache
def skip_dynamo_import() -> None:
    """Let torch's optimizers run without importing torch._dynamo (about 2 s of CPU, most of a short run's
    start-up). Optimizer methods such as ``add_param_group`` are wrapped by ``torch._compile._disable_dynamo``,
    whose wrapper imports torch._dynamo on its first call only to mark the method as not to be compiled, and
    caches the result on the method as ``__dynamo_disable``. The runner never compiles, so the method itself is
    cached there: the same code runs, and torch._dynamo is imported only by whoever compiles."""
    from torch import _compile

    marker = _compile._disable_dynamo(lambda: None).__code__
    for cls in (torch.optim.Optimizer, torch.optim.Adam, torch.optim.SGD):
        for attr in vars(cls).values():
            inner = getattr(attr, "__wrapped__", None)
            if getattr(attr, "__code__", None) is marker and inner is not None and "torch._dynamo" not in sys.modules:
                inner.__dynamo_disable = inner
