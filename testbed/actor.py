"""The actors of the loop (testbed/runner.py): every chunk of samples due at a version is sampled at that
version, with the run's frictions, and waits in the run's queue until the learner consumes it. `Actor` works on
the loop's explicit state (testbed/state.py: the task, the stacked policy, the runs and their queues)."""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable

import torch
from torch import Tensor

from testbed.delay import Chunk
from testbed.frictions import act
from testbed.slots import call_with, cat, stack
from testbed.state import LoopState, RunState
from testbed.tasks.base import grouped_logits, token_logp
from testbed.util.seeding import generator


class Actor:
    """The actors of every run of one loop, sampling from the loop's policy into the runs' queues."""

    def __init__(self, loop: LoopState) -> None:
        self.loop = loop

    # -- actors --------------------------------------------------------------------------------------
    def _start(self, run: RunState, chunk: Chunk) -> None:
        """A chunk's first event: contexts, bug status, token versions and its pre-drawn randomness."""
        cfg, spec = run.cfg, run.spec
        gen = generator(cfg.seed, "slot", chunk.step, chunk.actor)
        g = cfg.group_size
        contexts = self.loop.task.sample_contexts(chunk.size // g, gen, "train")
        if g > 1:
            contexts = contexts.repeat_interleave(g, dim=0)
            chunk.group_ids = torch.arange(chunk.size // g).repeat_interleave(g)
        chunk.contexts = contexts
        chunk.buggy = spec.frictions.is_buggy(chunk.actor, run.sticky, gen)
        shape = (chunk.size, self.loop.horizon)
        mixed = spec.staleness.token_versions(chunk.start, chunk.step, shape, gen)
        chunk.versions = torch.full(shape, chunk.start, dtype=torch.long) if mixed is None else torch.from_numpy(mixed)
        chunk.actions = torch.zeros(shape, dtype=torch.long)
        chunk.behavior_logp = torch.zeros(shape, dtype=torch.float32)
        chunk.state = {"gen": gen, **spec.frictions.draws(chunk.size, self.loop.horizon, self.loop.n_actions, chunk.buggy, gen)}

    def act(self, t: int) -> None:
        """Sample every chunk due at version t, all runs with the same job shape in one computation."""
        jobs: dict[tuple[int, int, int], list[tuple[int, list[Chunk]]]] = defaultdict(list)
        for pos, r in enumerate(self.loop.active):
            run = self.loop.runs[r]
            chunks = run.schedule.due(t)
            if not chunks:
                continue
            for chunk in chunks:
                if chunk.contexts is None:
                    self._start(run, chunk)
            due = torch.cat([c.versions == t for c in chunks]) if len(chunks) > 1 else chunks[0].versions == t
            cols = due.any(0).nonzero().flatten()
            key = (int(due.shape[0]), int(cols[0]), int(cols[-1]))
            jobs[key].append((pos, chunks))
        for (_, k0, k1), group in jobs.items():
            self._sample(t, group, k0, k1)
        if self.loop.logs(t):
            for r in self.loop.active:
                run = self.loop.runs[r]
                run.queue_peak = max(run.queue_peak, run.schedule.pending_bytes())

    def _sample(self, t: int, group: list[tuple[int, list[Chunk]]], k0: int, k1: int) -> None:
        """Sample positions k0..k1 of the due rows of every chunk in ``group`` ([(slot position, chunks)])."""
        slots = [pos for pos, _ in group]
        policy = self.loop.view(slots)
        runs = [self.loop.runs[self.loop.active[pos]] for pos in slots]
        allc = [c for _, chunks in group for c in chunks]

        def gather(get: Callable[[Chunk], Tensor]) -> Tensor:
            return stack([cat([get(c) for c in chunks]) for _, chunks in group])

        def temperature(run: RunState, chunks: list[Chunk]) -> Tensor:
            return cat([torch.full((c.size, 1), run.spec.frictions.temperature(c.buggy)) for c in chunks])

        x = gather(lambda c: c.contexts)
        actions = gather(lambda c: c.actions)
        blogp = gather(lambda c: c.behavior_logp)
        due = gather(lambda c: c.versions == t)
        u = gather(lambda c: c.state["u"])
        temp = noise = flip = rand = None
        if any(run.spec.frictions.temperature(c.buggy) != 1.0 for run, (_, chunks) in zip(runs, group, strict=True)
               for c in chunks):
            temp = stack([temperature(run, chunks) for run, (_, chunks) in zip(runs, group, strict=True)])
        if any("noise" in c.state for c in allc):
            noise = gather(lambda c: c.state.get("noise", torch.zeros((c.size, self.loop.horizon, self.loop.n_actions))))
        if any("flip" in c.state for c in allc):
            flip = gather(lambda c: c.state.get("flip", torch.zeros((c.size, self.loop.horizon), dtype=torch.bool)))
            rand = gather(lambda c: c.state.get("random", torch.zeros((c.size, self.loop.horizon), dtype=torch.long)))
        perturbed = self._perturbed(t, group, runs, k0)
        size = self.loop.cfg0.group_size
        shared = self.loop.horizon == 1 and size > 1  # a bandit's groups: one forward per group (grouped_logits)
        with torch.no_grad():
            state = None if shared else self.loop.task.decode_state(policy, x, actions, k0)
            for k in range(k0, k1 + 1):
                if shared:
                    logits = grouped_logits(self.loop.task, policy, x, actions[..., :1], size)[:, :, 0]
                else:
                    logits, state = self.loop.task.decode(policy, state, actions, k)
                acting = logits
                if perturbed:
                    acting = logits.clone()
                    for (g, lo, hi), (view, pstate) in list(perturbed.items()):
                        plogits, pstate = self.loop.task.decode(view, pstate, actions[g : g + 1, lo:hi], k)
                        perturbed[(g, lo, hi)] = (view, pstate)
                        acting[g, lo:hi] = plogits[0]
                a = act(acting, u[..., k], temp, None if noise is None else noise[..., k, :],
                        None if flip is None else flip[..., k], None if rand is None else rand[..., k])
                d = due[..., k]
                actions[..., k] = torch.where(d, a, actions[..., k])
                blogp[..., k] = torch.where(d, token_logp(logits.unsqueeze(-2), a.unsqueeze(-1)).squeeze(-1), blogp[..., k])
        for g, ((_, chunks), run) in enumerate(zip(group, runs, strict=True)):
            lo = 0
            for c in chunks:
                c.actions, c.behavior_logp = actions[g, lo : lo + c.size], blogp[g, lo : lo + c.size]
                lo += c.size
                later = c.versions[c.versions > t]
                if later.numel():
                    run.schedule.defer(c, int(later.min()))
                else:
                    self._finish(run, c)

    def _perturbed(self, t: int, group: list, runs: list[RunState], k0: int) -> dict:
        """For chunks sampled by a ``perturb`` bug: a view of the policy with that run's weights perturbed
        (drawn now from the chunk's stream) and its decode state, keyed by (group row, first, last row)."""
        out = {}
        for g, ((pos, chunks), run) in enumerate(zip(group, runs, strict=True)):
            lo = 0
            for c in chunks:
                if c.buggy and run.spec.frictions.bug.kind == "perturb":
                    params = {k: v[pos : pos + 1] for k, v in self.loop.policy.named_parameters()}
                    noisy = run.spec.frictions.perturbed(params, c.state["gen"])
                    view = functools.partial(call_with, self.loop.policy, noisy)
                    x, a = c.contexts.unsqueeze(0), c.actions.unsqueeze(0)
                    out[(g, lo, lo + c.size)] = (view, self.loop.task.decode_state(view, x, a, k0))
                lo += c.size
        return out

    def _finish(self, run: RunState, chunk: Chunk) -> None:
        """A chunk's last event: its rewards (true and as shown to the learner)."""
        with torch.no_grad():
            chunk.true_rewards = self.loop.task.reward(chunk.contexts, chunk.actions).to(torch.float32)
        chunk.rewards = run.spec.frictions.corrupt_rewards(chunk.true_rewards, chunk.state["gen"])
        chunk.actions, chunk.behavior_logp = chunk.actions.clone(), chunk.behavior_logp.clone()
        chunk.state = {}
