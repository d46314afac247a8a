"""The learner's minibatch split: whole prompt groups, in order (verl's split), or a seeded permutation."""

import pytest
import torch

from llm_scale.config import TrainConfig, UsageError
from llm_scale.learner import group_minibatches


def test_whole_groups_in_order_and_disjoint():
    gids = torch.tensor([7, 7, 7, 2, 2, 2, 9, 9, 9, 4, 4, 4])  # 4 groups of 3, ids in no particular order
    slices = group_minibatches(gids, 2)
    assert [s.tolist() for s in slices] == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    three = group_minibatches(gids, 3)  # 4 groups in 3 slices: 2, 1, 1 groups
    assert [s.tolist() for s in three] == [[0, 1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11]]
    for parts in (slices, three):
        seen = torch.cat(parts)
        assert seen.tolist() == list(range(12))  # every row once
        groups = [set(gids[p].tolist()) for p in parts]
        assert all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1:])  # disjoint prompts


def test_uneven_groups_after_dynamic_sampling_and_more_slices_than_groups():
    gids = torch.tensor([3, 3, 5, 5, 5, 5])  # a kept group of 2 and one of 4
    assert [s.tolist() for s in group_minibatches(gids, 2)] == [[0, 1], [2, 3, 4, 5]]
    parts = group_minibatches(gids, 4)
    assert [s.numel() for s in parts] == [2, 4, 0, 0]
    assert [s.tolist() for s in group_minibatches(torch.tensor([], dtype=torch.long), 2)] == [[], []]


def test_groups_split_needs_whole_groups_per_minibatch():
    with pytest.raises(UsageError, match="--minibatch-split random"):
        TrainConfig(model="tiny", task="copy", prompts_per_step=3, group_size=4, minibatches=2).validate()
    TrainConfig(model="tiny", task="copy", prompts_per_step=3, group_size=4, minibatches=2,
                minibatch_split="random").validate()
