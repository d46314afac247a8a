"""The run's configuration: one dataclass, from which the command line is derived (tyro), and its checks.

Every field is checked before any work starts (`TrainConfig.validate`: types, ranges and
consistency; `check_environment`: devices, paths, disk space). A failure raises `UsageError`
with one line naming the bad value and what is allowed; the CLI prints it and exits with code 2.

`parse` turns a command line into any of the commands' dataclasses (tyro), a parse error into the same
one-line `UsageError`: the commands (llm_scale/cli.py, budget.py, fingerprint.py) take it from here, so no
module imports the entry point.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal, TypeVar

from testbed.util.errors import UsageError

from .models import TinyConfig
from .tasks import STYLES

MAX_INT = 2**31 - 1
T = TypeVar("T")


# Allowed ranges: integers [low, high]; floats (low, low included?, high].
INT_RANGES: dict[str, tuple[int, int]] = {
    "seed": (0, 2**63 - 1), "max_staleness": (0, 100_000), "partial_chunk": (0, MAX_INT),
    "prompts_per_step": (1, 1_000_000), "group_size": (1, 1_000_000), "top_k": (0, MAX_INT),
    "rollout_threads": (0, 4096), "learner_threads": (0, 4096), "steps": (1, 10**9), "stop_after": (0, 10**9),
    "warmup_steps": (0, 10**9), "epochs": (1, 10_000), "minibatches": (1, 1_000_000),
    "micro_batch_size": (0, 1_000_000), "checkpoint_every": (0, 10**9), "keep_checkpoints": (1, 10_000),
    "eval_every": (0, 10**9), "eval_size": (1, 1_000_000),
}  # fmt: skip
FLOAT_RANGES: dict[str, tuple[float, bool, float]] = {
    "temperature": (0.0, False, math.inf), "top_p": (0.0, False, 1.0), "min_lr_ratio": (0.0, True, 1.0),
    "weight_decay": (0.0, True, math.inf), "kl_coef": (0.0, True, math.inf), "entropy_coef": (0.0, True, math.inf),
    "max_grad_norm": (0.0, True, math.inf),
}  # fmt: skip


@dataclass
class ModelAndTask:
    """The model and the task: the first options of every LLM command (train, fingerprint, budget), declared
    here once. The defaults are the measuring commands'; `TrainConfig` overrides them with a model and task
    that need no download."""

    model: str = "smollm2-135m-instruct"
    """'tiny' (built locally, no download), a known name (python -m llm_scale models), 'random:qwen2.5-0.5b' (that architecture, random weights), a .gguf file, a local directory, or a hub id"""
    task: str = "arithmetic(max_operand=20)"
    """task spec, e.g. 'arithmetic(max_operand=20)'; tasks: copy, arithmetic, countdown, gsm8k, prompts (python -m llm_scale tasks), or package.module:factory"""
    data: str | None = None
    """data file for the tasks that read one (gsm8k: JSONL, question/answer per line; prompts: parquet or JSONL)"""


@dataclass
class TrainConfig(ModelAndTask):
    """Asynchronous GRPO on a Hugging Face causal LM with a testbed stabilizer recipe."""

    # -- what to train (model, task, data: `ModelAndTask`) ------------------------------------------
    model: str = "tiny"
    task: str = "copy"
    recipe: str = "pg"
    """stabilizer recipe spec, e.g. 'dg', 'tis(c=2)+ess_lr' (python -m llm_scale recipes)"""
    seed: int = 0
    """seed of the model's initialisation, prompts, sampling and minibatch order"""

    # -- rollouts ---------------------------------------------------------------------------------
    mode: Literal["thread", "process", "sync"] = "thread"
    """thread: rollout worker thread (exact staleness with --lag-policy fixed); process: its own process (and --rollout-device); sync: no worker"""
    max_staleness: int = 0
    """eta: max versions a token may lag the learner (AReaL's admission rule)"""
    lag_policy: Literal["latest", "fixed"] = "latest"
    """latest: newest weights (AReaL); fixed: exactly eta behind (reproducible)"""
    partial_chunk: int = 0
    """partial rollouts: refresh the worker's weights every N tokens (0: off; needs --lag-policy latest)"""
    prompts_per_step: int = 8
    """prompts per rollout batch"""
    group_size: int = 8
    """samples per prompt (GRPO group)"""
    max_new_tokens: int | None = None
    """completion budget (default: the task's)"""
    temperature: float = 1.0
    """sampling temperature (the learner's log-probs use the same)"""
    top_k: int = 0
    """sample from the k most likely tokens (0: all); behaviour log-probs are those of the truncated distribution"""
    top_p: float = 1.0
    """sample from the smallest set of tokens with this much probability (1: all)"""
    rollout_device: str = "same"
    """device of the rollout side: same (as --device), cpu, cuda or cuda:N (a second GPU pays in process mode)"""
    rollout_threads: int = 0
    """CPU threads of the rollout side (0: half the cores when asynchronous)"""
    learner_threads: int = 0
    """CPU threads of the learner (0: the other half when asynchronous, all cores with --mode sync)"""
    weights_via: Literal["auto", "host"] = "auto"
    """process mode: how weights reach the rollout process; auto: GPU memory (CUDA IPC) if it is on a GPU, else host shared memory"""

    # -- learner ----------------------------------------------------------------------------------
    steps: int = 100
    """learner updates (one per rollout batch)"""
    stop_after: int = 0
    """stop after N updates with a checkpoint (resume later with --resume auto); 0: run to --steps"""
    lr: float | None = None
    """AdamW learning rate (default 1e-3 for tiny, 1e-6 otherwise)"""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """decay after the warm-up, down to --min-lr-ratio x lr at the last update"""
    warmup_steps: int = 0
    """linear learning-rate warm-up over this many updates"""
    min_lr_ratio: float = 0.0
    """final lr / lr for the linear and cosine schedules"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """clip the gradient's global norm to this before the recipe's transforms and each optimizer step, as TRL
    (max_grad_norm) and verl (actor.grad_clip) do by default; 0: no clipping"""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas"""
    agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"] = "token-mean"
    """loss aggregation (verl's names)"""
    epochs: int = 1
    """passes over each rollout batch (PPO epochs)"""
    minibatches: int = 1
    """optimizer steps per epoch (the batch cut in this many slices, see --minibatch-split)"""
    minibatch_split: Literal["groups", "random"] = "groups"
    """groups: whole prompt groups in order (verl's split; minibatches hold disjoint prompts); random: a fresh
    seeded permutation of the sequences each epoch"""
    micro_batch_size: int = 0
    """sequences per forward (0: a whole minibatch); bounds activation memory"""
    proximal: bool = True
    """pass the proximal log-probs (the policy at the start of the batch, AReaL) to the surrogate"""
    kl_coef: float = 0.0
    """weight of KL(policy || frozen initial policy) in the loss (0: off; costs one more copy of the weights)"""
    kl_estimator: Literal["k1", "k3"] = "k3"
    """per-token KL estimator: k1 = log(pi/ref), k3 = ref/pi - log(ref/pi) - 1"""
    entropy_coef: float = 0.0
    """entropy bonus: minus this times the mean token entropy is added to the loss"""
    nan_policy: Literal["mask", "raise"] = "mask"
    """non-finite log-probs in the loss: mask those tokens, or raise"""
    grad_cosine: bool = True
    """log cos(g_t, g_{t-1}) per optimizer step in grad_steps.csv (one gradient-sized buffer, in memory and in checkpoints)"""
    grad_split_half: bool = False
    """also accumulate each step's gradient as two halves of its prompt groups and log <g_t, g_t-1> and <half 1,
    half 2> (grad_steps.csv), the terms of the consecutive cosine without the minibatch noise
    (fingerprint.consecutive_cosine_split_half); one more forward and backward pass per step"""
    dynamic_sampling: bool = False
    """drop the prompt groups whose rewards are all equal (zero advantage) before the update, as DAPO does"""

    # -- precision and devices --------------------------------------------------------------------
    device: str = "auto"
    """auto, cpu, cuda or cuda:N"""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """parameter dtype (keep float32 for the learner: AdamW steps of 1e-6 vanish in bfloat16 weights)"""
    autocast: Literal["off", "bf16"] = "off"
    """bf16: learner forwards under torch.autocast in bfloat16 (weights and optimizer stay float32)"""
    grad_checkpointing: bool = False
    """recompute each layer's activations in the backward pass (less memory, about a third more compute)"""
    prompt_style: Literal["auto", "compact", "qa", "chat"] = "auto"
    """auto: compact for tiny/random models, chat if the tokenizer has a chat template, else qa"""

    # -- output -----------------------------------------------------------------------------------
    out: str = "runs/llm"
    """run directory (metrics.csv, eval.csv, summary.json, checkpoints/, final/)"""
    checkpoint_every: int = 0
    """updates between checkpoints (0: off)"""
    keep_checkpoints: int = 2
    """checkpoints kept (older ones are deleted)"""
    resume: str | None = None
    """'auto' (the latest checkpoint under --out, or a fresh start if there is none) or a checkpoint directory"""
    eval_every: int = 0
    """greedy evaluation on held-out problems before the first update and every N updates (0: off)"""
    eval_size: int = 64
    """held-out problems per evaluation"""
    tensorboard: Literal["auto", "on", "off"] = "auto"
    """TensorBoard scalars under OUT/tensorboard (auto: when tensorboard is installed; the llm extra installs it)"""
    save_final: bool = True
    """write the trained model and tokenizer to OUT/final (save_pretrained format)"""
    scorecard: str | None = None
    """testbed scorecard JSON or directory to show before training (default: results/scorecards, then the shipped ones)"""
    progress: bool = True
    """progress bar on a terminal, a line every 30 s otherwise"""

    tiny: TinyConfig = field(default_factory=TinyConfig)
    """shape of the tiny model"""

    # -- checks -----------------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise `UsageError` for the first field whose type, range or combination is not allowed."""
        ints = INT_RANGES
        for name, (low, high) in ints.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise UsageError(f"--{_flag(name)} must be an integer in [{low}, {high}], got {value!r}")
        if self.max_new_tokens is not None and (
            isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or not 1 <= self.max_new_tokens <= 1_000_000
        ):
            raise UsageError(f"--max-new-tokens must be an integer in [1, 1000000], got {self.max_new_tokens!r}")
        floats = FLOAT_RANGES
        for name, (low, closed, high) in floats.items():
            _check_float(f"--{_flag(name)}", getattr(self, name), low, closed, high)
        if self.lr is not None:
            _check_float("--lr", self.lr, 0.0, False, math.inf)
        if not (isinstance(self.betas, tuple) and len(self.betas) == 2):
            raise UsageError(f"--betas takes two numbers in [0, 1), got {self.betas!r}")
        for b in self.betas:
            _check_float("--betas", b, 0.0, True, 1.0, high_closed=False)
        for name in ("mode", "lag_policy", "lr_schedule", "weights_via", "agg", "kl_estimator", "nan_policy", "dtype", "autocast",
                     "prompt_style", "tensorboard"):  # fmt: skip
            allowed = _choices(name)
            if getattr(self, name) not in allowed:
                raise UsageError(f"--{_flag(name)} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}")
        for name in ("model", "task", "recipe", "out"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"--{_flag(name)} must be non-empty text, got {value!r}")
        for name in ("device", "rollout_device"):
            value = getattr(self, name)
            allowed = ("auto", "cpu", "cuda") if name == "device" else ("same", "cpu", "cuda")
            if not isinstance(value, str) or not (value in allowed or _cuda_index(value) is not None):
                raise UsageError(f"--{_flag(name)} must be {', '.join(allowed)} or cuda:N, got {value!r}")
        if self.tiny is not None and self.model == "tiny":
            bad = self.tiny.problems()
            if bad:
                raise UsageError(bad[0])
        # consistency
        batch = self.prompts_per_step * self.group_size
        if batch % self.minibatches:
            raise UsageError(f"--minibatches {self.minibatches} must divide the batch size {batch} (prompts x group size)")
        if self.minibatch_split == "groups" and self.prompts_per_step % self.minibatches:
            raise UsageError(
                f"--minibatches {self.minibatches} must divide --prompts-per-step {self.prompts_per_step} with "
                "--minibatch-split groups (each minibatch holds whole prompt groups); or use --minibatch-split random"
            )
        if self.grad_split_half and not self.grad_cosine:
            raise UsageError("--grad-split-half logs the terms of the consecutive cosine: it needs --grad-cosine")
        if self.grad_split_half and self.minibatch_split != "groups":
            raise UsageError("--grad-split-half splits each minibatch into halves of whole prompt groups: it needs "
                             f"--minibatch-split groups, got {self.minibatch_split}")
        if self.grad_split_half and self.prompts_per_step // self.minibatches < 2:
            raise UsageError("--grad-split-half needs at least 2 prompt groups per minibatch, got "
                             f"{self.prompts_per_step} prompts in {self.minibatches} minibatch(es)")
        if self.partial_chunk and (self.mode == "sync" or self.lag_policy != "latest"):
            raise UsageError("--partial-chunk needs asynchronous rollouts (--mode thread or process) with --lag-policy latest")
        if self.mode == "sync" and self.max_staleness:
            raise UsageError(f"--mode sync generates every batch with the current weights: --max-staleness {self.max_staleness} needs --mode thread or process")
        if self.stop_after > self.steps:
            raise UsageError(f"--stop-after {self.stop_after} is beyond --steps {self.steps}")
        if self.warmup_steps >= self.steps and self.warmup_steps:
            raise UsageError(f"--warmup-steps {self.warmup_steps} must be below --steps {self.steps} (the lr would never reach --lr)")
        if self.lr_schedule == "constant" and self.min_lr_ratio:
            raise UsageError("--min-lr-ratio applies to --lr-schedule linear or cosine, not constant")
        if self.rollout_device not in ("same", self.device) and self.mode == "sync":
            raise UsageError(f"--rollout-device {self.rollout_device} needs --mode thread or process (sync generates with the learner's model)")
        if self.resume is not None and (not isinstance(self.resume, str) or not self.resume.strip()):
            raise UsageError(f"--resume takes 'auto' or a checkpoint directory, got {self.resume!r}")

    def resolved_device(self) -> str:
        import torch

        return ("cuda" if torch.cuda.is_available() else "cpu") if self.device == "auto" else self.device

    def resolved_rollout_device(self) -> str:
        return self.resolved_device() if self.rollout_device == "same" else self.rollout_device

    def threads(self) -> tuple[int, int]:
        """(learner, rollout) CPU threads: explicit values, else the `cpu_budget` split between the two sides."""
        cores = cpu_budget()
        if self.mode == "sync":
            return self.learner_threads or cores, self.rollout_threads or cores
        rollout = self.rollout_threads or max(1, cores // 2)
        return self.learner_threads or max(1, cores - rollout), rollout


def cpu_budget() -> int:
    """CPU threads this process may use: the cores it is allowed to run on (its affinity), capped by OMP_NUM_THREADS."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        cores = min(cores, int(omp))
    return max(1, cores)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _choices(name: str) -> tuple[str, ...]:
    from typing import get_args

    hint = {f.name: f.type for f in fields(TrainConfig)}[name]
    if isinstance(hint, str):  # postponed annotations: evaluate the Literal
        hint = eval(hint, {"Literal": Literal})
    return tuple(get_args(hint))


def _cuda_index(text: str) -> int | None:
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    return None


def _check_float(flag: str, value: object, low: float, low_closed: bool, high: float, high_closed: bool = True) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(float(value))
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v >= low if low_closed else v > low) and (v <= high if high_closed else v < high)
    if not ok:
        lo, hi = ("[" if low_closed else "("), ("]" if high_closed else ")")
        rng = f"{lo}{low:g}, {high:g}{hi}" if math.isfinite(high) else f"{'>=' if low_closed else '>'} {low:g}"
        raise UsageError(f"{flag} must be a finite number {'in ' if math.isfinite(high) else ''}{rng}, got {value!r}")


def check_device(flag: str, device: str) -> None:
    """Refuse a CUDA device this torch or machine does not have."""
    import torch

    if not device.startswith("cuda"):
        return
    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else "no visible GPU"
        raise UsageError(f"{flag} {device}: this torch ({torch.__version__}, {build}) cannot use CUDA; allowed here: cpu (or auto)")
    index = _cuda_index(device)
    if index is not None and index >= torch.cuda.device_count():
        raise UsageError(f"{flag} {device}: only {torch.cuda.device_count()} GPU(s) visible (cuda:0 .. cuda:{torch.cuda.device_count() - 1})")


def checkpoint_pointer(out: str | os.PathLike) -> Path:
    """The file in run directory ``out`` that names its newest checkpoint (``checkpoints/latest``); absent
    until the run has written one, so its presence is what ``--resume auto`` resumes from."""
    return Path(out) / "checkpoints" / "latest"


def check_paths(cfg: TrainConfig) -> None:
    """The data, scorecard, resume and output paths: present where they must be, writable where written."""
    if cfg.data is not None and not Path(cfg.data).expanduser().is_file():
        raise UsageError(f"--data {cfg.data!r} does not exist or is not a file")
    if cfg.scorecard is not None and not Path(cfg.scorecard).expanduser().exists():
        raise UsageError(f"--scorecard {cfg.scorecard!r} does not exist; give a scorecard .json or a directory of them")
    out = Path(cfg.out).expanduser()
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {cfg.out!r} is an existing file; give a directory (new or a run to resume)")
    if cfg.resume not in (None, "auto"):
        ckpt = Path(cfg.resume).expanduser()
        if not (ckpt / "trainer.json").is_file():
            raise UsageError(f"--resume {cfg.resume!r} is not a checkpoint directory (no trainer.json); use 'auto' or a checkpoints/step_* directory")
    elif cfg.resume is None and out.is_dir() and ((out / "metrics.csv").exists() or (out / "checkpoints").exists()):
        raise UsageError(f"--out {cfg.out!r} already holds a run; continue it with --resume auto or choose another --out")
    parent = out
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise UsageError(f"--out {cfg.out!r}: {str(parent)!r} is a file, not a directory")
    try:  # a real write, not os.access: root passes access checks on read-only file systems
        fd, probe = tempfile.mkstemp(dir=parent, prefix=".llm_scale_probe_")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {cfg.out!r}: cannot write in {str(parent)!r} ({exc.strerror}): read-only or no permission") from None


def check_style_and_out(style: str, out: str) -> None:
    """The checks the measuring commands (fingerprint, budget) share: a known ``--prompt-style`` and an ``--out``
    that is a directory or does not exist yet."""
    if style not in ("auto", *STYLES):
        raise UsageError(f"--prompt-style must be auto, {', '.join(STYLES[:-1])} or {STYLES[-1]}, got {style!r}")
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out!r} exists and is not a directory")


def check_space(out: str, need_bytes: int) -> None:
    """Refuse a run whose checkpoints and final weights cannot fit on the output disk."""
    parent = Path(out).expanduser()
    while not parent.exists():
        parent = parent.parent
    free = shutil.disk_usage(parent).free
    if free < need_bytes:
        raise UsageError(
            f"--out {out!r}: the disk holding it has {free / 1e6:,.0f} MB free; this run writes up to about "
            f"{need_bytes / 1e6:,.0f} MB (checkpoints x --keep-checkpoints, final weights); free space or use another --out"
        )


# -- the command line ----------------------------------------------------------------------------


def _one_line(text: str) -> str:
    """The message of tyro's boxed error (title, rule, message lines, rule, help), as one line."""
    rows = [line.strip().strip("│╭╮╰╯").strip() for line in text.splitlines()]
    is_rule = [bool(r) and set(r) <= set("─-━ ") for r in rows]
    body, rules = [], 0
    for row, rule in zip(rows, is_rule, strict=True):
        if rule:
            rules += 1
            if rules == 2:
                break
            continue
        if rules == 1 and row:
            body.append(row)
    message = " ".join(body) or next((r for r in rows if r and not set(r) <= set("─-━ ")), "invalid arguments")
    return re.sub(r"\s+", " ", message).strip()


def parse(kind: type[T], argv: list[str], prog: str) -> T:
    """Parse ``argv`` into ``kind`` with tyro; a parse error becomes a one-line `UsageError`."""
    import tyro

    if any(a in ("-h", "--help") for a in argv):
        return tyro.cli(kind, args=argv, prog=prog)  # prints the help and exits 0
    buf = io.StringIO()
    try:
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
            return tyro.cli(kind, args=argv, prog=prog)
    except SystemExit as exc:
        if exc.code in (0, None):
            print(buf.getvalue(), end="")
            raise
        raise UsageError(f"{_one_line(buf.getvalue())} (see {prog} --help)") from None
