"""Frictions: parsing, and each friction's effect on sampling and rewards, in numbers."""

import math

import pytest
import torch

from testbed.frictions import parse_frictions

N = 60_000


def freq(actions: torch.Tensor, k: int) -> torch.Tensor:
    return torch.bincount(actions, minlength=k).double() / actions.numel()


def within(f: torch.Tensor, p: torch.Tensor, n: int) -> bool:
    tol = 5 * torch.sqrt(p * (1 - p) / n) + 1.0 / n
    return bool(((f - p).abs() <= tol).all())


def test_parse_combined_and_none():
    fr = parse_frictions("bug(frac=0.2, kind=random, eps=0.5)+reward(p=0.1, kind=noise, sigma=2)+mismatch(sigma=0.3)")
    assert fr.bug.frac == 0.2 and fr.bug.kind == "random" and fr.bug.eps == 0.5
    assert fr.reward.kind == "noise" and fr.reward.sigma == 2.0 and fr.mismatch.sigma == 0.3
    assert parse_frictions("none").none and parse_frictions(None).none and parse_frictions("").none


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("bugs(frac=0.1)", "unknown friction 'bugs'"),
        ("bug(frac=1.5)", "frac must be in [0, 1]"),
        ("bug(kind=sideways)", "kind must be one of"),
        ("bug(fraction=0.1)", "unknown parameter 'fraction'"),
        ("reward(p=0.1)+reward(p=0.2)", "appears twice"),
        ("reward(p=x)", "must be a number"),
        ("mismatch(sigma=-1)", "sigma must be a finite number >= 0"),
        ("bug(frac=0.1", "unbalanced"),
    ],
)
def test_bad_specs(spec, fragment):
    with pytest.raises(ValueError, match="allowed:") as info:
        parse_frictions(spec)
    assert fragment in str(info.value)


def test_clean_sampling_is_the_softmax():
    logits = torch.tensor([[2.0, 0.5, -1.0, 0.0]]).expand(N, 4)
    a = parse_frictions("none").sample(logits, False, torch.Generator().manual_seed(0))
    assert within(freq(a, 4), torch.softmax(logits[0], -1).double(), N)


def test_temperature_bug_samples_the_tempered_policy_only_when_buggy():
    fr = parse_frictions("bug(frac=1, kind=temperature, temp=4)")
    logits = torch.tensor([[3.0, 0.0, -2.0]]).expand(N, 3)
    a = fr.sample(logits, True, torch.Generator().manual_seed(1))
    assert within(freq(a, 3), torch.softmax(logits[0] / 4, -1).double(), N)
    a = fr.sample(logits, False, torch.Generator().manual_seed(1))
    assert within(freq(a, 3), torch.softmax(logits[0], -1).double(), N)


def test_random_action_bug_mixes_in_uniform_actions():
    fr = parse_frictions("bug(frac=1, kind=random, eps=0.4)")
    logits = torch.tensor([[5.0, -5.0, -5.0, -5.0, -5.0]]).expand(N, 5)
    a = fr.sample(logits, True, torch.Generator().manual_seed(2))
    expect = 0.6 * torch.softmax(logits[0], -1).double() + 0.4 / 5
    assert within(freq(a, 5), expect, N)


def test_mismatch_perturbs_logits_with_the_stated_noise():
    fr = parse_frictions("mismatch(sigma=0.5)")
    noisy = fr.draws(N, 1, 3, False, torch.Generator().manual_seed(3))["noise"]
    assert noisy.shape == (N, 1, 3)
    assert noisy.std().item() == pytest.approx(0.5, rel=5 * math.sqrt(2 / (3 * N)) / 0.5 + 0.01)
    assert noisy.mean().abs().item() < 5 * 0.5 / math.sqrt(3 * N)


def test_perturbed_weights_have_the_stated_noise():
    fr = parse_frictions("bug(frac=1, kind=perturb, sigma=0.2)")
    params = {"w": torch.ones(200, 300)}
    pert = fr.perturbed(params, torch.Generator().manual_seed(4))
    d = pert["w"] - 1
    assert d.std().item() == pytest.approx(0.2, rel=0.02)


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5])
def test_reward_flip_rate(p):
    fr = parse_frictions(f"reward(p={p}, kind=flip)")
    r = (torch.rand(N, generator=torch.Generator().manual_seed(5)) < 0.3).float()
    out = fr.corrupt_rewards(r, torch.Generator().manual_seed(6))
    flipped = (out != r).double().mean().item()
    assert set(out.unique().tolist()) <= {0.0, 1.0}
    assert abs(flipped - p) <= 5 * math.sqrt(p * (1 - p) / N) + 1e-12
    assert torch.equal(out[out != r], 1 - r[out != r])


def test_reward_noise():
    fr = parse_frictions("reward(p=1, kind=noise, sigma=2)")
    out = fr.corrupt_rewards(torch.ones(N), torch.Generator().manual_seed(7))
    assert out.mean().item() == pytest.approx(1.0, abs=5 * 2 / math.sqrt(N))
    assert out.std().item() == pytest.approx(2.0, rel=0.02)


def test_bug_status_rates():
    fr = parse_frictions("bug(frac=0.3)")
    gen = torch.Generator().manual_seed(8)
    hits = sum(fr.is_buggy(0, None, gen) for _ in range(20_000))
    assert abs(hits / 20_000 - 0.3) <= 5 * math.sqrt(0.21 / 20_000)
    sticky = parse_frictions("bug(frac=0.3, sticky=true)")
    mask = sticky.buggy_actors(10, torch.Generator().manual_seed(9))
    assert int(mask.sum()) == 3
    assert [sticky.is_buggy(a, mask, gen) for a in range(10)] == mask.tolist()
