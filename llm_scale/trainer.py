"""Asynchronous GRPO on a Hugging Face causal LM, driven by the same recipe objects as the testbed.

One update k consumes rollout batch k (``prompts_per_step`` prompts x ``group_size`` samples):

1. the learner recomputes per-token log-probs of the sampled tokens (same temperature as the
   sampler); the detached values are also the proximal log-probs (AReaL's pi_prox: the policy at
   the start of this update);
2. ``recipe.advantages(rewards, group_ids, logp, behavior_logp, mask[, score_sq_norms])``;
3. for each of ``minibatches`` slices: ``recipe.loss(PolicyTerms(...), agg)`` -> backward ->
   ``recipe.step(model, AdamW, terms)`` (gradient transforms, then the optimizer step with the
   transforms' lr scale for that step only);
4. the learner's weights become version k + 1 and are published to the rollout worker.

The recipe is ``testbed.stabilizers.build(spec)``: the very objects the testbed validates.
Metrics go to ``<out>/metrics.csv`` (and TensorBoard); checkpoints to ``<out>/checkpoints``.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from testbed.stabilizers import AGG_MODES, BatchStats, PolicyTerms, build

from .metrics import MetricsLog
from .models import TinyConfig, load_policy
from .rollout import LAG_POLICIES, RolloutBatch, RolloutPipeline, position_ids, sample_completions
from .tasks import STYLES, Problem, build_task

# Settings a resumed run must share with the run that wrote the checkpoint.
RESUME_KEYS = (
    "model", "task", "data", "recipe", "max_staleness", "lag_policy", "sync", "partial_chunk", "prompts_per_step",
    "group_size", "max_new_tokens", "temperature", "agg", "seed", "prompt_style", "minibatches", "proximal", "dtype",
)


@dataclass
class TrainConfig:
    """Everything a run depends on (the CLI's flags). ``None`` means: pick a default from the model/task."""

    model: str = "tiny"
    task: str = "copy"
    recipe: str = "pg"
    max_staleness: int = 0
    steps: int = 100
    stop_after: int = 0  # stop (checkpointed) after this many updates of the --steps schedule; 0: run to the end
    prompts_per_step: int = 8
    group_size: int = 8
    max_new_tokens: int | None = None
    temperature: float = 1.0
    lr: float | None = None  # 1e-3 for the tiny model, 1e-6 otherwise
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    agg: str = "token-mean"
    lag_policy: str = "latest"
    partial_chunk: int = 0
    sync: bool = False
    minibatches: int = 1
    micro_batch_size: int = 0  # 0: the whole minibatch in one forward
    proximal: bool = True
    nan_policy: str = "mask"
    seed: int = 0
    device: str = "auto"
    dtype: str = "float32"
    prompt_style: str = "auto"
    data: str | None = None
    out: str = "runs/llm"
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: str | None = None
    eval_every: int = 0
    eval_size: int = 64
    tensorboard: str = "auto"
    grad_cosine: bool = True
    progress: bool = True
    tiny: TinyConfig = field(default_factory=TinyConfig)

    def validate(self) -> None:
        def need(ok: bool, message: str) -> None:
            if not ok:
                raise ValueError(message)

        need(self.max_staleness >= 0, f"--max-staleness must be >= 0, got {self.max_staleness}")
        need(self.steps >= 1, f"--steps must be >= 1, got {self.steps}")
        need(self.stop_after >= 0, f"--stop-after must be >= 0, got {self.stop_after}")
        need(self.prompts_per_step >= 1, f"--prompts-per-step must be >= 1, got {self.prompts_per_step}")
        need(self.group_size >= 1, f"--group-size must be >= 1, got {self.group_size}")
        need(self.max_new_tokens is None or self.max_new_tokens >= 1, "--max-new-tokens must be >= 1")
        need(self.temperature > 0, f"--temperature must be > 0 for training, got {self.temperature}")
        need(self.agg in AGG_MODES, f"unknown --agg {self.agg!r}; allowed: {', '.join(AGG_MODES)}")
        need(self.lag_policy in LAG_POLICIES, f"unknown --lag-policy {self.lag_policy!r}; allowed: {', '.join(LAG_POLICIES)}")
        need(self.minibatches >= 1, f"--minibatches must be >= 1, got {self.minibatches}")
        need(
            self.prompts_per_step * self.group_size % self.minibatches == 0,
            f"--minibatches {self.minibatches} must divide the batch size {self.prompts_per_step * self.group_size}",
        )
        need(self.micro_batch_size >= 0, "--micro-batch-size must be >= 0")
        need(self.nan_policy in ("raise", "mask"), "--nan-policy must be raise or mask")
        need(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"), f"bad --device {self.device!r}")
        need(self.dtype in ("float32", "bfloat16", "float16"), f"--dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        need(self.prompt_style in ("auto", *STYLES), f"--prompt-style must be auto or one of {', '.join(STYLES)}")
        need(self.eval_size >= 1, "--eval-size must be >= 1")
        need(self.checkpoint_every >= 0 and self.eval_every >= 0, "--checkpoint-every/--eval-every must be >= 0")
        need(self.keep_checkpoints >= 1, "--keep-checkpoints must be >= 1")
        need(not (self.partial_chunk and (self.sync or self.lag_policy != "latest")),
             "--partial-chunk needs asynchronous rollouts with --lag-policy latest")


def _seed_of(seed: int, k: int, stream: int) -> int:
    """A distinct 63-bit seed per (run seed, batch, stream): batch k's data never depends on timing."""
    return (seed * 1_000_003 + k * 7_919 + stream * 104_729) % (2**63 - 1)


class Trainer:
    """Runs `TrainConfig`; ``run()`` returns a summary dict (final metrics, status, paths)."""

    def __init__(self, cfg: TrainConfig) -> None:
        cfg.validate()
        self.cfg = cfg
        self.recipe = build(cfg.recipe)  # fails early, with the list of allowed names
        self.task = build_task(cfg.task, data=cfg.data)
        self.device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device)
        dtype = getattr(torch, cfg.dtype)
        self.model, self.tokenizer = load_policy(
            cfg.model, alphabet=self.task.alphabet, tiny=cfg.tiny, seed=cfg.seed, dtype=dtype
        )
        self.model.to(device=self.device, dtype=dtype).eval()  # eval: no dropout, so learner and sampler agree
        self.style = cfg.prompt_style
        if self.style == "auto":
            self.style = "compact" if cfg.model == "tiny" else ("chat" if getattr(self.tokenizer, "chat_template", None) else "qa")
        self.max_new_tokens = cfg.max_new_tokens or self.task.max_new_tokens
        lr = cfg.lr if cfg.lr is not None else (1e-3 if cfg.model == "tiny" else 1e-6)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        self.eos_ids = self._eos_ids()
        self.tokenizer_lock = threading.Lock()  # the worker and the learner (eval) share the tokenizer
        self.batch_size = cfg.prompts_per_step * cfg.group_size
        self.micro = cfg.micro_batch_size or self.batch_size
        self.prev_grad: list[Tensor] | None = None
        self.out = Path(cfg.out)
        self.step = 0
        self.pending: dict[int, RolloutBatch] = {}
        if cfg.resume:
            self._load_checkpoint(self._find_checkpoint(cfg.resume))
        self.eval_problems = self._eval_problems()

    # -- prompts and rollouts -----------------------------------------------------------------------
    def _eos_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        extra = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        ids.update(extra if isinstance(extra, (list, tuple)) else [extra] if extra is not None else [])
        return sorted(i for i in ids if i is not None)

    def _prompt_text(self, problem: Problem) -> str:
        text = self.task.prompt(problem, self.style)
        if self.style == "chat":
            return self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
        return text

    def _encode(self, problems: list[Problem], repeat: int) -> tuple[Tensor, Tensor]:
        with self.tokenizer_lock:
            texts = [self._prompt_text(p) for p in problems for _ in range(repeat)]
            enc = self.tokenizer(
                texts, padding=True, padding_side="left", return_tensors="pt", add_special_tokens=self.style != "chat"
            )
        return enc["input_ids"].to(self.device), enc["attention_mask"].to(self.device)

    def _rewards(self, problems: list[Problem], repeat: int, ids: Tensor, mask: Tensor) -> Tensor:
        rows = [ids[i][mask[i]].tolist() for i in range(ids.shape[0])]
        with self.tokenizer_lock:
            texts = self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return torch.tensor([self.task.reward(problems[i // repeat], t) for i, t in enumerate(texts)], dtype=torch.float32)

    def make_batch(self, model: torch.nn.Module, k: int, version: int, refresh: Any = None) -> RolloutBatch:
        """Rollout batch k sampled by ``model`` (at ``version``); prompts and noise depend only on (seed, k)."""
        cfg = self.cfg
        rng = random.Random(_seed_of(cfg.seed, k, 0))
        problems = [self.task.sample(rng) for _ in range(cfg.prompts_per_step)]
        prompt_ids, prompt_mask = self._encode(problems, cfg.group_size)
        generator = torch.Generator(device=self.device).manual_seed(_seed_of(cfg.seed, k, 1))
        t0 = time.perf_counter()
        ids, mask, logp, versions = sample_completions(
            model, prompt_ids, prompt_mask, max_new_tokens=self.max_new_tokens, temperature=cfg.temperature,
            eos_ids=self.eos_ids, pad_id=self.tokenizer.pad_token_id, generator=generator, version=version,
            refresh=refresh, chunk=cfg.partial_chunk,
        )  # fmt: skip
        gen_seconds = time.perf_counter() - t0
        rewards = self._rewards(problems, cfg.group_size, ids, mask).to(self.device)
        groups = torch.arange(cfg.prompts_per_step, device=self.device).repeat_interleave(cfg.group_size)
        return RolloutBatch(k, prompt_ids, prompt_mask, ids, mask, logp, versions, rewards, groups, gen_seconds)

    def _eval_problems(self) -> list[Problem]:
        rng = random.Random(_seed_of(self.cfg.seed, 0, 2))
        return [self.task.sample(rng) for _ in range(self.cfg.eval_size)]

    @torch.no_grad()
    def evaluate(self) -> float:
        """Mean reward of greedy completions on a fixed held-out set of ``eval_size`` problems."""
        rewards = []
        for i in range(0, len(self.eval_problems), self.micro):
            chunk = self.eval_problems[i : i + self.micro]
            prompt_ids, prompt_mask = self._encode(chunk, 1)
            ids, mask, _, _ = sample_completions(
                self.model, prompt_ids, prompt_mask, max_new_tokens=self.max_new_tokens, temperature=0.0,
                eos_ids=self.eos_ids, pad_id=self.tokenizer.pad_token_id,
            )  # fmt: skip
            rewards.append(self._rewards(chunk, 1, ids, mask))
        return float(torch.cat(rewards).mean())

    # -- the learner --------------------------------------------------------------------------------
    def token_logp(self, batch: RolloutBatch, rows: slice) -> Tensor:
        """log pi_theta(token) [b, T] for the completion tokens of ``rows``, at the sampling temperature."""
        comp = batch.completion_ids[rows]
        ids = torch.cat([batch.prompt_ids[rows], comp], dim=1)
        attn = torch.cat([batch.prompt_mask[rows].long(), batch.completion_mask[rows].long()], dim=1)
        kwargs = {"input_ids": ids, "attention_mask": attn, "position_ids": position_ids(attn), "use_cache": False}
        try:
            logits = self.model(**kwargs, logits_to_keep=comp.shape[1] + 1).logits
        except TypeError:  # models without logits_to_keep
            logits = self.model(**kwargs).logits
        logits = logits[:, -comp.shape[1] - 1 : -1].float() / self.cfg.temperature
        return F.log_softmax(logits, dim=-1).gather(-1, comp[..., None])[..., 0]

    def _score_sq_norms(self, batch: RolloutBatch) -> Tensor:
        """||grad log pi(tau_i)||^2 per sequence (one backward per sequence; for OPOB)."""
        from testbed.stabilizers.score_norms import score_sq_norms

        def seq_logp(forward: Any, prompt: Tensor, pmask: Tensor, comp: Tensor, cmask: Tensor) -> Tensor:
            ids = torch.cat([prompt, comp], dim=1)
            attn = torch.cat([pmask.long(), cmask.long()], dim=1)
            logits = forward(input_ids=ids, attention_mask=attn, position_ids=position_ids(attn), use_cache=False).logits
            logits = logits[:, -comp.shape[1] - 1 : -1].float() / self.cfg.temperature
            lp = F.log_softmax(logits, dim=-1).gather(-1, comp[..., None])[..., 0]
            return (lp * cmask).sum()

        return score_sq_norms(
            self.model, seq_logp, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
            batch.completion_mask.to(torch.float32), method="loop",
        ).to(self.device)  # fmt: skip

    def _grad_stats(self) -> dict[str, float]:
        """Norm of the raw gradient and its cosine with the previous update's raw gradient."""
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        sq = sum(float(g.float().pow(2).sum()) for g in grads)
        out = {"grad_norm_raw": math.sqrt(sq)}
        if not self.cfg.grad_cosine:
            return out
        if self.prev_grad is not None and len(self.prev_grad) == len(grads):
            dot = sum(float((g.float() * h).sum()) for g, h in zip(grads, self.prev_grad, strict=True))
            prev_sq = sum(float(h.pow(2).sum()) for h in self.prev_grad)
            out["grad_cos_prev"] = dot / math.sqrt(sq * prev_sq) if sq > 0 and prev_sq > 0 else 0.0
            for h, g in zip(self.prev_grad, grads, strict=True):
                h.copy_(g)
        else:
            self.prev_grad = [g.detach().float().clone() for g in grads]
        return out

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """One learner update on ``batch`` (all its minibatches); returns the step's metrics."""
        cfg, recipe = self.cfg, self.recipe
        n = batch.completion_ids.shape[0]
        mask, blogp = batch.completion_mask, batch.behavior_logp
        single = cfg.minibatches == 1 and self.micro >= n
        if single:
            logp_all = self.token_logp(batch, slice(None))
            current = logp_all.detach()
        else:
            with torch.no_grad():
                current = torch.cat([self.token_logp(batch, slice(i, i + self.micro)) for i in range(0, n, self.micro)])
        norms = self._score_sq_norms(batch) if recipe.needs_score_norms else None
        adv = recipe.advantages(
            batch.rewards, group_ids=batch.group_ids, logp=current, behavior_logp=blogp, mask=mask, score_sq_norms=norms
        )
        metrics: dict[str, float] = {}
        ess = BatchStats.from_terms(PolicyTerms(current, blogp, adv, mask)).ess
        metrics["ess"] = float("nan") if ess is None else ess
        pooled: list[tuple[dict[str, float], float]] = []
        size = n // cfg.minibatches
        for start in range(0, n, size):
            rows = range(start, start + size)
            self.optimizer.zero_grad(set_to_none=True)
            n_tok = float(mask[start : start + size].sum())
            n_seq = float(mask[start : start + size].any(-1).sum())
            detached = []
            loss_total = 0.0
            for i in range(rows.start, rows.stop, self.micro):
                sl = slice(i, min(i + self.micro, rows.stop))
                logp = logp_all if single else self.token_logp(batch, sl)
                terms = PolicyTerms(
                    logp, blogp[sl], adv[sl], mask[sl], proximal_logp=current[sl] if cfg.proximal else None,
                    versions=batch.versions[sl], group_ids=batch.group_ids[sl], rewards=batch.rewards[sl],
                )  # fmt: skip
                extra = {} if sl == slice(rows.start, rows.stop) else {"global_tokens": n_tok, "global_seqs": n_seq}
                out = recipe.loss(terms, cfg.agg, nan_policy=cfg.nan_policy, **extra)
                out.loss.backward()
                loss_total += float(out.loss.detach())
                pooled.append((out.metrics, float(mask[sl].sum())))
                detached.append(logp.detach())
            grad = self._grad_stats()
            stats_terms = PolicyTerms(torch.cat(detached), blogp[rows.start : rows.stop], adv[rows.start : rows.stop],
                                      mask[rows.start : rows.stop])  # fmt: skip
            step_metrics = recipe.step(self.model, self.optimizer, stats_terms)
            pooled.append(({**grad, **step_metrics, "loss": loss_total}, 1.0))
        metrics.update(_pool(pooled))
        lag = (self.step - batch.versions)[mask]
        lengths = mask.sum(-1).float()
        finished = torch.isin(batch.completion_ids, torch.tensor(self.eos_ids, device=self.device)) & mask
        metrics.update(
            reward_mean=float(batch.rewards.mean()),
            reward_std=float(batch.rewards.std()) if n > 1 else 0.0,
            length_mean=float(lengths.mean()),
            length_max=float(lengths.max()),
            truncated_frac=float(1.0 - finished.any(-1).float().mean()),
            lag_mean=float(lag.float().mean()) if lag.numel() else 0.0,
            lag_max=float(lag.max()) if lag.numel() else 0.0,
            versions_per_seq=float(_distinct_per_row(batch.versions, mask).float().mean()),
        )
        return metrics

    # -- checkpoints --------------------------------------------------------------------------------
    def _find_checkpoint(self, where: str) -> Path:
        path = Path(where)
        if where == "auto":
            pointer = self.out / "checkpoints" / "latest"
            if not pointer.is_file():
                raise FileNotFoundError(f"--resume auto: no checkpoint under {self.out / 'checkpoints'}")
            path = self.out / "checkpoints" / pointer.read_text().strip()
        if not (path / "trainer.json").is_file():
            raise FileNotFoundError(f"--resume {where}: {str(path)!r} is not a checkpoint directory (no trainer.json)")
        return path

    def save_checkpoint(self, pipeline: RolloutPipeline | None) -> Path:
        """Write the state before update ``self.step``: weights, optimizer, stabilizer, RNG, queued rollouts."""
        from safetensors.torch import save_model

        root = self.out / "checkpoints"
        final = root / f"step_{self.step:07d}"
        tmp = root / f".tmp_step_{self.step:07d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        save_model(self.model, str(tmp / "model.safetensors"))
        torch.save(self.optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(self.recipe.state_dict(), tmp / "stabilizer.pt")
        pending = pipeline.pending(self.step) if pipeline is not None else {}
        torch.save({k: b.state() for k, b in pending.items()}, tmp / "rollouts.pt")
        torch.save(
            {
                "torch": torch.random.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "python": random.getstate(),
                "numpy": np.random.get_state(),
                "prev_grad": [g.cpu() for g in self.prev_grad] if self.prev_grad is not None else None,
            },
            tmp / "rng.pt",
        )
        config = asdict(self.cfg)
        (tmp / "trainer.json").write_text(json.dumps({"step": self.step, "config": config}, indent=2, default=str))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        (root / "latest").write_text(final.name)
        kept = sorted(p for p in root.glob("step_*") if p.is_dir())
        for old in kept[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _load_checkpoint(self, path: Path) -> None:
        from safetensors.torch import load_model

        info = json.loads((path / "trainer.json").read_text())
        saved, now = info["config"], asdict(self.cfg)
        diff = [f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}" for k in RESUME_KEYS if saved.get(k) != now[k]]
        if diff:
            raise ValueError(f"cannot resume from {path}: settings differ ({'; '.join(diff)})")
        load_model(self.model, str(path / "model.safetensors"), device=str(self.device))
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device, weights_only=False))
        self.recipe.load_state_dict(torch.load(path / "stabilizer.pt", map_location=self.device, weights_only=False))
        rng = torch.load(path / "rng.pt", weights_only=False)
        torch.random.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        if rng["prev_grad"] is not None:
            self.prev_grad = [g.to(self.device) for g in rng["prev_grad"]]
        rollouts = torch.load(path / "rollouts.pt", weights_only=False)
        self.pending = {int(k): RolloutBatch(**v).to(self.device) for k, v in rollouts.items()}
        self.step = int(info["step"])

    # -- the loop -----------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "config.json").write_text(json.dumps(asdict(cfg), indent=2, default=str))
        log = MetricsLog(self.out / "metrics.csv", resume_step=self.step if cfg.resume else 0, tensorboard=cfg.tensorboard)
        pipeline = RolloutPipeline(
            self.make_batch, self.model, eta=cfg.max_staleness, total=cfg.steps, start=self.step, sync=cfg.sync,
            lag_policy=cfg.lag_policy, partial_chunk=cfg.partial_chunk, pending=self.pending,
        )  # fmt: skip
        status, row = "finished", {}
        progress = _progress(cfg.progress, initial=self.step, total=cfg.steps)
        t_start, tokens = time.perf_counter(), 0
        stop = min(cfg.steps, cfg.stop_after) if cfg.stop_after else cfg.steps
        try:
            while self.step < stop:
                t0 = time.perf_counter()
                batch, waited = pipeline.get(self.step)
                metrics = self.update(batch)
                self.step += 1
                pipeline.publish(self.step)
                tokens += batch.n_tokens
                elapsed = time.perf_counter() - t0
                row = {"step": self.step - 1, **metrics}
                row.update(
                    gen_tokens_per_s=batch.n_tokens / max(batch.gen_seconds, 1e-9),
                    tokens_per_s=tokens / max(time.perf_counter() - t_start, 1e-9),
                    step_seconds=elapsed,
                    wait_seconds=waited,
                )
                if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                    row["eval_reward"] = self.evaluate()
                log.log(row)
                progress.update(1)
                progress.set_postfix(reward=f"{row['reward_mean']:.3f}", lag=f"{row['lag_mean']:.1f}", refresh=False)
                if not all(math.isfinite(float(p.detach().float().abs().max())) for p in self.model.parameters()):
                    status = "diverged"
                    break
                at_end = self.step == stop and (cfg.checkpoint_every or stop < cfg.steps)
                if at_end or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    self.save_checkpoint(pipeline)
            if self.step < cfg.steps and status == "finished":
                status = "stopped"
        finally:
            pipeline.close()
            progress.close()
            log.close()
        if status in ("finished", "stopped"):
            final = self.out / "final"
            self.model.save_pretrained(final)
            self.tokenizer.save_pretrained(final)
        summary = {"status": status, "steps": self.step, "out": str(self.out), "last": row}
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
        return summary


def _distinct_per_row(versions: Tensor, mask: Tensor) -> Tensor:
    """Number of distinct policy versions among each sequence's tokens (1 unless partial rollouts)."""
    v = torch.where(mask, versions, versions.new_full((), -1))
    changes = (v[:, 1:] != v[:, :-1]) & mask[:, 1:] & mask[:, :-1]
    return 1 + changes.sum(-1)


def _pool(items: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Combine per-micro-batch metrics: max of ``*_max``, min of ``*_min``, else a weighted mean."""
    out: dict[str, float] = {}
    weights: dict[str, float] = {}
    for metrics, w in items:
        for key, value in metrics.items():
            value = float(value)
            if key not in out:
                out[key], weights[key] = value * (1 if key.endswith(("_max", "_min")) else w), w
            elif key.endswith("_max"):
                out[key] = max(out[key], value)
            elif key.endswith("_min"):
                out[key] = min(out[key], value)
            else:
                out[key] += value * w
                weights[key] += w
    return {k: v if k.endswith(("_max", "_min")) else v / max(weights[k], 1e-12) for k, v in out.items()}


class _NoProgress:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw: Any) -> None: ...
    def close(self) -> None: ...


def _progress(enabled: bool, *, initial: int, total: int) -> Any:
    if not enabled:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc="train", unit="step", dynamic_ncols=True)
