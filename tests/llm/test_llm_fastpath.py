"""The sampler's shortcuts return exactly what the plain decoding loop returns, bit for bit; the learner's shared
prompt forward returns the full forward's log-probs and gradients up to float32 summation order.

`generation.sample_completions` prefills each distinct prompt row once (the last position's logits only) and drops
finished rows from the decoding forwards; with ``shortcuts=False`` it is the plain loop (every row in every forward,
all logits). Both run on the tiny model with prompt groups (identical rows) and a stop set of a quarter of the
vocabulary, so rows finish at many different steps and the dropping of finished rows happens several times in one call.
"""

from __future__ import annotations

import copy
import random

import pytest
import torch

from llm_scale.generation import distinct_rows, sample_completions
from llm_scale.learner import shared_prompt_logits
from llm_scale.trainer import Trainer

from .conftest import tiny_config

pytestmark = pytest.mark.integration


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
    for name, shortcuts in (("plain", False), ("fast", True)):
        m = copy.deepcopy(model)
        out[name] = sample_completions(
            m, ids, mask, max_new_tokens=12, eos_ids=stop, pad_id=0, generator=torch.Generator().manual_seed(5), version=6,
            refresh=_versioned_refresh(m) if chunk else None, chunk=chunk, shortcuts=shortcuts, **settings,
        )  # fmt: skip
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


def test_shared_prompt_forward_gives_the_full_forwards_logprobs_and_gradients(tmp_path):
    """``share_prompts``: one forward per distinct prompt; log-probs and gradients equal the full forward's up to
    float32 summation order (a relative 1e-5 bounds what float32 rounding of these sums can move)."""
    trainer = Trainer(tiny_config(tmp_path, task="arithmetic", prompts_per_step=6, group_size=4, max_new_tokens=6))
    batch = trainer.sampler.batch(trainer.model, 0, 0)
    learner, mask = trainer.learner, batch.completion_mask
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(0))
    out = {}
    for share in (False, True):
        learner.s.share_prompts = share
        trainer.model.zero_grad(set_to_none=True)
        logp, _ = learner.token_logp(batch, slice(None))
        (logp * weights * mask).sum().backward()
        out[share] = logp.detach(), [p.grad.clone() for p in trainer.model.parameters()]
    assert torch.allclose(out[True][0][mask], out[False][0][mask], rtol=1e-5, atol=1e-6)
    for shared, full in zip(out[True][1], out[False][1], strict=True):
        assert torch.allclose(shared, full, rtol=1e-5, atol=1e-5 * float(full.abs().max()))
    # distinct prompts only: nothing to share, the full forward runs
    rows = torch.arange(0, batch.prompt_ids.shape[0], 4)
    assert shared_prompt_logits(trainer.model, batch.prompt_ids[rows],
                                torch.cat([batch.prompt_mask[rows].long(), mask[rows].long()], 1), batch.completion_ids[rows]) is None


def test_fastpath_benchmark_checks_equality_on_a_built_pocket_model(tmp_path, monkeypatch, capsys):
    """The benchmark end to end on pocket-tiny: the exact path's results equal the plain path's, update by update."""
    import json

    from benchmarks.pocket_fastpath import main
    from llm_scale.pocket import build_pocket

    monkeypatch.setenv("STALENESS_TESTBED_MODELS", str(tmp_path / "models"))
    out = tmp_path / "cost.json"
    assert main(["--model", "pocket-tiny", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["skipped"] == "pocket-tiny is not built: python -m llm_scale models build pocket-tiny"
    build_pocket("pocket-tiny", tmp_path / "models", progress=False, log=lambda m: None)
    args = ["--model", "pocket-tiny", "--prompts", "4", "--group", "4", "--eval-size", "8", "--rounds", "2", "--out", str(out)]
    assert main(args) == 0
    report = json.loads(out.read_text())
    assert report["exact_equals_plain_bit_for_bit"] is True
    assert report["shared_vs_plain"]["params_max_abs_diff_at_end"] < 1e-4
    assert main(["--rounds", "0"]) == 2 and "--rounds must be a positive integer, got 0" in capsys.readouterr().err
