"""Bandit and MNIST tasks: gymnasium envs, exact oracles, data loading and its errors."""

import gzip
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from testbed.tasks import make_task, task_names, task_options
from testbed.tasks.base import grouped_logits, token_logp
from testbed.tasks.mnist import IDX_FILES, load_idx_dir, read_idx, train_subset

FASHION = Path("/usr/share/datasets/fashion-mnist")


def test_registry_lists_tasks_and_options():
    assert {"bandit", "contextual_bandit", "mnist"} <= set(task_names())
    assert task_options("mnist")["hidden"].default == 100
    with pytest.raises(ValueError, match="allowed: bandit"):
        make_task("nope")
    with pytest.raises(ValueError, match="unknown option 'width' for task 'mnist'"):
        make_task("mnist", width=3)


def test_k_armed_env_rewards_match_means():
    env = gym.make("testbed/KArmedBandit-v0", K=4)
    obs, _ = env.reset(seed=0)
    assert obs == 0 and env.action_space.n == 4
    n = 20_000
    rewards = [env.step(3)[1] for _ in range(n)]
    mean = 0.9  # best arm of the default evenly spaced means
    assert abs(np.mean(rewards) - mean) <= 5 * math.sqrt(mean * (1 - mean) / n)
    _, _, terminated, truncated, info = env.step(0)
    assert terminated and not truncated and info["mean"] == pytest.approx(0.1)


def test_contextual_env_and_mnist_env():
    env = gym.make("testbed/ContextualBandit-v0", N=3, K=5)
    x, _ = env.reset(seed=1)
    assert 0 <= x < 3 and env.action_space.n == 5
    menv = gym.make("testbed/MNISTBandit-v0")
    obs, _ = menv.reset(seed=0)
    assert obs.shape == (784,) and obs.min() >= 0.0 and obs.max() <= 1.0
    label = menv.step(0)[4]["label"]
    assert menv.step(label)[1] == 1.0


def test_bandit_oracles_are_exact():
    task = make_task("contextual_bandit", N=4, K=5, init_std=1.0)
    policy = task.make_policy([torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)])
    x = torch.tensor([[0, 1, 2, 3, 3], [1, 1, 0, 2, 3]])
    j = task.expected_reward(policy, x)
    table = policy.weight
    probs = torch.softmax(table, -1)  # [slot, N, K]
    for s in range(2):
        assert torch.allclose(j[s], (probs[s] * task.means)[x[s]].sum(-1))
    # d/d logit_{x,a} of sum_a pi r = pi_a (r_a - E r): the exact policy gradient, slot by slot
    (g,) = torch.autograd.grad(j.sum(), table)
    for s in range(2):
        expect = torch.zeros(4, 5)
        for c in x[s].tolist():
            expect[c] += probs[s, c] * (task.means[c] - (probs[s, c] * task.means[c]).sum())
        assert torch.allclose(g[s], expect, atol=1e-6)
    ce = task.supervised_loss(policy, x)
    for s in range(2):
        assert ce[s].item() == pytest.approx(-torch.log(probs[s, x[s], task.best[x[s]]]).mean().item(), rel=1e-5)


def test_bandit_adapter_rewards():
    task = make_task("bandit", K=3)
    assert torch.allclose(task.reward(torch.zeros(3, dtype=torch.long), torch.tensor([[0], [1], [2]])),
                          torch.tensor([0.1, 0.5, 0.9]))
    noisy = make_task("bandit", K=3, bernoulli=True)
    r = noisy.reward(torch.zeros(20_000, dtype=torch.long), torch.full((20_000, 1), 1))
    assert abs(r.mean().item() - 0.5) <= 5 * math.sqrt(0.25 / 20_000)


