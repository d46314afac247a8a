"""``python -m llm_scale fingerprint --model M --task T``: the staleness fingerprint of a model on a task.

What it measures, with the trainer's own pieces (`Sampler` for rollouts with behaviour log-probs, the
`Learner`'s log-probs and update, the recipe's advantages and loss) and the shared statistics of
`testbed.stabilizers.fingerprint`:

1. **At fixed weights** (version 0): one rollout batch of ``prompts`` groups x ``group_size`` samples. For each
   group, the gradient of the recipe's loss over the group alone, scaled to the loss's *sum* over its tokens
   (``token-mean``; over its sequences for ``seq-mean-*``), so that the sum of some groups' gradients is,
   up to a positive factor, the trainer's gradient on a minibatch made of those groups: cosines between such
   sums are exactly the trainer's minibatch cosines. The gradients are kept as unbiased sign sketches
   (``sketch_dim`` buckets; the inner products' error is about |a| |b| / sqrt(sketch_dim)), their Gram matrix
   gives the cosine between disjoint minibatches of m sequences for every m in ``sizes`` (independent pairs,
   Student-t 90% interval) and the gradient noise scale B_noise (the fit of cos(m) = m / (m + B_noise),
   McCandlish et al. 2018; the Gram estimate tr(Sigma) / |G|^2 in ``extra``). The same batch gives the
   zero-advantage group fraction, the mean token entropy (at the sampling temperature) and the truncated
   fraction.
2. **Staleness**: ``max(lags)`` training updates at the training learning rate (synchronous, on fresh batches
   of ``update_prompts`` x ``group_size``, with the recipe), and after update k for every k in ``lags`` the
   version-0 batch is scored again: its tokens were sampled by a behaviour policy k updates old.
   Per-sequence and per-token ESS / N, log-ratio quantiles and the PPO clip fraction at eps = 0.2 (the
   fraction of tokens whose ratio leaves [0.8, 1.2]). Lag 0 measures the sampler-learner numerical mismatch.
3. **After the updates**: step 1 again on a fresh batch at the final weights (``extra.after_updates``).

Writes ``OUT/<model>__<task>.json`` (`Fingerprint` schema) and ``OUT/<model>__<task>.png``.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from testbed.stabilizers import fingerprint as fp
from testbed.util.files import atomic_open
from testbed.util.provenance import source

from .config import ModelAndTask
from .generation import hit_budget

MEASURE_SEED_OFFSET = 1_000_000  # batch indices of the measurement batches (disjoint from the updates' 0, 1, ...)


@dataclass
class FingerprintArgs(ModelAndTask):
    """Measure the staleness fingerprint of a model on a task (see llm_scale/fingerprint.py)."""

    recipe: str = "grpo"
    """recipe whose advantages and loss give the gradients and the updates"""
    prompts: int = 64
    """prompt groups in each measured batch"""
    group_size: int = 4
    """samples per prompt (GRPO group)"""
    sizes: tuple[int, ...] = (4, 8, 16, 32, 64)
    """minibatch sizes m in sequences (multiples of --group-size; pairs = prompts x group-size // (2 m))"""
    lags: tuple[int, ...] = (0, 1, 2, 4)
    """staleness lags k in updates (max(lags) updates are run)"""
    update_prompts: int = 8
    """prompts per training update (x --group-size sequences)"""
    lr: float | None = None
    """AdamW learning rate of the updates (default: the trainer's, 1e-3 for tiny, else 1e-6)"""
    extra_lrs: tuple[float, ...] = ()
    """more learning rates whose staleness statistics go to extra.staleness_by_lr (same start, same batches)"""
    agg: str = "token-mean"
    """loss aggregation (verl's names)"""
    max_new_tokens: int | None = None
    """completion budget (default: the task's budget for the prompt style)"""
    temperature: float = 1.0
    """sampling temperature"""
    prompt_style: str = "auto"
    """auto, compact, qa or chat (as in train)"""
    sketch_dim: int = 1 << 18
    """buckets of the gradient sketches"""
    micro_batch_size: int = 16
    """sequences per forward when scoring"""
    after_updates: bool = True
    """measure the gradient statistics again after the updates"""
    seed: int = 0
    """seed of prompts, sampling and sketches"""
    out: str = "results/llm/fingerprint"
    """output directory"""


def model_label(model: str) -> str:
    """The model's name in output file names: a known name or tiny as given, else the file's stem or the
    directory's name (a run's saved policy, ``RUN/final``, as ``RUN-final``)."""
    from .models import KNOWN_MODELS, pocket_names

    if model in KNOWN_MODELS or model in pocket_names() or model == "tiny":
        return model
    p = Path(model)
    if p.suffix == ".gguf":
        return p.stem
    p = p.expanduser().resolve()
    return f"{p.parent.name}-final" if p.name == "final" and p.parent.name else p.name


def source_commit() -> str:
    """The commit of the code that runs (12 hex digits), with "-dirty" when tracked files differ from it, or
    "unknown" outside a git checkout."""
    return source("-dirty") or "unknown"


def task_and_policy(task_spec: str, data: str | None, model_name: str, seed: int) -> tuple[Any, torch.nn.Module, Any]:
    """(task, model in eval mode, tokenizer) for a measuring command; a bad task or model is a `UsageError`."""
    from .config import UsageError
    from .models import ModelLoadError, load_policy
    from .tasks import build_task

    try:
        task = build_task(task_spec, data=data)
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    try:
        model, tok = load_policy(model_name, alphabet=task.alphabet, seed=seed)
    except ModelLoadError as exc:
        raise UsageError(str(exc)) from None
    return task, model.eval(), tok


class _Measure:
    """The model, the two samplers (measurement, updates) and the learner, built as the trainer builds them."""

    def __init__(self, args: FingerprintArgs, log: Any) -> None:
        from testbed.stabilizers import build

        from .config import UsageError
        from .learner import Learner, LearnerSettings
        from .models import prompt_style, stop_ids
        from .sampler import Sampler
        from .tasks import completion_budget

        self.args, self.log = args, log
        try:
            self.recipe = build(args.recipe)
        except ValueError as exc:
            raise UsageError(str(exc).splitlines()[0]) from None
        task, model, tok = task_and_policy(args.task, args.data, args.model, args.seed)
        self.model, self.tokenizer = model, tok
        self.style = style = prompt_style(args.prompt_style, args.model, tok)
        max_new = args.max_new_tokens or completion_budget(task, style, tok)
        self.eos_ids = stop_ids(model, tok)
        self.max_new = max_new

        def sampler(prompts: int) -> Any:
            return Sampler(task, tok, style, args.seed, prompts, args.group_size, max_new, args.temperature, 0, 1.0, self.eos_ids)

        self.measure_sampler, self.update_sampler = sampler(args.prompts), sampler(args.update_prompts)
        self.lr = args.lr if args.lr is not None else (1e-3 if args.model == "tiny" else 1e-6)
        settings = LearnerSettings(temperature=args.temperature, agg=args.agg, micro_batch_size=args.micro_batch_size,
                                   grad_cosine=False, seed=args.seed)  # fmt: skip
        self._learner = lambda opt, sched: Learner(self.model, self.recipe, opt, sched, settings, None, self.eos_ids)
        self.reset_optimizer(self.lr)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.signs = fp.sketch_signs(sum(p.numel() for p in self.params), seed=args.seed)

    def reset_optimizer(self, lr: float) -> None:
        """A fresh learner with a fresh AdamW at ``lr`` (constant schedule) on the current weights."""
        opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)  # the trainer's defaults
        self.learner = self._learner(opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 1.0))

    def logp(self, batch: Any, entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Learner log-probs (and entropies) of every completion token of ``batch``, no gradient."""
        n, micro = batch.completion_ids.shape[0], self.args.micro_batch_size
        lps, ents = [], []
        with torch.no_grad():
            for i in range(0, n, micro):
                lp, ent = self.learner.token_logp(batch, slice(i, i + micro), entropy=entropy)
                lps.append(lp)
                ents.append(ent)
        return torch.cat(lps), (torch.cat(ents) if entropy else None)

    def gradients(self, batch: Any, version: int) -> dict[str, Any]:
        """The group-gradient statistics of one batch (see the module docstring, step 1)."""
        from testbed.stabilizers import PolicyTerms

        a, g = self.args, self.args.group_size
        t0 = time.perf_counter()
        mask, blogp = batch.completion_mask, batch.behavior_logp
        proximal, ent = self.logp(batch, entropy=True)
        adv = self.recipe.advantages(batch.rewards, group_ids=batch.group_ids, logp=proximal, behavior_logp=blogp,
                                     mask=mask, score_sq_norms=None)  # fmt: skip
        sketches = []
        for i in range(a.prompts):
            rows = torch.arange(i * g, (i + 1) * g)
            self.model.zero_grad(set_to_none=True)
            logp, _ = self.learner.token_logp(batch, rows)
            terms = PolicyTerms(logp, blogp[rows], adv[rows], mask[rows], proximal_logp=proximal[rows],
                                versions=batch.versions[rows], group_ids=batch.group_ids[rows], rewards=batch.rewards[rows])  # fmt: skip
            scale = float(mask[rows].sum()) if a.agg == "token-mean" else float(mask[rows].any(-1).sum())
            loss = self.recipe.loss(terms, a.agg).loss * scale
            if loss.requires_grad:
                loss.backward()
            flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.params])
            sketches.append(fp.sign_sketch(flat, a.sketch_dim, signs=self.signs))
            if (i + 1) % 8 == 0:
                self.log(f"  version {version}: gradients of {i + 1}/{a.prompts} groups ({time.perf_counter() - t0:.0f} s)")
        self.model.zero_grad(set_to_none=True)
        gram = fp.gram_matrix(torch.stack(sketches))
        cos = fp.minibatch_cosines(gram, g, list(a.sizes), seed=a.seed)
        fit = fp.noise_scale_from_cosines([c.m for c in cos], [c.mean for c in cos], [c.pairs for c in cos])
        truncated = hit_budget(batch.completion_ids, mask, self.eos_ids)
        return {
            "version": version, "cosine_by_minibatch": cos, "noise_scale": fit,
            "noise_scale_gram": fp.noise_scale_from_gram(gram, g),
            "zero_advantage_frac": fp.zero_advantage_frac(batch.rewards, batch.group_ids),
            "entropy": float((ent * mask).sum() / mask.sum()) if mask.any() else math.nan,
            "truncated_frac": fp.truncated_frac(truncated), "reward_mean": float(batch.rewards.mean()),
            "length_mean": float(mask.sum(-1).float().mean()), "seconds": time.perf_counter() - t0,
        }  # fmt: skip


def _staleness(m: _Measure, batch0: Any, lr: float, log: Any) -> tuple[list[fp.StalenessStats], list[float]]:
    """max(lags) synchronous updates at ``lr`` from the current weights (fresh AdamW state, the update batches
    0, 1, ...), scoring ``batch0`` again after update k for every k in lags (see the module docstring, step 2)."""
    m.reset_optimizer(lr)
    lags = sorted(set(m.args.lags))
    stale, seconds = [], []
    for version in range(max(lags) + 1):
        if version in lags:
            logp, _ = m.logp(batch0)
            s = fp.staleness_stats(logp, batch0.behavior_logp, batch0.completion_mask, version)
            stale.append(s)
            log(f"  lr {lr:g}, lag {version}: ESS/N seq {s.ess_seq:.4f} token {s.ess_token:.4f}, log-ratio max "
                f"{s.logratio_max:.3g}, clip frac {s.clip_frac:.4f}")  # fmt: skip
        if version == max(lags):
            break
        t0 = time.perf_counter()
        batch = m.update_sampler.batch(m.model, version, version)
        metrics = m.learner.update(batch, version)
        seconds.append(time.perf_counter() - t0)
        log(f"  lr {lr:g}, update {version + 1}: reward {metrics.get('reward_mean', math.nan):.3f}, {seconds[-1]:.0f} s")
    return stale, seconds


def measure(args: FingerprintArgs, argv: list[str], log: Any = print) -> tuple[fp.Fingerprint, dict[str, Any]]:
    """The fingerprint (and the raw per-phase records) of ``args``."""
    start = time.perf_counter()
    m = _Measure(args, log)
    a = args
    log(f"fingerprint: {a.model} on {a.task}, style {m.style}, budget {m.max_new} tokens, {a.prompts} x {a.group_size} "
        f"sequences per measured batch, lr {m.lr:g}, lags {list(a.lags)}")  # fmt: skip
    t0 = time.perf_counter()
    batch0 = m.measure_sampler.batch(m.model, MEASURE_SEED_OFFSET, 0)
    gen0 = time.perf_counter() - t0
    log(f"  version 0: sampled {batch0.completion_ids.shape[0]} sequences in {gen0:.0f} s")
    first = m.gradients(batch0, 0)
    initial = {k: v.detach().clone() for k, v in m.model.state_dict().items()} if a.extra_lrs else None
    stale, update_seconds = _staleness(m, batch0, m.lr, log)
    by_lr = {}
    if initial is not None:
        final = {k: v.detach().clone() for k, v in m.model.state_dict().items()}
        for lr in a.extra_lrs:
            m.model.load_state_dict(initial)
            rows, _ = _staleness(m, batch0, lr, log)
            by_lr[f"{lr:g}"] = [vars(r) for r in rows]
        m.model.load_state_dict(final)
        m.reset_optimizer(m.lr)
    after, lags = None, sorted(set(a.lags))
    if a.after_updates and max(lags) > 0:
        t0 = time.perf_counter()
        batch1 = m.measure_sampler.batch(m.model, MEASURE_SEED_OFFSET + 1, max(lags))
        log(f"  version {max(lags)}: sampled in {time.perf_counter() - t0:.0f} s")
        after = m.gradients(batch1, max(lags))
    wall = time.perf_counter() - start

    def plain(rec: dict[str, Any]) -> dict[str, Any]:
        return {k: ([vars(c) for c in v] if k == "cosine_by_minibatch" else v) for k, v in rec.items()}

    extra = {
        "recipe": a.recipe, "lr": m.lr, "prompt_style": m.style, "max_new_tokens": m.max_new,
        "group_size": a.group_size, "prompts": a.prompts, "update_sequences": a.update_prompts * a.group_size,
        "temperature": a.temperature, "agg": a.agg, "sketch_dim": a.sketch_dim, "seed": a.seed,
        "cosine_interval": "Student t, 90%, over independent pairs of disjoint minibatches (one random partition)",
        "noise_scale_method": "weighted least-squares fit of cos(m) = m / (m + B) over the sizes (weights: pairs)",
        "noise_scale_gram": first["noise_scale_gram"], "reward_mean": first["reward_mean"],
        "length_mean": first["length_mean"], "clip_frac_definition": "ratio outside [0.8, 1.2] (eps 0.2)",
        "seconds": {"sample_version0": gen0, "gradients_version0": first["seconds"], "updates": update_seconds},
        "staleness_by_lr": by_lr,
        "torch_threads": torch.get_num_threads(), "device": "cpu",
        "after_updates": None if after is None else plain(after),
    }  # fmt: skip
    result = fp.Fingerprint(
        model=model_label(a.model), task=task_label(a.task), cosine_by_minibatch=first["cosine_by_minibatch"],
        noise_scale=first["noise_scale"], staleness=stale, zero_advantage_frac=first["zero_advantage_frac"],
        entropy=first["entropy"], truncated_frac=first["truncated_frac"],
        command="python -m llm_scale fingerprint " + shlex.join(argv),
        date=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), commit=source_commit(), wall_s=wall, extra=extra,
    )  # fmt: skip
    return result, {"first": first, "after": after}


def task_label(spec: str) -> str:
    """The task's name in output file names: the spec without its parameters."""
    return spec.split("(", 1)[0].strip()


def plot(f: fp.Fingerprint, path: Path) -> None:
    """Three panels: cosine vs minibatch size with the fitted m / (m + B_noise); ESS / N vs lag; log-ratio
    quantiles and clip fraction vs lag."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    phases = [("version 0", f.cosine_by_minibatch, f.noise_scale, "C0")]
    after = f.extra.get("after_updates")
    if after:
        rows = [fp.CosineAtSize(**r) for r in after["cosine_by_minibatch"]]
        phases.append((f"after {after['version']} updates", rows, after["noise_scale"], "C1"))
    plotted = False
    for label, all_rows, b, color in phases:
        rows = [r for r in all_rows if math.isfinite(r.mean)]
        if not rows:
            continue
        plotted = True
        ms = [r.m for r in rows]
        mean = [r.mean for r in rows]
        lo = [r.mean - r.ci_low if math.isfinite(r.ci_low) else 0 for r in rows]
        hi = [r.ci_high - r.mean if math.isfinite(r.ci_high) else 0 for r in rows]
        ax[0].errorbar(ms, mean, yerr=[lo, hi], fmt="o", color=color, capsize=3, label=f"{label} (90% t interval)")
        if b is not None and math.isfinite(b):
            sizes = [r.m for r in all_rows]
            grid = torch.logspace(math.log10(min(sizes)), math.log10(max(sizes)), 50).tolist()
            ax[0].plot(grid, [x / (x + b) for x in grid], color=color, lw=1, label=f"m / (m + {b:.0f})")
    ax[0].axhline(0, color="grey", lw=0.5)
    if plotted:
        ax[0].set_xscale("log", base=2)
    else:
        ax[0].text(0.5, 0.5, "no finite cosine (every gradient zero)", ha="center", transform=ax[0].transAxes)
    ax[0].set_xlabel("minibatch size m (sequences, whole groups)")
    ax[0].set_ylabel("cosine of disjoint minibatch gradients")
    if ax[0].get_legend_handles_labels()[0]:  # nothing to label when no cosine is finite
        ax[0].legend(fontsize=7)
    lags = [s.lag for s in f.staleness]
    ax[1].plot(lags, [s.ess_seq for s in f.staleness], "o-", label="per sequence")
    ax[1].plot(lags, [s.ess_token for s in f.staleness], "s-", label="per token")
    ax[1].set_xlabel("lag (updates)")
    ax[1].set_ylabel("ESS / N")
    low = min([s.ess_seq for s in f.staleness if math.isfinite(s.ess_seq)] or [1.0])
    ax[1].set_ylim(min(low - 0.1 * (1 - low), 0.999), 1.0 + 0.05 * max(1 - low, 0.001))
    ax[1].ticklabel_format(axis="y", useOffset=False)
    ax[1].legend(fontsize=7)
    for key, style in (("logratio_q05", "v-"), ("logratio_q50", "o-"), ("logratio_q95", "^-"), ("logratio_max", "x--")):
        ax[2].plot(lags, [getattr(s, key) for s in f.staleness], style, label=key.replace("logratio_", "log-ratio "))
    ax[2].set_xlabel("lag (updates)")
    ax[2].set_ylabel("token log-ratio log pi - log mu")
    twin = ax[2].twinx()
    twin.plot(lags, [s.clip_frac for s in f.staleness], "k:", label="clip frac (eps 0.2)")
    twin.set_ylabel("clip fraction")
    ax[2].legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"{f.model} on {f.task}: zero-advantage groups {f.zero_advantage_frac:.2f}, entropy "
                 f"{f.entropy:.2f} nats, truncated {f.truncated_frac:.2f}, lr {f.extra.get('lr', math.nan):g}", fontsize=9)  # fmt: skip
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=110)
    plt.close(fig)


def _check(args: FingerprintArgs) -> None:
    from .config import UsageError, check_style_and_out

    g = args.group_size
    if not 2 <= g <= 1024:
        raise UsageError(f"--group-size must be in 2..1024, got {g}")
    if not 2 <= args.prompts <= 1 << 16 or not 1 <= args.update_prompts <= 1 << 16:
        raise UsageError(f"--prompts must be >= 2 and --update-prompts >= 1, got {args.prompts}, {args.update_prompts}")
    if not args.sizes or any(m < g or m % g for m in args.sizes):
        raise UsageError(f"--sizes must be positive multiples of --group-size {g}, got {list(args.sizes)}")
    too_big = [m for m in args.sizes if 2 * m > args.prompts * g]
    if too_big:
        raise UsageError(f"--sizes {too_big} need more than --prompts x --group-size = {args.prompts * g} sequences "
                         f"for one pair (2 m)")  # fmt: skip
    if not args.lags or any(k < 0 or k > 1000 for k in args.lags):
        raise UsageError(f"--lags must be integers in 0..1000, got {list(args.lags)}")
    bad_lr = [x for x in (args.lr, *args.extra_lrs) if x is not None and not 0 < x < 1]
    if bad_lr:
        raise UsageError(f"--lr and --extra-lrs must be in (0, 1), got {bad_lr[0]}")
    if args.sketch_dim < 64 or args.micro_batch_size < 1:
        raise UsageError(f"--sketch-dim must be >= 64 and --micro-batch-size >= 1, got {args.sketch_dim}, {args.micro_batch_size}")
    from testbed.stabilizers import AGG_MODES

    if args.agg not in AGG_MODES:
        raise UsageError(f"--agg must be one of {', '.join(AGG_MODES)}, got {args.agg!r}")
    check_style_and_out(args.prompt_style, args.out)


def main(argv: list[str]) -> int:
    from testbed.util.files import atomic_write_text

    from .config import parse

    args = parse(FingerprintArgs, argv, "python -m llm_scale fingerprint")
    _check(args)
    result, _ = measure(args, argv, log=lambda msg: print(msg, file=sys.stderr, flush=True))
    stem = Path(args.out) / f"{result.model}__{result.task}"
    atomic_write_text(stem.with_suffix(".json"), result.to_json())
    plot(result, stem.with_suffix(".png"))
    print(summary(result))
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.png')}")
    return 0


def summary(f: fp.Fingerprint) -> str:
    """The fingerprint as a few lines of text."""
    lines = [f"{f.model} on {f.task} ({f.wall_s:.0f} s): B_noise {f.noise_scale:.3g} sequences (fit), "
             f"zero-advantage groups {f.zero_advantage_frac:.3f}, entropy {f.entropy:.3f} nats, truncated {f.truncated_frac:.3f}"]  # fmt: skip
    for c in f.cosine_by_minibatch:
        lines.append(f"  cos(m={c.m:3d}) = {c.mean:+.3f} [{c.ci_low:+.3f}, {c.ci_high:+.3f}] over {c.pairs} pairs")
    for s in f.staleness:
        lines.append(f"  lag {s.lag}: ESS/N seq {s.ess_seq:.4f}, token {s.ess_token:.4f}; log-ratio q05 {s.logratio_q05:+.2e} "
                     f"q50 {s.logratio_q50:+.2e} q95 {s.logratio_q95:+.2e} max {s.logratio_max:+.2e}; clip {s.clip_frac:.4f}")  # fmt: skip
    return "\n".join(lines)
