"""The rollout side's one object: task, tokenizer, prompt encoding, sampling settings and rewards.

``Sampler.batch(model, k, version)`` is rollout batch k: ``prompts_per_step`` problems drawn from
the task with a stream that depends only on (seed, k), each encoded ``group_size`` times, completed
by ``model`` (`generation.sample_completions`, with the recorded behaviour log-probs and versions),
decoded and scored. The learner never calls into it: a `Sampler` is handed to the rollout side
(the learner's thread in sync mode, a worker thread, or a separate process, which receives it
pickled) and batches flow back. The learner keeps its own `Sampler` for greedy evaluation only
(`Sampler.replica`: the two never share a tokenizer). With ``autocast="bf16"`` generation runs under
the same autocast as the learner's forwards, so behaviour and learner log-probs come from the same
precision (the trainer logs what difference remains, ``mismatch_abs_max``).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import random
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from testbed.util import seeding

from .generation import Refresh, RolloutBatch, sample_completions
from .tasks import Problem, Task


@dataclass
class Sampler:
    """Everything needed to turn (weights, batch index) into a scored `RolloutBatch`."""

    task: Task
    tokenizer: Any
    style: str  # prompt style: compact, qa or chat
    seed: int
    prompts_per_step: int
    group_size: int
    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    eos_ids: list[int] = field(default_factory=list)
    autocast: str = "off"  # off | bf16: generate under the learner's autocast, so both sides compute alike
    shortcuts: bool = True  # skip discarded work in generation, bit for bit (`generation.sample_completions`)

    @property
    def pad_id(self) -> int:
        return int(self.tokenizer.pad_token_id)

    def replica(self) -> Sampler:
        """The same sampler with its own tokenizer (a fast tokenizer may not be used by two threads at once)."""
        return dataclasses.replace(self, tokenizer=copy.deepcopy(self.tokenizer))

    def _precision(self, device: torch.device) -> Any:
        if self.autocast == "bf16":
            return torch.autocast(device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def problems(self, k: int) -> list[Problem]:
        """The prompts of batch k (a stream keyed by the seed and k alone)."""
        rng = random.Random(seeding.derive(self.seed, "llm", "prompts", k))
        return [self.task.sample(rng) for _ in range(self.prompts_per_step)]

    def eval_problems(self, n: int) -> list[Problem]:
        """A fixed held-out set of ``n`` problems (its own stream)."""
        rng = random.Random(seeding.derive(self.seed, "llm", "eval"))
        return [self.task.sample(rng) for _ in range(n)]

    def prompt_text(self, problem: Problem) -> str:
        text = self.task.prompt(problem, self.style)
        if self.style == "chat":
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def encode(self, problems: list[Problem], repeat: int, device: torch.device) -> tuple[Tensor, Tensor]:
        texts = [self.prompt_text(p) for p in problems for _ in range(repeat)]
        enc = self.tokenizer(
            texts, padding=True, padding_side="left", return_tensors="pt", add_special_tokens=self.style != "chat"
        )
        return enc["input_ids"].to(device), enc["attention_mask"].to(device)

    def rewards(self, problems: list[Problem], repeat: int, ids: Tensor, mask: Tensor) -> Tensor:
        rows = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]
        texts = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return torch.tensor([self.task.reward(problems[i // repeat], t) for i, t in enumerate(texts)], dtype=torch.float32)

    def batch(self, model: torch.nn.Module, k: int, version: int, refresh: Refresh | None = None, chunk: int = 0) -> RolloutBatch:
        """Rollout batch k sampled by ``model`` (holding ``version``); prompts and noise depend only on (seed, k)."""
        device = next(model.parameters()).device
        problems = self.problems(k)
        prompt_ids, prompt_mask = self.encode(problems, self.group_size, device)
        generator = torch.Generator(device=device).manual_seed(seeding.derive(self.seed, "llm", "sample", k))
        t0 = time.perf_counter()
        with self._precision(device):
            ids, mask, logp, versions = sample_completions(
                model, prompt_ids, prompt_mask, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                top_k=self.top_k, top_p=self.top_p, eos_ids=self.eos_ids, pad_id=self.pad_id, generator=generator,
                version=version, refresh=refresh, chunk=chunk, shortcuts=self.shortcuts,
            )  # fmt: skip
        gen_seconds = time.perf_counter() - t0
        rewards = self.rewards(problems, self.group_size, ids, mask).to(device)
        groups = torch.arange(self.prompts_per_step, device=device).repeat_interleave(self.group_size)
        return RolloutBatch(k, prompt_ids, prompt_mask, ids, mask, logp, versions, rewards, groups, gen_seconds)

    @torch.no_grad()
    def greedy(self, model: torch.nn.Module, problems: list[Problem], micro: int) -> list[tuple[list[Problem], Tensor, Tensor]]:
        """Greedy completions of ``problems``, ``micro`` prompts per forward: (the chunk's problems, ids, mask) per
        chunk of prompts."""
        device = next(model.parameters()).device
        out = []
        for i in range(0, len(problems), micro):
            chunk = problems[i : i + micro]
            prompt_ids, prompt_mask = self.encode(chunk, 1, device)
            with self._precision(device):
                ids, mask, _, _ = sample_completions(
                    model, prompt_ids, prompt_mask, max_new_tokens=self.max_new_tokens, temperature=0.0,
                    eos_ids=self.eos_ids, pad_id=self.pad_id, shortcuts=self.shortcuts,
                )  # fmt: skip
            out.append((chunk, ids, mask))
        return out

    def evaluate(self, model: torch.nn.Module, problems: list[Problem], micro: int) -> float:
        """Mean reward of greedy completions of ``problems`` (``micro`` prompts per forward)."""
        chunks = self.greedy(model, problems, micro)
        return float(torch.cat([self.rewards(chunk, 1, ids, mask) for chunk, ids, mask in chunks]).mean())
