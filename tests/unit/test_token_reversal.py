"""Token reversal / copy / flip and its transformer policy: targets, rewards, causality, log-probs, ratios."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import functional_call

from testbed.stabilizers import sequence_log_ratio
from testbed.stabilizers.numerics import log_ratio
from testbed.tasks import Task, make_task, task_options
from testbed.tasks.token_reversal import TokenReversal, discovery_probability
from testbed.tasks.transformer import DecoderTransformer


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def perturbed(policy: torch.nn.Module, sigma: float, seed: int) -> dict[str, torch.Tensor]:
    g = gen(seed)
    return {k: v.detach() + sigma * torch.randn(v.shape, generator=g) for k, v in policy.named_parameters()}


def test_is_a_task_with_the_protocol_attributes():
    task = TokenReversal(H=5, M=3)
    assert isinstance(task, Task)
    assert (task.horizon, task.n_actions, task.name) == (5, 3, "token_reversal")


@pytest.mark.parametrize(
    ("variant", "M", "x", "y"),
    [
        ("reverse", 2, [0, 1, 1], [1, 1, 0]),
        ("copy", 2, [0, 1, 1], [0, 1, 1]),
        ("flip", 2, [0, 1, 1], [1, 0, 0]),
        ("reverse", 3, [0, 1, 2], [2, 1, 0]),
        ("flip", 3, [0, 2, 2], [2, 0, 0]),
    ],
)
def test_targets_by_hand(variant, M, x, y):
    task = TokenReversal(H=3, M=M, variant=variant)
    assert task.target(torch.tensor([x])).tolist() == [y]


def test_reward_exact_and_partial_credit():
    x = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 0]])
    a = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 0]])  # exact reverse for row 0; row 1 target is [0, 1, 1, 1]
    assert TokenReversal(H=4).reward(x, a).tolist() == [1.0, 0.0]
    assert TokenReversal(H=4, partial_credit=True).reward(x, a).tolist() == [1.0, 0.75]


def test_min_correct_reward_by_hand():
    x = torch.tensor([[0, 1, 1, 0]] * 4)  # target [0, 1, 1, 0]
    a = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 1]])  # 4, 3, 2, 0 tokens right
    assert TokenReversal(H=4, min_correct=3).reward(x, a).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert TokenReversal(H=4, min_correct=2).reward(x, a).tolist() == [1.0, 1.0, 1.0, 0.0]
    assert TokenReversal(H=4, min_correct=4).reward(x, a).tolist() == TokenReversal(H=4).reward(x, a).tolist()
    # graded above the threshold: the fraction right, nothing below it
    assert TokenReversal(H=4, min_correct=3, partial_credit=True).reward(x, a).tolist() == [1.0, 0.75, 0.0, 0.0]
    assert TokenReversal(H=4, min_correct=1, partial_credit=True).reward(x, a).tolist() == [1.0, 0.75, 0.5, 0.0]


def test_discovery_probability_closed_form():
    assert discovery_probability(10, 2) == 2.0**-10
    assert discovery_probability(10, 2, 9) * 1024 == pytest.approx(11.0)
    assert discovery_probability(10, 2, 8) * 1024 == pytest.approx(56.0)
    assert discovery_probability(3, 3, 2) == pytest.approx((3 * 2 + 1) / 27)
    assert discovery_probability(5, 4, 0 + 1) == pytest.approx(1 - (3 / 4) ** 5)


def test_min_correct_discovery_rate_under_the_uniform_initial_policy():
    """A sampled sequence of the (exactly uniform) initial policy is rewarded with discovery_probability."""
    task = TokenReversal(H=6, M=2, min_correct=5)
    policy = task.make_policy([gen()])
    n = 4000
    x = task.sample_contexts(n, gen(1))[None]
    actions, _ = task.rollout(policy, x, torch.rand(x.shape, generator=gen(2)))
    rate = float(task.reward(x, actions).mean())
    p = discovery_probability(6, 2, 5)  # 7 / 64
    assert abs(rate - p) <= 4 * math.sqrt(p * (1 - p) / n)


def test_initial_policy_is_exactly_uniform_so_discovery_has_probability_M_to_the_minus_H():
    task = TokenReversal(H=6, M=3)
    policy = task.make_policy([gen()])
    x = task.sample_contexts(50, gen(1))[None]
    logp_target = task.sequence_logp(policy, x, task.target(x))
    torch.testing.assert_close(logp_target.sum(-1), torch.full((1, 50), -6 * math.log(3)))


def test_init_depends_only_on_the_generator_and_slots_are_independent():
    task = TokenReversal(H=4)
    a, b = task.make_policy([gen(3)]), task.make_policy([gen(3)])
    c = task.make_policy([gen(4)])
    both = task.make_policy([gen(3), gen(4)])  # slot s of a stacked policy = the policy of generator s alone
    for (name, pa), pb, pc, pboth in zip(a.named_parameters(), b.parameters(), c.parameters(), both.parameters(),
                                         strict=True):
        assert torch.equal(pa, pb) and torch.equal(pboth[0], pa[0]) and torch.equal(pboth[1], pc[0])
        if name.endswith("embed.weight"):
            assert not torch.equal(pa, pc)


def test_logits_are_causal_and_prefix_consistent():
    task = TokenReversal(H=5, M=3)
    policy = task.make_policy([gen()])
    policy.head.weight.data.normal_(0, 1, generator=gen(9))  # non-uniform policy
    x = task.sample_contexts(8, gen(1))[None]
    a = torch.randint(0, 3, (1, 8, 5), generator=gen(2))
    full = task.logits(policy, x, a)
    assert full.shape == (1, 8, 5, 3)
    for t in range(1, 6):
        b = a.clone()
        b[..., t - 1 :] = torch.randint(0, 3, (1, 8, 6 - t), generator=gen(t))  # change a_t.. (and after)
        torch.testing.assert_close(task.logits(policy, x, b)[:, :, :t], full[:, :, :t])  # positions <= t unchanged
        torch.testing.assert_close(task.logits(policy, x, a[..., :t]), full[:, :, :t])  # shorter T' gives the prefix
    assert task.logits(policy, x, a[..., :0]).shape == (1, 8, 0, 3)


@pytest.mark.parametrize("start", [0, 2, 4])
def test_key_value_cached_decoding_equals_teacher_forcing(start):
    """Sampling with the cache (a prefill at ``start``, then one token at a time) reads the same logits as
    one teacher-forced pass, for every slot of a stacked policy."""
    task = TokenReversal(H=5, M=3)
    policy = task.make_policy([gen(0), gen(1)])
    policy.head.weight.data.normal_(0, 1, generator=gen(9))
    x = torch.stack([task.sample_contexts(8, gen(s)) for s in (2, 3)])
    a = torch.randint(0, 3, (2, 8, 5), generator=gen(4))
    with torch.no_grad():
        full = task.logits(policy, x, a)
        state = task.decode_state(policy, x, a, start)
        for k in range(start, 5):
            logits, state = task.decode(policy, state, a, k)
            torch.testing.assert_close(logits, full[:, :, k], rtol=0, atol=2e-5)


def test_recorded_logp_equals_teacher_forced_recomputation_under_the_version_that_sampled():
    task = TokenReversal(H=6)
    policy = task.make_policy([gen()])
    old = perturbed(policy, 0.3, seed=1)  # version v
    new = perturbed(policy, 0.3, seed=2)  # a later version
    x = task.sample_contexts(64, gen(3))[None]
    sampler = DecoderTransformer(6, 2, generators=[gen(5)])  # an actor holding a copy of version `old`
    sampler.load_state_dict(old)
    actions, recorded = task.rollout(sampler, x, torch.rand((1, 64, 6), generator=gen(4)))
    with torch.no_grad():  # the learner's side: one teacher-forced call with the stored parameters
        again = functional_call(policy, old, (x, actions))
        other = functional_call(policy, new, (x, actions))
    recomputed = F.log_softmax(again, -1).gather(-1, actions[..., None]).squeeze(-1)
    torch.testing.assert_close(recorded, recomputed, rtol=0, atol=1e-5)
    assert not torch.allclose(recorded, F.log_softmax(other, -1).gather(-1, actions[..., None]).squeeze(-1), atol=1e-3)


def test_token_and_sequence_ratios_agree_with_a_hand_computation():
    """H = 3, M = 2: per-token probabilities by one forward pass per prefix and a hand softmax."""
    task = TokenReversal(H=3)
    policy = task.make_policy([gen()])
    mu, pi = perturbed(policy, 0.5, seed=11), perturbed(policy, 0.5, seed=12)
    x = torch.tensor([[[0, 1, 1]]])
    a = torch.tensor([[[1, 0, 1]]])

    def hand_probs(params):
        probs = []
        for t in range(3):  # the prefix a_<t only (padding-free), read the last position
            z = functional_call(policy, params, (x, a[..., : t + 1]))[0, 0, t].double()
            e = torch.exp(z - z.max())
            probs.append(float(e[a[0, 0, t]] / e.sum()))
        return probs

    p_mu, p_pi = hand_probs(mu), hand_probs(pi)
    token_ratio = [q / p for q, p in zip(p_pi, p_mu, strict=True)]
    seq_ratio = math.prod(token_ratio)

    with torch.no_grad():
        logp = F.log_softmax(functional_call(policy, pi, (x, a)), -1).gather(-1, a[..., None]).squeeze(-1)[0]
        blogp = F.log_softmax(functional_call(policy, mu, (x, a)), -1).gather(-1, a[..., None]).squeeze(-1)[0]
    mask = torch.ones_like(logp, dtype=torch.bool)
    torch.testing.assert_close(log_ratio(logp, blogp).exp()[0].double(), torch.tensor(token_ratio, dtype=torch.float64),
                               rtol=1e-5, atol=0)
    assert float(sequence_log_ratio(logp, blogp, mask).exp()) == pytest.approx(seq_ratio, rel=1e-5)
    # and the sequence probabilities are a proper distribution over all M^H = 8 sequences
    every = torch.tensor([[(i >> 2) & 1, (i >> 1) & 1, i & 1] for i in range(8)])
    with torch.no_grad():
        lp_all = task.sequence_logp(policy, x.expand(1, 8, 3), every[None])  # the base policy
    assert float(lp_all.sum(-1).exp().sum()) == pytest.approx(1.0, abs=1e-6)


def test_train_test_split_is_fixed_disjoint_and_about_the_holdout_fraction():
    task = TokenReversal(H=10)
    every = task.all_contexts()
    assert every.shape == (1024, 10) and len({tuple(r) for r in every.tolist()}) == 1024
    test = task.in_test(every)
    assert 0.15 < float(test.float().mean()) < 0.25
    train_x = task.sample_contexts(500, gen(0), "train")
    test_x = task.sample_contexts(200, gen(0), "test")
    assert not bool(task.in_test(train_x).any()) and bool(task.in_test(test_x).all())
    assert torch.equal(TokenReversal(H=10).in_test(every), test)  # the split does not depend on any seed
    small = TokenReversal(H=4)  # 16 contexts: no room for a split
    assert not small.split_enabled and bool(small.in_test(small.all_contexts()).all())


def test_evaluate_on_the_uniform_initial_policy_matches_closed_forms():
    task = TokenReversal(H=4, n_eval=1600)  # 16 contexts, each sampled 100 times
    (out,) = task.evaluate(task.make_policy([gen()]), [gen(1)])
    # greedy decoding of a uniform policy picks token 0 (first argmax): right only for the all-zero target
    assert out["test_error_greedy"] == pytest.approx(15 / 16)
    assert out["test_token_error_greedy"] == pytest.approx(0.5)
    # sampled: each sequence right with probability 2^-4
    assert out["test_error"] == pytest.approx(1 - 1 / 16, abs=0.02)  # 3.3 standard errors
    assert out["test_reward"] == pytest.approx(1 - out["test_error"])


@pytest.mark.parametrize("H", [4, 10])
def test_greedy_evaluation_decodes_each_enumerated_context_once_with_the_same_errors(H, monkeypatch):
    task = TokenReversal(H=H, n_eval=2048)
    policy = task.make_policy([gen(0), gen(1)])
    for k, v in perturbed(policy, 0.5, seed=2).items():  # a policy whose greedy answers depend on the context
        policy.get_parameter(k).data.copy_(v)
    repeated = torch.stack([task.eval_contexts(gen(3))] * 2)  # every context of the split, 2048 // size times
    split = task.enumerated_split
    assert repeated.shape[1] == (2048 // split.shape[0]) * split.shape[0] > split.shape[0]
    actions, _ = task.rollout(policy, repeated)
    correct = actions == task.target(repeated)
    shapes = []
    rollout = task.rollout
    monkeypatch.setattr(task, "rollout", lambda pol, x, u=None: shapes.append(tuple(x.shape)) or rollout(pol, x, u))
    out = task.evaluate(policy, [gen(3), gen(4)])
    assert shapes == [tuple(repeated.shape), (2, split.shape[0], H)]  # sampled: every repeat; greedy: once each
    for i, row in enumerate(out):
        assert row["test_error_greedy"] == float(1.0 - correct[i].all(-1).float().mean())
        assert row["test_token_error_greedy"] == float(1.0 - correct[i].float().mean())
    assert 0.0 < out[0]["test_error_greedy"] < 1.0


def test_rare_p0_warm_start_makes_discovery_exponentially_rarer():
    task = TokenReversal(H=4, rare_p0=0.3)
    policy = task.make_policy([gen()])
    x = task.all_contexts()[None]
    with torch.no_grad():
        p_exact = task.sequence_logp(policy, x, task.target(x)).sum(-1).exp()
    assert float(p_exact.mean()) < 0.5 * 2.0**-4  # rarer than the uniform policy's 1/16
    assert 0.2 * 0.3**4 < task.initial_success < 5 * 0.3**4


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"variant": "mirror"}, "unknown variant 'mirror'"),
        ({"H": 0}, "H must be"),
        ({"M": 1}, "M must be"),
        ({"rare_p0": 0.6}, "rare_p0 must be in"),
        ({"d_model": 30, "n_heads": 4}, "divisible"),
        ({"H": 10, "min_correct": 11}, r"min_correct must be an integer in \[1, H\] = \[1, 10\], got 11"),
        ({"min_correct": 0}, "min_correct must be an integer in"),
    ],
)
def test_bad_options_get_clear_errors(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        TokenReversal(**kwargs)


def test_registered_with_options_settable_by_name():
    opts = task_options("token_reversal")
    for key in ("H", "M", "variant", "partial_credit", "rare_p0", "d_model", "n_layers", "n_heads"):
        assert key in opts
    task = make_task("token_reversal", H="5", M="3", variant="copy", partial_credit="true", rare_p0="0.2")
    assert (task.H, task.M, task.variant, task.partial_credit, task.rare_p0) == (5, 3, "copy", True, 0.2)
    assert sum(p.numel() for p in task.make_policy([gen()]).parameters()) > 0


def test_gymnasium_env_is_registered_and_steps_through_an_episode():
    import gymnasium

    import testbed.tasks  # noqa: F401  (registers the ids)

    env = gymnasium.make("testbed/TokenReversal-v0", H=3, variant="reverse").unwrapped
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs) and obs["prefix"].tolist() == [2, 2, 2]
    target = obs["context"][::-1].tolist()
    rewards = []
    for k, a in enumerate(target):
        obs, r, terminated, truncated, info = env.step(a)
        rewards.append(r)
        assert terminated == (k == 2) and not truncated
    assert rewards == [0.0, 0.0, 1.0] and info["target"] == target
    obs, _ = env.reset(seed=0)
    for a in [*target[:2], 1 - target[2]]:
        *_, r, terminated, _, _ = env.step(a)
    assert r == 0.0 and terminated
