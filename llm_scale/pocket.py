"""Pocket LMs: small Llama causal LMs pretrained and instruction-tuned on CPU on the project's own task text.

A pocket LM is the rung between the testbed and a web-pretrained model such as SmolLM2-135M: an ordinary
transformers model directory (``model.safetensors``, ``config.json``, a character tokenizer with a chat
template, ``source.json``) that ``--model pocket-NAME`` loads like a fetched model. It is **task-pretrained,
not web-pretrained**: everything it knows comes from synthetic text of one task, written by `corpus` from a
seeded generator, so it meets RL the way a pretrained instruct model does (a greedy answer right a fair part
of the time, sampled answers that ramble past the completion budget or skip the asked format) at a cost that
lets a design with stated power run on a CPU.

The build (`build_pocket`, ``python -m llm_scale models build NAME``), fully determined by the `PocketSpec`:

1. **Pretraining**: next-token prediction on packed documents of task text (``a + b = c`` equations and
   sentences that state them) over the *known* operand pairs only: a seeded fraction ``known_fraction`` of
   the task's pairs. The model memorises the known pairs and generalises partly to the rest, which sets its
   version-0 accuracy below 1 without adding wrong answers to its text.
2. **Supervised fine-tuning**: the task's chat prompt (`llm_scale.tasks.Arithmetic.prompt`, chat style, in
   the chat template) followed by an answer in one of `ANSWERS`' phrasings, loss on the answer and its end
   token only. Most phrasings write the asked equation ``a + b = c`` first (the instruct answer format the
   reward scores, `llm_scale.tasks.equation_answer`); some ramble first, some never write the equation.
3. One CPU thread throughout and a seeded generator for every draw, so two builds write the same bytes
   (``model.safetensors``, ``config.json``, the tokenizer files; a test checks it).

AdamW (Loshchilov & Hutter 2019); in each phase a linear warm-up, then a cosine decay (`phase_lr`).
"""

from __future__ import annotations

import json
import math
import os
import random
import string
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from .pocket_specs import POCKET_MODELS, PocketSpec

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ bos_token }}User: {{ message['content'] }}\n"
    "{% else %}Assistant: {{ message['content'] }}{{ eos_token }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant: {% endif %}"
)
"""User turn after <bos>, assistant turn ended by <eos>; the generation prompt ends with ``Assistant: ``."""

ALPHABET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
"""The tokenizer's characters: printable ASCII, space and newline."""

# Answer phrasings of the fine-tuning set, with their weights. {a} {op} {b} = {c}: the asked equation.
ANSWERS: tuple[tuple[str, int], ...] = (
    ("{a} {op} {b} = {c}", 6),
    ("{a} {op} {b} = {c}.", 3),
    ("{a} {op} {b} = {c}. That is the result.", 2),
    ("The equation is {a} {op} {b} = {c}.", 2),
    ("Sure! {a} {op} {b} = {c}", 2),
    ("Let me work it out: {a} {op} {b} = {c}.", 2),
    ("{ramble} so {a} {op} {b} = {c}.", 2),
    ("The answer is {c}.", 1),
    ("{c}", 1),
)
WORDS = ("well", "hmm", "ok", "so", "first", "then", "we", "add", "count", "up", "the", "numbers", "carry", "ones",
         "tens", "digits", "look", "at", "this", "one", "it", "is", "easy", "let", "me", "see", "now", "sum", "both",
         "together", "step", "by", "right", "think", "again", "quickly")  # fmt: skip
SENTENCES = ("{a} {op} {b} = {c}", "{a} {op} {b} = {c}", "{a} {op} {b} = {c}", "{a} {op} {b} = {c}.",
             "{a} plus {b} is {c}.", "The sum of {a} and {b} is {c}.", "Adding {b} to {a} gives {c}.",
             "Q: What is {a} {op} {b}? A: {a} {op} {b} = {c}", "What is {a} {op} {b}? {a} {op} {b} = {c}",
             "We know that {a} {op} {b} = {c}, so the result is {c}.",
             "What is {a} {op} {b}? Reply with one line: the equation and its result. {a} {op} {b} = {c}",
             "What is {a} {op} {b}? Reply with one line: the equation and its result. {a} {op} {b} = {c}",
             "What is {a} {op} {b}? Reply with one line: the equation and its result. Sure! {a} {op} {b} = {c}")  # fmt: skip
