"""The worker's probes (graders.worker.ops): what the allocation counter counts, holds and names,
which tensors a cache's inventory finds, and how many rows decode_step's projections multiply."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from graders.worker.layer import Layer
from graders.worker.ops import Allocations, _ProjectionRows, reachable_tensors


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


def test_held_is_what_successive_calls_keep_alive_wherever_they_keep_it():
    kept, cache = [], {}
    with Allocations(kept) as first:
        cache["k"] = torch.zeros(100)  # kept: 400 bytes
        torch.ones(50)  # freed at once
    assert first.held() == 400
    with Allocations(kept) as second:
        cache["k"] = torch.zeros(200)  # replaces the first: 800 bytes, the 400 freed
        cache["blocks"] = [torch.zeros(10).view(2, 5)]  # a view keeps its storage: 40 bytes
    assert second.held() == 800 + 40
    cache.clear()
    with Allocations(kept) as third:
        pass
    assert third.held() == 0 and kept == []


def test_largest_names_the_biggest_storages_by_dtype_and_shape_in_a_few_numbers():
    with Allocations() as counted:
        mask = torch.ones(64, 64, dtype=torch.bool).tril()  # 2 x 4096 bytes (ones, then tril)
        small = [torch.zeros(3, 3) for _ in range(100)]  # 100 x 36 bytes
        torch.zeros(8, dtype=torch.int64), torch.zeros(2)  # 64 and 8 bytes: not among the 3
    assert counted.largest() == [
        ["bool", [64, 64], 2, 4096],
        ["int64", [8], 1, 64],
        ["float32", [3, 3], 100, 36],
    ]
    assert counted.count == 104 and mask.shape == (64, 64) and len(small) == 100


def projection_layer(d_model: int = 8) -> Layer:
    """Two query heads and one kv head of head_dim 4: wq is [8, 8], wk and wv [4, 8]."""
    weights = {
        name: torch.randn(out, d_model)
        for name, out in (("wq", 8), ("wk", 4), ("wv", 4), ("wo", d_model))
    }
    return Layer(weights, n_heads=2, n_kv_heads=1, head_dim=4, rope_base=10000.0)


def fused(layer: Layer) -> torch.Tensor:
    return torch.cat([layer.wq.weight, layer.wk.weight, layer.wv.weight])  # [16, 8]: a wqkv


@pytest.mark.parametrize(
    "project",
    [
        lambda layer, x: (layer.wq(x), layer.wk(x), layer.wv(x)),
        lambda layer, x: (
            F.linear(x, layer.wq.weight),
            x @ layer.wk.weight.T,
            x @ layer.wv.weight.t(),
        ),
        lambda layer, x: F.linear(x, fused(layer)),
        lambda layer, x: x @ fused(layer).T.contiguous(),
        lambda layer, x: [
            F.linear(x, getattr(layer, w).weight.clone()) for w in ("wq", "wk", "wv")
        ],
    ],
    ids=["modules", "weights", "fused-wqkv", "fused-transposed-copy", "copies"],
)
def test_each_projection_counts_the_rows_it_multiplies_fused_or_not(project):
    layer, x = projection_layer(), torch.randn(3, 1, 8)  # 3 new tokens
    with _ProjectionRows(layer, {}) as counter:
        project(layer, x)
    assert counter.rows == {"wq": 3, "wk": 3, "wv": 3}


def test_a_fused_weight_kept_from_an_earlier_step_still_counts():
    layer, derived = projection_layer(), {}
    with _ProjectionRows(layer, derived) as first:
        wqkv = fused(layer)  # kept by the candidate's file
        F.linear(torch.randn(2, 1, 8), wqkv)
    with _ProjectionRows(layer, derived) as second:
        F.linear(torch.randn(2, 5, 8), wqkv)  # five positions a row: the prefix projected again
    assert first.rows == {"wq": 2, "wk": 2, "wv": 2}
    assert second.rows == {"wq": 10, "wk": 10, "wv": 10}


def test_fusing_the_weights_projects_nothing_and_outputs_stand_for_no_weight():
    layer = projection_layer()
    with _ProjectionRows(layer, {}) as counter:
        wkv = torch.cat([layer.wk.weight, layer.wv.weight]).float()
        q = layer.wq(torch.randn(2, 1, 8))  # [2, 1, 8]
        torch.cat([q, q]) * 2.0, wkv.sum()  # q is a product with x, not a weight
    assert counter.rows == {"wq": 2, "wk": 0, "wv": 0}


def test_a_tensor_converted_like_a_weight_is_not_one():
    """`x.to(w)` takes w's dtype and device; what it returns is x, still counted when projected."""
    layer = projection_layer()
    with _ProjectionRows(layer, {}) as counter:
        hidden = torch.randn(2, 5, 8).to(layer.wq.weight)
        layer.wk(hidden), layer.wv(hidden[:, -1:])
    assert counter.rows == {"wq": 0, "wk": 10, "wv": 2}


class Cache:
    def __init__(self):
        self.keys = torch.zeros(2, 3)
        self.blocks = [torch.ones(1), {"scale": torch.ones(2)}]
        self.alias = self.keys
        self.deep = {"a": {"b": {"c": {"d": torch.ones(3)}}}}


def test_reachable_tensors_walk_attributes_lists_and_dicts_once_each_to_a_depth():
    found = dict(reachable_tensors(Cache()))
    assert set(found) == {"cache.keys", "cache.blocks[0]", "cache.blocks[1]['scale']"}, found


@pytest.mark.slow  # a fresh process imports torch
def test_the_workers_torch_set_up_and_the_counter_leave_torch_dynamo_unimported():
    """Importing torch._dynamo costs a worker about 1 s at start and doubles what each forked
    child costs: neither the NaN fill of fresh memory nor the counter may pull it in."""
    code = (
        "import sys, torch\n"
        "from graders.worker.ops import Allocations\n"
        "from graders.worker.serve import fill_uninitialized_memory\n"
        "fill_uninitialized_memory(torch)\n"
        "assert torch.empty(3).isnan().all() and torch.are_deterministic_algorithms_enabled()\n"
        "x = torch.zeros(2)\n"
        "with Allocations() as counted:\n"
        "    torch.cat([x, x])\n"
        "assert counted.count == 1, counted.count\n"
        "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo imported'\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr


@pytest.mark.slow
def test_code_compiled_with_torch_compile_is_counted_too():
    @torch.compile(backend="eager")
    def grow(x):
        return torch.cat([x, torch.zeros_like(x)])

    with Allocations() as counted:
        y = grow(torch.ones(4))
    assert y.shape == (8,) and counted.count >= 1 and counted.bytes >= 32


def test_a_resize_that_moves_the_storage_is_a_new_allocation_of_its_new_size():
    kept, cache = [], {"k": torch.zeros(4, 8)}  # made before: not counted
    with Allocations(kept) as grown:
        cache["k"].resize_(64, 8)  # 2 KiB, in new memory
        cache["k"].resize_(2, 8)  # smaller: stays where it is
    assert (grown.count, grown.bytes) == (1, 64 * 8 * 4)
    assert grown.held() == 64 * 8 * 4
    with Allocations(kept) as again:
        cache["k"].resize_(128, 8)  # the same storage, moved again: held once, at its new size
    assert (again.count, again.held()) == (1, 128 * 8 * 4)