def test_embedded_mnist_split_is_fixed_and_stratified():
    task = make_task("mnist")
    assert (task.n_train, task.n_test) == (4000, 1000)
    test_labels = task.labels[task.n_train :]
    assert torch.bincount(test_labels).tolist() == [100] * 10
    again = make_task("mnist")
    assert torch.equal(task.images, again.images)
    # no test image is also a training image
    tr = {bytes(r) for r in task.images[: task.n_train].numpy()}
    assert not any(bytes(r) in tr for r in task.images[task.n_train :].numpy()[:200])
    x = task.sample_contexts(500, torch.Generator().manual_seed(0), "test")
    assert int(x.min()) >= task.n_train


def test_mnist_oracles_enumerate_the_ten_actions():
    task = make_task("mnist")
    policy = task.make_policy([torch.Generator().manual_seed(0)])
    x = task.sample_contexts(64, torch.Generator().manual_seed(1))
    logits = task.logits(policy, x[None], torch.zeros(1, 64, 1, dtype=torch.long))[0, :, 0]
    rewards = torch.stack([task.reward(x, torch.full((64, 1), a)) for a in range(10)], 1)
    assert torch.allclose(task.expected_reward(policy, x[None])[0], (torch.softmax(logits, -1) * rewards).sum(1), atol=1e-6)
    (ev,) = task.evaluate(policy, [torch.Generator()])
    assert 0.75 <= ev["test_error"] <= 1.0  # an untrained 10-way policy is near chance


def test_grouped_logits_compute_each_group_once_with_the_same_values_and_gradients():
    task = make_task("mnist")
    policy = task.make_policy([torch.Generator().manual_seed(s) for s in (0, 1)])
    g, groups = 4, 6
    x = torch.stack([task.sample_contexts(groups, torch.Generator().manual_seed(s)) for s in (2, 3)])
    x = x.repeat_interleave(g, dim=1)  # [2, 24]: runs of 4 equal contexts
    a = torch.randint(10, (2, groups * g, 1), generator=torch.Generator().manual_seed(4))
    weights = torch.randn(2, groups * g, 1, generator=torch.Generator().manual_seed(5))
    rows = []

    def counting(inputs):
        rows.append(inputs.shape[1])
        return policy(inputs)

    def value_and_grads(logits):
        (token_logp(logits, a) * weights).sum().backward()
        out = [p.grad.clone() for p in policy.parameters()]
        policy.zero_grad(set_to_none=True)
        return logits.detach(), out

    shared, shared_grads = value_and_grads(grouped_logits(task, counting, x, a, g))
    full, full_grads = value_and_grads(task.logits(counting, x, a))
    assert rows == [groups, groups * g]  # one forward row per group, then every row
    assert torch.allclose(shared, full, atol=1e-6, rtol=0)
    for got, want in zip(shared_grads, full_grads, strict=True):
        assert torch.allclose(got, want, atol=1e-6, rtol=1e-5)
    # rows that are not runs of equal contexts (a batch cut at random), a group size that does not divide the
    # batch, and a sequence task: every row computed, exactly task.logits
    shuffled = x[:, torch.randperm(groups * g, generator=torch.Generator().manual_seed(6))]
    assert torch.equal(grouped_logits(task, policy, shuffled, a, g), task.logits(policy, shuffled, a))
    assert torch.equal(grouped_logits(task, policy, x, a, 5), task.logits(policy, x, a))
    seq = make_task("token_reversal", H=3)
    seq_policy = seq.make_policy([torch.Generator().manual_seed(0)])
    ctx = seq.sample_contexts(2, torch.Generator().manual_seed(1))[None].repeat_interleave(2, dim=1)
    acts = torch.randint(2, (1, 4, 3), generator=torch.Generator().manual_seed(2))
    assert torch.equal(grouped_logits(seq, seq_policy, ctx, acts, 2), seq.logits(seq_policy, ctx, acts))