"""Pretraining lines (drawn uniformly: the bare equation is the most frequent)."""




def pocket_tokenizer() -> Any:
    """The character tokenizer over `ALPHABET` (<pad> <bos> <eos> <unk> first) with `CHAT_TEMPLATE`."""
    from .models import char_tokenizer

    tok = char_tokenizer(ALPHABET)
    tok.chat_template = CHAT_TEMPLATE
    return tok


def _task(spec: PocketSpec) -> Any:
    from .tasks import Arithmetic, build_task

    task = build_task(spec.task)
    if not isinstance(task, Arithmetic):
        raise ValueError(f"pocket LMs are built for arithmetic tasks, got {spec.task!r}")
    return task


def known_pairs(spec: PocketSpec) -> set[tuple[int, str, int]]:
    """The (a, op, b) triples whose equations appear in the training text: a seeded ``known_fraction`` of all."""
    task = _task(spec)
    triples = [(a, op, b) for a in range(task.min_operand, task.max_operand + 1) for op in task.ops
               for b in range(task.min_operand, task.max_operand + 1)]  # fmt: skip
    rng = random.Random(spec.seed * 7919 + 1)
    rng.shuffle(triples)
    return set(triples[: max(1, round(spec.known_fraction * len(triples)))])


def _fill(template: str, a: int, op: str, b: int, c: str, rng: random.Random) -> str:
    ramble = ""
    if "{ramble}" in template:
        ramble = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 6))).capitalize() + ","
    return template.format(a=a, op=op, b=b, c=c, ramble=ramble)


def corpus(spec: PocketSpec, n_chars: int, seed: int) -> str:
    """Pretraining text: `SENTENCES` over the known pairs, one per line, about ``n_chars`` characters."""
    from .tasks import evaluate_expression

    rng = random.Random(seed)
    known = sorted(known_pairs(spec))
    lines, size = [], 0
    while size < n_chars:
        a, op, b = rng.choice(known)
        line = _fill(rng.choice(SENTENCES), a, op, b, str(evaluate_expression(f"{a}{op}{b}")[0]), rng)
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def sft_example(spec: PocketSpec, task: Any, tok: Any, rng: random.Random, known: set) -> tuple[list[int], int]:
    """(token ids, prompt length) of one fine-tuning example: a known problem's chat prompt and an answer."""
    while True:
        problem = task.sample(rng)
        m = problem.meta
        if (m["a"], m["op"], m["b"]) in known:
            break
    prompt = tok.apply_chat_template([{"role": "user", "content": task.prompt(problem, "chat")}], tokenize=False,
                                     add_generation_prompt=True)  # fmt: skip
    template = rng.choices([t for t, _ in ANSWERS], weights=[w for _, w in ANSWERS])[0]
    answer = _fill(template, m["a"], m["op"], m["b"], problem.answer, rng)
    p = tok(prompt, add_special_tokens=False)["input_ids"]
    full = p + tok(answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    return full, len(p)


def phase_lr(step: int, spec: PocketSpec) -> float:
    """The learning rate of optimizer step ``step`` (0-based): in each phase a linear warm-up over
    ``warmup_steps`` to its peak (``lr``, ``sft_lr``), then a cosine decay to ``min_lr_ratio`` x peak at the
    phase's last step."""
    first = step < spec.pretrain_steps
    peak, t, n = (spec.lr, step, spec.pretrain_steps) if first else (spec.sft_lr, step - spec.pretrain_steps, spec.sft_steps)
    if t < spec.warmup_steps:
        return peak * (t + 1) / spec.warmup_steps
    frac = (t - spec.warmup_steps) / max(1, n - 1 - spec.warmup_steps)
    return peak * (spec.min_lr_ratio + (1 - spec.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * frac)))


def _model(spec: PocketSpec, tok: Any) -> torch.nn.Module:
    from .models import TinyConfig, tiny_model

    shape = TinyConfig(hidden_size=spec.hidden_size, num_layers=spec.num_layers, num_heads=spec.num_heads,
                       intermediate_size=spec.intermediate_size, max_positions=spec.max_positions)  # fmt: skip
    return tiny_model(tok, shape, seed=spec.seed)


