"""The worker's probes (graders.worker.ops): what the allocation counter counts, and which
tensors a cache's inventory finds."""

from __future__ import annotations

import torch

from graders.worker.ops import Allocations, reachable_tensors


def test_new_storages_count_and_writes_and_views_do_not():
    x, index, one = torch.zeros(10), torch.tensor([0]), torch.ones(1)
    with Allocations() as counted:
        y = torch.empty(4, 8)  # new: 128 bytes
        y.view(8, 4).fill_(1.0)  # a view written in place: nothing new
        x.add_(1.0)
        x.index_copy_(0, index, one)
        z = torch.cat([x, x])  # new: 80 bytes
    assert (counted.count, counted.bytes) == (2, 128 + 80)
    with Allocations() as views:
        z[:3], z.reshape(4, 5), z.unsqueeze(0).transpose(0, 1)
    assert (views.count, views.bytes) == (0, 0)


class Cache:
    def __init__(self):
        self.keys = torch.zeros(2, 3)
        self.blocks = [torch.ones(1), {"scale": torch.ones(2)}]
        self.alias = self.keys
        self.deep = {"a": {"b": {"c": {"d": torch.ones(3)}}}}


def test_reachable_tensors_walk_attributes_lists_and_dicts_once_each_to_a_depth():
    found = dict(reachable_tensors(Cache()))
    assert set(found) == {"cache.keys", "cache.blocks[0]", "cache.blocks[1]['scale']"}, found
