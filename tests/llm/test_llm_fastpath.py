"""The sampler's shortcuts return exactly what the plain decoding loop returns, bit for bit.

`generation.sample_completions` prefills each distinct prompt row once and drops finished rows from the decoding
forwards; `plain_sample` below is the loop without either shortcut (every row in every forward). Both run on the
tiny model with prompt groups (identical rows) and a stop set of a quarter of the vocabulary, so rows finish at many
different steps and the dropping of finished rows happens several times in one call.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch
import torch.nn.functional as F

from llm_scale.generation import _forward, distinct_rows, position_ids, sample_completions, sampling_logprobs
from llm_scale.trainer import Trainer

from .conftest import tiny_config

pytestmark = pytest.mark.integration


@torch.no_grad()
def plain_sample(model, prompt_ids, prompt_mask, *, max_new_tokens, temperature, eos_ids, pad_id, top_k=0, top_p=1.0,
                 generator=None, version=0, refresh=None, chunk=0):  # fmt: skip
    """The reference: every row of the batch in every forward, finished rows fed padding."""
    attn = prompt_mask.long()
    logits, past = _forward(model, prompt_ids, attn, position_ids(attn), None)
    next_pos = position_ids(attn)[:, -1:] + 1
    eos = torch.tensor(sorted(set(eos_ids)), dtype=torch.long)
    done = torch.zeros(prompt_ids.shape[0], dtype=torch.bool)
    toks, lps, vers, keep = [], [], [], []
    for t in range(max_new_tokens):
        if refresh is not None and chunk > 0 and t > 0 and t % chunk == 0:
            new_version = refresh()
            if new_version is not None and new_version != version:
                version = new_version
                logits, past = _forward(model, torch.cat([prompt_ids, *toks], dim=1), attn, position_ids(attn), None)
        live = ~done
        logp_all = sampling_logprobs(logits, temperature, top_k, top_p) if temperature > 0 else F.log_softmax(logits, dim=-1)
        if temperature > 0:
            tok = torch.multinomial(logp_all.exp(), 1, generator=generator)
        else:
            tok = logp_all.argmax(dim=-1, keepdim=True)
        tok = torch.where(live[:, None], tok, torch.full_like(tok, pad_id))
        toks.append(tok)
        lps.append(torch.where(live[:, None], logp_all.gather(-1, tok), torch.zeros_like(tok, dtype=torch.float32)))
        vers.append(torch.full_like(tok, version))
        keep.append(live[:, None])
        done = done | torch.isin(tok[:, 0], eos)
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        attn = torch.cat([attn, torch.ones_like(tok)], dim=1)
        logits, past = _forward(model, tok, attn, next_pos, past)
        next_pos = next_pos + 1
    return torch.cat(toks, 1), torch.cat(keep, 1), torch.cat(lps, 1), torch.cat(vers, 1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    trainer = Trainer(tiny_config(tmp_path_factory.mktemp("fast"), task="arithmetic", prompts_per_step=6, group_size=4))
    problems = trainer.sampler.problems(0)
    ids, mask = trainer.sampler.encode(problems, trainer.sampler.group_size, trainer.device)
    vocab = trainer.model.config.vocab_size
    stop = list(range(3, vocab, 4))  # a quarter of the vocabulary: the random model's rows end at scattered steps
    return trainer.model, ids, mask, stop


def _versioned_refresh(model):
    versions = iter([None, 7, None, 8, 9])

    def refresh():
        v = next(versions, None)
        if v is not None:
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.01)
        return v

    return refresh


@pytest.mark.parametrize(
    "settings",
    [dict(temperature=1.0), dict(temperature=0.7, top_k=5, top_p=0.9), dict(temperature=0.0), dict(temperature=1.0, chunk=2)],
    ids=["sampled", "top-k-top-p", "greedy", "partial-rollouts"],
)
def test_fast_sampling_equals_the_plain_loop_bit_for_bit(setup, settings):
    model, ids, mask, stop = setup
    settings = dict(settings)
    chunk = settings.pop("chunk", 0)
    out = {}
    for name, fn in (("plain", plain_sample), ("fast", sample_completions)):
        m = copy.deepcopy(model)
        out[name] = fn(m, ids, mask, max_new_tokens=12, eos_ids=stop, pad_id=0, generator=torch.Generator().manual_seed(5),
                       version=6, refresh=_versioned_refresh(m) if chunk else None, chunk=chunk, **settings)  # fmt: skip
    for a, b in zip(out["plain"], out["fast"], strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    lengths = out["fast"][1].sum(-1)
    assert len(set(lengths.tolist())) >= 3 and int(lengths.min()) < 6  # rows finished early and at several steps
    if chunk:
        assert set(out["fast"][3][out["fast"][1]].tolist()) == {6, 7, 8, 9}  # weights changed mid-sequence


def test_distinct_rows_recovers_every_row(setup):
    _, ids, mask, _ = setup
    first, inverse = distinct_rows(ids, mask)
    assert first.numel() == 6  # six prompts, each repeated four times
    assert torch.equal(ids[first][inverse], ids) and torch.equal(mask[first][inverse], mask)
    shuffled = torch.tensor(random.Random(0).sample(range(ids.shape[0]), ids.shape[0]))
    first, inverse = distinct_rows(ids[shuffled], mask[shuffled])
    assert torch.equal(ids[shuffled][first][inverse], ids[shuffled])