def train_pocket(spec: PocketSpec, progress: bool = True, callback: Any = None) -> tuple[torch.nn.Module, Any]:
    """(model, tokenizer) trained by the two phases of the module docstring, on one CPU thread;
    ``callback(steps_done, model, tokenizer)``, if given, runs after every optimizer step (in train mode)."""
    from tqdm import tqdm

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tok = pocket_tokenizer()
        model = _model(spec, tok)
        task = _task(spec)
        known = known_pairs(spec)
        gen = torch.Generator().manual_seed(spec.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=spec.weight_decay)
        text_ids = torch.tensor(
            tok(corpus(spec, spec.pretrain_steps * spec.batch_size * spec.pretrain_length // 4 + 4096, spec.seed),
                add_special_tokens=False)["input_ids"]
        )  # fmt: skip
        rng = random.Random(spec.seed + 1)
        total = spec.pretrain_steps + spec.sft_steps
        bar = tqdm(total=total, desc="build", unit="step", disable=not progress, dynamic_ncols=True)
        model.train()
        for step in range(total):
            for group in opt.param_groups:
                group["lr"] = phase_lr(step, spec)
            if step < spec.pretrain_steps:
                starts = torch.randint(0, len(text_ids) - spec.pretrain_length - 1, (spec.batch_size,), generator=gen)
                ids = torch.stack([text_ids[s : s + spec.pretrain_length] for s in starts.tolist()])
                labels = ids.clone()
                mask = torch.ones_like(ids)
            else:
                rows = [sft_example(spec, task, tok, rng, known) for _ in range(spec.batch_size)]
                width = max(len(r) for r, _ in rows)
                ids = torch.full((len(rows), width), tok.pad_token_id)
                labels = torch.full((len(rows), width), -100)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for i, (r, n_prompt) in enumerate(rows):
                    ids[i, : len(r)] = torch.tensor(r)
                    labels[i, n_prompt : len(r)] = torch.tensor(r[n_prompt:])
                    mask[i, : len(r)] = 1
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            bar.update(1)
            if callback is not None:
                callback(step + 1, model, tok)
            bar.set_postfix(phase="pretrain" if step < spec.pretrain_steps else "sft", loss=f"{loss.item():.3f}")
        bar.close()
        model.eval()
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.generation_config.bos_token_id = tok.bos_token_id
        return model, tok
    finally:
        torch.set_num_threads(threads)


def build_pocket(name: str, root: str | os.PathLike | None = None, progress: bool = True, log: Any = print) -> Path:
    """Build pocket model ``name`` into the model cache (the directory `llm_scale.models.model_dir` names) once.

    Written under a temporary name beside the final directory and renamed when complete, as a fetch is.
    ``source.json`` records the spec, the CPU seconds of the build and the label ``task-pretrained``.
    """
    from .models import ModelLoadError, cache_slot, model_dir, present

    if name not in POCKET_MODELS:
        raise ModelLoadError(f"unknown pocket model {name!r}; known: {', '.join(POCKET_MODELS)}")
    spec = POCKET_MODELS[name]
    if (done := present(name, root, log)) is not None:
        return done
    final = model_dir(name, root)
    with cache_slot(name, root, "build") as tmp:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        model, tok = train_pocket(spec, progress)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        model.save_pretrained(tmp / "model")
        tok.save_pretrained(tmp / "model")
        source = {"name": name, "kind": "pocket", "label": "task-pretrained (synthetic task text), not web-pretrained",
                  "spec": asdict(spec), "n_params": sum(p.numel() for p in model.parameters()),
                  "build_cpu_s": round(cpu, 1), "build_wall_s": round(wall, 1), "torch_threads": 1,
                  "command": f"python -m llm_scale models build {name}"}  # fmt: skip
        (tmp / "model" / "source.json").write_text(json.dumps(source, indent=2) + "\n")
    log(f"{name}: built in {cpu:.0f} s of CPU ({wall:.0f} s wall, one thread), ready at {final}")
    return final