def _write_idx(path: Path, arr: np.ndarray, gz: bool) -> None:
    header = bytes([0, 0, 8, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_directory_round_trip(tmp_path, gz):
    rng = np.random.default_rng(0)
    arrays = {
        "train_images": rng.integers(0, 256, (30, 28, 28)), "train_labels": rng.integers(0, 10, 30),
        "test_images": rng.integers(0, 256, (12, 28, 28)), "test_labels": rng.integers(0, 10, 12),
    }
    for key, arr in arrays.items():
        _write_idx(tmp_path / IDX_FILES[key], arr, gz)
    load_idx_dir.cache_clear()
    task = make_task("mnist", data_dir=str(tmp_path))
    assert (task.n_train, task.n_test) == (30, 12)
    assert np.array_equal(task.images[:30].numpy(), arrays["train_images"].reshape(30, -1))
    assert np.array_equal(task.labels[30:].numpy(), arrays["test_labels"])


def test_missing_data_dir_and_files_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        make_task("mnist", data_dir=str(tmp_path / "nowhere"))
    (tmp_path / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x00")
    load_idx_dir.cache_clear()
    with pytest.raises(ValueError, match="lacks train-labels-idx1-ubyte, t10k-images-idx3-ubyte"):
        make_task("mnist", data_dir=str(tmp_path))
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="not an IDX file"):
        read_idx(bad)


@pytest.mark.skipif(not FASHION.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_full_fashion_mnist_from_idx_gz():
    task = make_task("mnist", data_dir=str(FASHION))
    assert (task.n_train, task.n_test) == (60_000, 10_000)
    assert torch.bincount(task.labels[: task.n_train]).tolist() == [6000] * 10
    assert task.images.dtype == torch.uint8  # 55 MB kept as bytes, scaled on the fly


def test_train_size_is_a_fixed_nested_class_balanced_subset_of_the_training_split():
    full = make_task("mnist")
    small, again, big = make_task("mnist", train_size=1000), make_task("mnist", train_size=1000), \
        make_task("mnist", train_size=2500)
    assert (small.n_train, small.n_test, big.n_train) == (1000, 1000, 2500)
    assert torch.equal(small.images, again.images)  # deterministic, whatever the run seed
    assert torch.bincount(small.labels[: small.n_train]).tolist() == [100] * 10
    assert torch.bincount(big.labels[: big.n_train]).tolist() == [250] * 10
    # the test split is untouched and the subset is drawn from the training images only
    assert torch.equal(small.images[small.n_train :], full.images[full.n_train :])
    train_rows = {bytes(r) for r in full.images[: full.n_train].numpy()}
    test_rows = {bytes(r) for r in full.images[full.n_train :].numpy()}
    small_rows = {bytes(r) for r in small.images[: small.n_train].numpy()}
    assert small_rows <= train_rows and not small_rows & test_rows
    assert small_rows <= {bytes(r) for r in big.images[: big.n_train].numpy()}  # nested
    x = small.sample_contexts(2000, torch.Generator().manual_seed(0), "train")
    assert int(x.max()) < 1000


def test_train_subset_by_hand_and_its_errors():
    labels = np.array([0, 1, 0, 1, 0, 2])
    first = train_subset(labels, 3, seed=1)
    assert sorted(labels[first].tolist()) == [0, 1, 2]  # one of each class in the first round
    assert set(first) <= set(train_subset(labels, 5, seed=1))
    assert train_subset(labels, 6).tolist() == list(range(6))
    with pytest.raises(ValueError, match=r"train_size must be in \[1, 6\]"):
        train_subset(labels, 7)


@pytest.mark.parametrize("value, needle", [("-3", "train_size must be >= 0"), ("4001", "train_size must be in [1, 4000]"),
                                           ("many", "option train_size must be an integer")])
def test_train_size_bad_values_are_one_line_errors(value, needle, capsys, tmp_path):
    from testbed.cli import main

    code = main(["run", "--task", "mnist", "--train-size", value, "--steps", "1", "--out", str(tmp_path / "o"),
                 "--dry-run"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and len(err.splitlines()) == 1
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not FASHION.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_fashion_train_size_keeps_the_full_test_split():
    task = make_task("mnist", data_dir=str(FASHION), train_size=4000)
    assert (task.n_train, task.n_test) == (4000, 10_000)
    assert torch.bincount(task.labels[: task.n_train]).tolist() == [400] * 10
