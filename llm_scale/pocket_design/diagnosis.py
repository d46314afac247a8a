"""What GRPO changed in a pocket LM (`diagnose`): greedy and sampled accuracy on the build's known and unknown
operand pairs, format and truncation, entropy, and the KL to version 0."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def diagnose(models: list[str], base: str = "pocket-arithmetic", problems: int = 256, sampled: int = 64,
             group: int = 8, seed: int = 0) -> dict[str, dict[str, Any]]:
    """What GRPO changed in a pocket LM: per model (``base`` itself first, then each of ``models``, e.g. a run's
    ``final`` directory), on ``problems`` held-out problems (the trainer's evaluation stream of ``seed``) at the
    trainer's completion budget:

    * greedy accuracy, overall and on the build's known / unknown operand pairs (`llm_scale.pocket.known_pairs`),
      the share of greedy completions cut by the budget and the share that write the asked equation at all
      (`llm_scale.tasks.equation_answer` not None) and of those that write it with a wrong result;
    * on the first ``sampled`` problems, ``group`` samples each at temperature 1 (the rollouts' distribution):
      accuracy (known / unknown), truncation, mean length, the share writing the asked equation, the share of
      groups whose rewards are all equal (zero advantage), the mean per-token entropy of the model and the
      mean per-token KL(model || base) on its own samples (sum over the vocabulary, exact).
    """
    import torch

    from ..generation import sample_completions
    from ..models import load_policy, stop_ids
    from ..pocket import POCKET_MODELS, known_pairs
    from ..sampler import Sampler
    from ..tasks import build_task, completion_budget, equation_answer

    torch.set_num_threads(1)
    spec = POCKET_MODELS[base]
    task = build_task(spec.task)
    known = known_pairs(spec)
    ref, tok = load_policy(base)
    budget = completion_budget(task, "chat", tok, seed=seed)
    smp = Sampler(task, tok, "chat", seed, sampled, group, budget, eos_ids=stop_ids(ref, tok))
    held = smp.eval_problems(problems)

    def texts(ids: Any, mask: Any) -> list[str]:
        return tok.batch_decode([ids[i][mask[i]].tolist() for i in range(ids.shape[0])], skip_special_tokens=True)

    def share(flags: list[bool], within: list[bool] | None = None) -> float:
        sel = [f for f, w in zip(flags, within or [True] * len(flags), strict=True) if w]
        return sum(sel) / len(sel) if sel else math.nan

    def stats(probs: list[Any], outs: list[str], lengths: list[int]) -> dict[str, float]:
        right = [task.reward(p, t) > 0 for p, t in zip(probs, outs, strict=True)]
        is_known = [(p.meta["a"], p.meta["op"], p.meta["b"]) in known for p in probs]
        eq = [equation_answer(t, p.meta["a"], p.meta["op"], p.meta["b"]) is not None for p, t in zip(probs, outs, strict=True)]
        return {"accuracy": share(right), "accuracy_known": share(right, is_known),
                "accuracy_unknown": share(right, [not k for k in is_known]), "known_share": share(is_known),
                "truncated": share([n >= budget for n in lengths]), "length_mean": sum(lengths) / len(lengths),
                "writes_equation": share(eq), "equation_wrong": share([e and not r for e, r in zip(eq, right, strict=True)])}  # fmt: skip

    out: dict[str, dict[str, Any]] = {}
    for name in [base, *models]:
        model = ref if name == base else load_policy(name)[0]
        model.eval()
        chunks = smp.greedy(model, held, 64)
        outs = [t for _, ids, mask in chunks for t in texts(ids, mask)]
        lengths = [int(n) for _, _, mask in chunks for n in mask.sum(1)]
        row: dict[str, Any] = {f"greedy_{k}": v for k, v in stats(held, outs, lengths).items()}
        sub = held[:sampled]
        pid, pm = smp.encode(sub, group, torch.device("cpu"))
        with torch.no_grad():
            ids, mask, _, _ = sample_completions(model, pid, pm, max_new_tokens=budget, temperature=1.0, eos_ids=smp.eos_ids,
                                                 pad_id=smp.pad_id, generator=torch.Generator().manual_seed(seed))  # fmt: skip
            full, att = torch.cat([pid, ids], 1), torch.cat([pm, mask], 1).long()
            cut = slice(pid.shape[1] - 1, -1)
            lp = torch.log_softmax(model(full, attention_mask=att).logits[:, cut].float(), -1)
            lq = torch.log_softmax(ref(full, attention_mask=att).logits[:, cut].float(), -1)
        probs = [p for p in sub for _ in range(group)]
        row.update({f"sampled_{k}": v for k, v in stats(probs, texts(ids, mask), [int(n) for n in mask.sum(1)]).items()})
        rewards = torch.tensor([task.reward(p, t) for p, t in zip(probs, texts(ids, mask), strict=True)]).view(len(sub), group)
        m = mask.float()
        row["sampled_zero_advantage_groups"] = float((rewards.std(1) == 0).float().mean())
        row["entropy_per_token"] = float(((-(lp.exp() * lp).sum(-1)) * m).sum() / m.sum())
        row["kl_to_base_per_token"] = float((((lp.exp() * (lp - lq)).sum(-1)) * m).sum() / m.sum())
        cfg = Path(name).parent / "config.json"  # a run's final directory: the run's settings beside its numbers
        if cfg.is_file():
            run = json.loads(cfg.read_text())
            run = run.get("config", run) if isinstance(run, dict) else {}
            row["run"] = {k: run.get(k) for k in ("recipe", "mode", "lr", "prompts_per_step", "group_size", "minibatches",
                                                  "steps", "seed", "max_staleness")}  # fmt: skip
        out[name] = row
    return out
