"""Asynchronous GRPO on a Hugging Face causal LM, driven by the same recipe objects as the testbed.

Read top to bottom: `Trainer.__init__` turns the config into a recipe, a task, a model and the two
sides of the pipeline (a `Sampler` for the rollout side, a `Learner`), refusing bad input before
anything is written; `Trainer.run` is the loop: take batch k from the rollout side, update
(`Learner.update`), publish the new weights, log, evaluate, checkpoint. Batches flow from the
rollout side to the learner and weights the other way; nothing calls back.

The recipe is ``testbed.stabilizers.build(spec)``: the very objects the testbed validates.
Outputs under ``--out``: metrics.csv (one row per update), grad_steps.csv (one row per optimizer
step: gradient norm, cosine to the previous step and the kind of pair), eval.csv (greedy
evaluation by policy version, from version 0), summary.json (with the device it ran on), code.json (the
fingerprint of the code a fresh run started with, `run_code`: a study retrains a run whose code has changed),
tensorboard/, checkpoints/, final/, and error.log when a run fails.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import json
import os
import pickle
import random
import shutil
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from testbed.stabilizers import build
from testbed.util.files import atomic_write_text, file_mode

from .config import TrainConfig, UsageError, check_device, check_paths, check_space, checkpoint_pointer
from .generation import NonFiniteRollout, RolloutBatch
from .learner import Learner, LearnerSettings, lr_multiplier
from .metrics import CsvLog, add_scalars, tensorboard_writer, train_progress
from .models import ModelLoadError, load_policy, n_params, prompt_style, random_init, stop_ids
from .rollout import Plan, make_rollouts
from .sampler import Sampler
from .tasks import build_task, completion_budget, truncation_warning

# Settings a resumed run must share with the run that wrote the checkpoint.
RESUME_KEYS = (
    "model", "task", "data", "recipe", "seed", "max_staleness", "lag_policy", "partial_chunk", "prompts_per_step",
    "group_size", "max_new_tokens", "temperature", "top_k", "top_p", "steps", "lr", "lr_schedule", "warmup_steps",
    "min_lr_ratio", "weight_decay", "agg", "epochs", "minibatches", "minibatch_split", "proximal", "kl_coef", "kl_estimator",
    "entropy_coef", "dtype", "autocast", "prompt_style", "dynamic_sampling", "grad_cosine", "max_grad_norm",
    "grad_split_half",
)  # fmt: skip
# The value a checkpoint whose config lacks a resume key was trained with (the setting did not exist: no clipping).
RESUME_ABSENT = {"max_grad_norm": 0.0, "grad_split_half": False}
# Advantage estimators that need no groups (all others normalise within a prompt group).
GROUPLESS_ADVANTAGES = ("raw", "mean")


def normal_permissions(root: Path) -> None:
    """Give every file under ``root`` the mode a plain ``open`` would (0o666 minus the umask).

    Some writers (safetensors through transformers' ``save_pretrained``) create files 0o600.
    """
    for path in [root, *root.rglob("*")] if root.is_dir() else [root]:
        if path.is_file():
            path.chmod(file_mode())


class Trainer:
    """Runs a `TrainConfig`; ``run()`` returns the summary dict (status, final metrics, paths)."""

    def __init__(self, cfg: TrainConfig) -> None:
        # -- 1. config: every input checked before anything is written -----------------------------
        cfg.validate()
        self.cfg = cfg
        check_device("--device", cfg.device)
        check_device("--rollout-device", cfg.rollout_device)
        check_paths(cfg)
        try:
            self.recipe = build(cfg.recipe)
        except ValueError as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
        except TypeError as exc:  # a parameter of the wrong type that the component compares or computes with
            raise UsageError(f"--recipe {cfg.recipe!r}: a parameter has the wrong type ({exc})") from None
        try:
            task = build_task(cfg.task, data=cfg.data)
        except (ValueError, FileNotFoundError) as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
        advantage = self.recipe.advantage.name
        if cfg.group_size == 1 and advantage not in GROUPLESS_ADVANTAGES:
            raise UsageError(
                f"--group-size 1 makes every advantage of recipe {cfg.recipe!r} zero (its '{advantage}' advantage "
                f"normalises within prompt groups): use --group-size >= 2, or a groupless advantage such as "
                f"'{cfg.recipe}+mean'"
            )
        self.device = torch.device(cfg.resolved_device())
        self.rollout_device = torch.device(cfg.resolved_rollout_device())
        if self.device.type == "cuda" and self.device.index is not None:
            torch.cuda.set_device(self.device)

        # -- 2. model, optimizer, the two sides ----------------------------------------------------------
        dtype = getattr(torch, cfg.dtype)
        try:
            model, tokenizer = load_policy(
                cfg.model, alphabet=task.alphabet, tiny=cfg.tiny, seed=cfg.seed, dtype=dtype, device=self.device
            )
        except ModelLoadError as exc:
            raise UsageError(str(exc)) from None
        except ValueError as exc:  # a configuration transformers rejects
            raise UsageError(f"--model {cfg.model}: transformers rejects the configuration: {str(exc).splitlines()[-1]}") from None
        self.model = model.to(device=self.device, dtype=dtype).eval()  # eval: no dropout, learner and sampler agree
        self.tokenizer = tokenizer
        style = prompt_style(cfg.prompt_style, cfg.model, tokenizer)
        max_new = cfg.max_new_tokens or completion_budget(task, style, tokenizer, seed=cfg.seed)
        self.sampler = Sampler(
            task, tokenizer, style, cfg.seed, cfg.prompts_per_step, cfg.group_size, max_new, cfg.temperature,
            cfg.top_k, cfg.top_p, stop_ids(self.model, tokenizer), cfg.autocast,
        )  # fmt: skip
        self.rollout_sampler = self.sampler.replica()  # the rollout side's own: no tokenizer shared across threads
        self._check_model(max_new)
        lr = cfg.lr if cfg.lr is not None else (1e-3 if cfg.model == "tiny" else 1e-6)
        optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, betas=cfg.betas, weight_decay=cfg.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda t: lr_multiplier(t, total=cfg.steps, warmup=cfg.warmup_steps, schedule=cfg.lr_schedule,
                                               min_ratio=cfg.min_lr_ratio),
        )
        reference = None
        if cfg.kl_coef:
            reference = copy.deepcopy(self.model).eval().requires_grad_(False)  # the initial policy, frozen
        settings = LearnerSettings(
            temperature=cfg.temperature, agg=cfg.agg, epochs=cfg.epochs, minibatches=cfg.minibatches,
            minibatch_split=cfg.minibatch_split,
            micro_batch_size=cfg.micro_batch_size, proximal=cfg.proximal, nan_policy=cfg.nan_policy,
            kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator, entropy_coef=cfg.entropy_coef, autocast=cfg.autocast,
            grad_checkpointing=cfg.grad_checkpointing, grad_cosine=cfg.grad_cosine, grad_split_half=cfg.grad_split_half, seed=cfg.seed,
            dynamic_sampling=cfg.dynamic_sampling, max_grad_norm=cfg.max_grad_norm,
        )  # fmt: skip
        self.learner = Learner(self.model, self.recipe, optimizer, scheduler, settings, reference, self.sampler.eos_ids)
        self.out = Path(cfg.out).expanduser()
        self.step = 0
        self.pending: dict[int, RolloutBatch] = {}
        self.resumed_from: Path | None = None
        if cfg.resume:
            found = self._find_checkpoint(cfg.resume)
            if found is not None:
                self._load_checkpoint(found)
                self.resumed_from = found
        self._check_disk()
        self.eval_problems = self.sampler.eval_problems(cfg.eval_size) if cfg.eval_every else []

    def _check_model(self, max_new: int) -> None:
        """Refuse settings the model cannot run: dropout with checkpointing, too short a context, logits that cannot fit."""
        cfg, config = self.cfg, getattr(self.model, "config", None)
        if cfg.grad_checkpointing:
            drops = {k: v for k, v in (config.to_dict() if config is not None else {}).items()
                     if "dropout" in k and isinstance(v, float) and v > 0}  # fmt: skip
            if drops:
                raise UsageError(f"--grad-checkpointing runs the model in train mode; this model has dropout {drops}: not supported")
        limit = getattr(config, "max_position_embeddings", None)
        prompts, _ = self.sampler.encode(self.sampler.problems(0), 1, torch.device("cpu"))
        longest_prompt = prompts.shape[1]
        if limit and longest_prompt + max_new > limit:
            raise UsageError(
                f"prompt ({longest_prompt} tokens) + --max-new-tokens {max_new} exceeds the model's context of {limit} positions"
                + (" (--tiny.max-positions)" if cfg.model == "tiny" else "")
            )
        vocab = int(getattr(config, "vocab_size", 0) or 0)
        rows = cfg.micro_batch_size or (cfg.prompts_per_step * cfg.group_size // cfg.minibatches)
        need = 3 * rows * (max_new + 1) * vocab * 4  # logits, log-softmax and their gradient, float32
        if self.device.type == "cuda":
            total = torch.cuda.get_device_properties(self.device).total_memory
        else:
            total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else need
        if need > total:
            raise UsageError(
                f"one learner forward needs about {need / 2**30:,.1f} GiB for its logits ({rows} sequences x "
                f"{max_new + 1} positions x {vocab} tokens) but the {self.device.type} has {total / 2**30:,.1f} GiB: "
                "lower --micro-batch-size or --max-new-tokens"
            )

    def gradient_buffers(self) -> int:
        """Gradient-sized float32 buffers the run keeps (in memory and in every checkpoint): the cosine's, gac's."""
        transforms = self.recipe.transforms
        gac = sum(type(t).__name__.lower().startswith("gac") for t in transforms)
        return int(self.cfg.grad_cosine) + gac

    def _check_disk(self) -> None:
        cfg = self.cfg
        weights = sum(p.numel() * p.element_size() for p in self.model.parameters())
        floats = sum(p.numel() * 4 for p in self.model.parameters())
        per_checkpoint = weights + (2 + self.gradient_buffers()) * floats  # + AdamW's two moments, gradient buffers
        need = weights if cfg.save_final else 0
        if cfg.checkpoint_every or cfg.stop_after:
            need += per_checkpoint * (cfg.keep_checkpoints + 1)
        check_space(cfg.out, need)

    # -- checkpoints --------------------------------------------------------------------------------
    def _find_checkpoint(self, where: str) -> Path | None:
        if where == "auto":
            pointer = checkpoint_pointer(self.out)
            if not pointer.is_file():
                return None  # nothing to resume: a fresh start
            path = self.out / "checkpoints" / pointer.read_text().strip()
        else:
            path = Path(where).expanduser()
        if not (path / "trainer.json").is_file():
            raise UsageError(f"--resume {where}: {str(path)!r} is not a checkpoint directory (no trainer.json)")
        return path

    def save_checkpoint(self, pending: dict[int, RolloutBatch]) -> Path:
        """Write the state before update ``self.step``: weights, optimizer, scheduler, stabilizer, RNG, queued rollouts.

        Written into a hidden directory renamed into place, then the ``latest`` pointer is replaced
        atomically: a run killed at any moment leaves either the previous or the new checkpoint, and
        a failed write (a full disk) leaves no partial directory behind.
        """
        from safetensors.torch import save_model

        root = self.out / "checkpoints"
        final = root / f"step_{self.step:07d}"
        tmp = root / f".tmp_step_{self.step:07d}"
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
            save_model(self.model, str(tmp / "model.safetensors"))
            torch.save(self.learner.optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(self.learner.scheduler.state_dict(), tmp / "scheduler.pt")
            torch.save(self.recipe.state_dict(), tmp / "stabilizer.pt")
            torch.save({k: b.state() for k, b in pending.items()}, tmp / "rollouts.pt")
            torch.save(
                {
                    "torch": torch.random.get_rng_state(),
                    "learner_steps": self.learner.steps,
                    "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                    "python": random.getstate(),
                    "numpy": numpy_state(),
                    "prev_grad": [g.cpu() for g in self.learner.prev_grad] if self.learner.prev_grad is not None else None,
                },
                tmp / "rng.pt",
            )
            (tmp / "trainer.json").write_text(json.dumps({"step": self.step, "config": asdict(self.cfg)}, indent=2, default=str))
            normal_permissions(tmp)
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            atomic_write_text(checkpoint_pointer(self.out), final.name)
        except Exception as exc:  # safetensors reports a full disk as its own error type
            shutil.rmtree(tmp, ignore_errors=True)
            code = getattr(exc, "errno", None) or (errno.ENOSPC if "No space left" in str(exc) else None)
            if code is None:
                raise
            raise OSError(code, f"cannot write checkpoint {final}: {os.strerror(code)}") from exc
        kept = sorted(p for p in root.glob("step_*") if p.is_dir())
        for old in kept[: -self.cfg.keep_checkpoints]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def _load_checkpoint(self, path: Path) -> None:
        from safetensors.torch import load_model

        info = json.loads((path / "trainer.json").read_text())
        saved, now = info["config"], asdict(self.cfg)
        diff = [f"{k}: checkpoint {saved.get(k)!r} vs now {now[k]!r}" for k in RESUME_KEYS if saved.get(k, RESUME_ABSENT.get(k)) != now[k]]
        if diff:
            raise UsageError(f"cannot resume from {path}: settings differ ({'; '.join(diff)})")
        load_model(self.model, str(path / "model.safetensors"), device=str(self.device))
        learner = self.learner
        learner.optimizer.load_state_dict(load_state(path / "optimizer.pt", self.device))
        learner.scheduler.load_state_dict(load_state(path / "scheduler.pt"))
        self.recipe.load_state_dict(load_state(path / "stabilizer.pt", self.device))
        rng = load_state(path / "rng.pt")
        torch.random.set_rng_state(rng["torch"])
        if rng["cuda"] and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        random.setstate(rng["python"])
        set_numpy_state(rng["numpy"])
        if rng["prev_grad"] is not None:
            learner.prev_grad = [g.to(self.device) for g in rng["prev_grad"]]
        learner.steps = rng.get("learner_steps", [])
        rollouts = load_state(path / "rollouts.pt", self.device)
        self.pending = {int(k): RolloutBatch(**v).to(self.device) for k, v in rollouts.items()}
        self.step = int(info["step"])

    # -- the loop -----------------------------------------------------------------------------------
    def evaluate(self) -> float:
        micro = self.cfg.micro_batch_size or self.cfg.prompts_per_step * self.cfg.group_size
        return self.sampler.evaluate(self.model, self.eval_problems, micro)

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        self.out.mkdir(parents=True, exist_ok=True)
        reserve_for_failure(self.out)
        atomic_write_text(self.out / "config.json", json.dumps(asdict(cfg), indent=2, default=str))
        start = self.step
        if start == 0:  # the code of a fresh run; a resumed run keeps the record of the run it continues
            atomic_write_text(self.out / CODE_FILE, json.dumps(run_code(self.recipe, fresh=True), indent=1, sort_keys=True) + "\n")
        metrics = CsvLog(self.out / "metrics.csv", keep_below=start)
        grad_steps = CsvLog(self.out / "grad_steps.csv", key="update", keep_below=start) if cfg.grad_cosine else None
        evals = CsvLog(self.out / "eval.csv", key="version", keep_below=start) if cfg.eval_every else None
        writer = tensorboard_writer(self.out / "tensorboard", cfg.tensorboard, purge_step=start)
        learner_threads, rollout_threads = cfg.threads()
        saved_threads = torch.get_num_threads()
        if self.device.type == "cpu":
            torch.set_num_threads(learner_threads)
        stop = cfg.stop_after or cfg.steps
        plan = Plan(cfg.max_staleness, cfg.steps, start, max(self.pending, default=start - 1) + 1, cfg.lag_policy,
                    cfg.partial_chunk)  # fmt: skip
        status, reason, row, first_rewards = "finished", "", {}, []
        eval_history: list[tuple[int, float]] = []
        progress = train_progress(cfg.progress, total=cfg.steps, initial=start)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        t_start, tokens = time.perf_counter(), 0
        rollouts = make_rollouts(
            cfg.mode, self.rollout_sampler, self.model, plan, self.pending, device=self.rollout_device,
            threads=rollout_threads if self.rollout_device.type == "cpu" else 0, weights_via=cfg.weights_via,
        )  # fmt: skip

        def evaluate(version: int) -> float:
            value = self.evaluate()
            eval_history.append((version, value))
            if evals is not None:
                evals.log({"version": version, "eval_reward": value})
            add_scalars(writer, {"eval_reward": value}, version)
            return value

        failing: BaseException | None = None
        try:
            if cfg.eval_every and start % cfg.eval_every == 0:
                evaluate(start)  # version `start`: the untrained baseline on a fresh run
            while self.step < stop:
                t0 = time.perf_counter()
                try:
                    batch, waited = rollouts.get(self.step)
                except NonFiniteRollout as exc:
                    status, reason = "diverged", f"{exc} while generating batch {self.step}"
                    break
                update = self.learner.update(batch, self.step)
                self.step += 1
                tokens += batch.n_tokens
                row = {"step": self.step - 1, **update}
                row.update(
                    tokens=batch.n_tokens,
                    elapsed_s=time.perf_counter() - t_start,
                    gen_tokens_per_s=batch.n_tokens / max(batch.gen_seconds, 1e-9),
                    tokens_per_s=tokens / max(time.perf_counter() - t_start, 1e-9),
                    step_seconds=time.perf_counter() - t0,
                    wait_seconds=waited,
                )
                if grad_steps is not None:
                    for record in self.learner.steps:
                        grad_steps.log(record)
                # a randomly initialised model has no answer format yet: its cut completions say nothing of the budget
                if not first_rewards and not random_init(cfg.model):
                    n_seq = batch.completion_ids.shape[0]
                    warning = truncation_warning(round(row["truncated_frac"] * n_seq), n_seq, self.sampler.max_new_tokens)
                    if warning:
                        print(warning, file=sys.stderr)
                if len(first_rewards) < 10:
                    first_rewards.append(row["reward_mean"])
                if not self.learner.finite():
                    status, reason = "diverged", f"non-finite weights after update {self.step - 1} (loss {row.get('loss')})"
                    metrics.log(row)
                    break
                rollouts.publish(self.model, self.step)
                if cfg.eval_every and (self.step % cfg.eval_every == 0 or self.step == cfg.steps):
                    row["eval_reward"] = evaluate(self.step)
                metrics.log(row)
                add_scalars(writer, {k: v for k, v in row.items() if k != "eval_reward"}, self.step - 1)  # at its version
                progress.update_to(self.step, row)
                at_end = self.step == stop and (cfg.checkpoint_every or stop < cfg.steps)
                if at_end or (cfg.checkpoint_every and self.step % cfg.checkpoint_every == 0):
                    self.save_checkpoint(rollouts.pending(self.step))
            if status == "finished" and self.step < cfg.steps:
                status = "stopped"
        except BaseException as exc:
            failing = exc
            raise
        finally:
            rollouts.close()
            progress.close()
            try:
                if writer is not None:
                    writer.close()
            except OSError:
                if failing is None:
                    raise  # the first failure is the one to report, not the writer's echo of it
            finally:
                torch.set_num_threads(saved_threads)
                if not isinstance(failing, Exception):  # write_failure uses the reserve after an error
                    release_reserve(self.out)
        wall = time.perf_counter() - t_start
        if status in ("finished", "stopped") and cfg.save_final:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # its bar would flood a log file; the summary names the folder
            final = self.out / "final"
            self.model.save_pretrained(final)
            self.tokenizer.save_pretrained(final)
            normal_permissions(final)
        summary = self._summary(status, reason, row, first_rewards, eval_history, start, tokens, wall, rollouts)
        atomic_write_text(self.out / "summary.json", json.dumps(summary, indent=2, default=float))
        return summary

    def _summary(
        self, status: str, reason: str, row: dict[str, Any], first_rewards: list[float],
        eval_history: list[tuple[int, float]], start: int, tokens: int, wall: float, rollouts: Any,
    ) -> dict[str, Any]:  # fmt: skip
        cfg = self.cfg
        last_rewards = _tail_column(self.out / "metrics.csv", "reward_mean", 10)
        summary: dict[str, Any] = {
            "status": status, "reason": reason, "steps": self.step, "of_steps": cfg.steps, "resumed_from_step": start,
            "out": str(self.out), "mode": cfg.mode, "max_staleness": cfg.max_staleness, "recipe": cfg.recipe,
            "model": cfg.model, "n_params": n_params(self.model), "weight_copies": 1 + rollouts.weight_copies
            + (1 if cfg.kl_coef else 0), "gradient_buffers": self.gradient_buffers(),
            "device": str(self.device), "device_name": device_name(self.device),
            "threads": {"learner": cfg.threads()[0], "rollout": cfg.threads()[1]} if self.device.type == "cpu" else None,
            "wall_seconds": wall, "tokens": tokens, "tokens_per_s": tokens / max(wall, 1e-9),
            "reward_first": float(np.mean(first_rewards)) if first_rewards else None,
            "reward_last": float(np.mean(last_rewards)) if last_rewards else None,
            "eval": [{"version": v, "eval_reward": e} for v, e in eval_history],
            "lag_mean": row.get("lag_mean"), "lag_max": row.get("lag_max"), "last": row,
        }  # fmt: skip
        if self.device.type == "cuda":
            summary["peak_memory_gib"] = torch.cuda.max_memory_allocated(self.device) / 2**30
        return summary


CODE_FILE = "code.json"  # in a run's directory: the fingerprint of the code it was started with (`run_code`)


def run_code(recipe: Any, fresh: bool = False) -> dict[str, str]:
    """The fingerprint of the code an LLM run of ``recipe`` (a `testbed.stabilizers.recipe.Recipe`) runs, by part
    (`testbed.util.codeprint.source_digest`): ``trainer`` (the `Trainer` and everything it names: learner, rollout,
    sampler, tasks, models, and the stabilizer layer's code it calls) and each recipe component, which the
    learner finds by name at run time (`testbed.util.codeprint.recipe_code`, as the testbed's runs record them).
    Settings are not code: they are in the run's key. ``fresh``: the code as it is at this moment
    (`testbed.util.codeprint.source_digest`), as a run records it."""
    from testbed.util.codeprint import recipe_code, source_digest

    return {"trainer": source_digest(Trainer, fresh=fresh), **recipe_code(recipe, fresh=fresh)}


def code_changed(directory: Path, recipe_spec: str) -> list[str]:
    """The parts of the code that changed since the run in ``directory`` (a run of ``recipe_spec``) was started,
    from its `CODE_FILE` (`testbed.util.codeprint.stale_parts`); [] when it has none (a run started before runs
    recorded their code is not judged) or it is unreadable."""
    from testbed.util.codeprint import stale_parts

    try:
        recorded = json.loads((Path(directory) / CODE_FILE).read_text())
    except (OSError, ValueError):
        return []
    return stale_parts(recorded if isinstance(recorded, dict) else None, run_code(build(recipe_spec)))


def device_name(device: torch.device) -> str:
    """What the run ran on, for the record: the GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    from testbed.util.provenance import cpu_model

    return cpu_model()


def _tail_column(path: Path, column: str, n: int) -> list[float]:
    import csv

    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        values = [row.get(column, "") for row in csv.DictReader(handle)]
    return [float(v) for v in values[-n:] if v not in ("", None)]


RESERVE_NAME, RESERVE_BYTES = ".error_report_reserve", 256 * 1024


def reserve_for_failure(out: Path) -> None:
    """Write a small file in ``out`` that `write_failure` deletes to make room for the error report.

    On a disk that fills during the run, the report (error.log, summary.json) would otherwise be
    empty or cut off: deleting the reserve frees the blocks it needs.
    """
    try:
        (out / RESERVE_NAME).write_bytes(b"\0" * RESERVE_BYTES)
    except OSError:  # already full: the report then gets what the disk allows
        release_reserve(out)


def release_reserve(out: Path) -> None:
    (out / RESERVE_NAME).unlink(missing_ok=True)


def write_failure(out: Path, exc: BaseException) -> Path:
    """Record an internal failure: the traceback in OUT/error.log and status 'failed' in OUT/summary.json.

    Never raises: on a full disk it first frees the run's reserve, then writes what fits (the
    traceback, else its last line).
    """
    log = out / "error.log"
    detail = getattr(exc, "detail", "")
    text = "".join(traceback.format_exception(exc)) + (f"\n-- rollout side --\n{detail}" if detail else "")
    summary = {"status": "failed", "reason": f"{type(exc).__name__}: {exc}", "error_log": str(log)}
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError:
        return log
    release_reserve(out)
    for body in (text, f"{summary['reason']}\n"):
        try:
            log.write_text(body)
            break
        except OSError:
            continue
    with contextlib.suppress(OSError):
        atomic_write_text(out / "summary.json", json.dumps(summary, indent=2))
    return log


def load_state(path: Path, device: torch.device | str = "cpu") -> Any:
    """A checkpoint file's tensors and plain values, loaded with ``weights_only=True`` (a file holding anything
    else, such as a crafted pickle or a checkpoint of an older format, is refused in one line, never executed)."""
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError:
        raise UsageError(f"cannot resume from {path.parent}: {path.name} holds more than tensors and plain values "
                         "(an older checkpoint format, or not a checkpoint of this trainer); start a new --out") from None


def numpy_state() -> tuple:
    """NumPy's global generator state with its key as a tensor, so that `load_state` can read it back."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return name, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss)


def set_numpy_state(state: tuple) -> None:
    """The inverse of `numpy_state`."""
    name, keys, pos, has_gauss, gauss = state
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
