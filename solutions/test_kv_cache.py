"""Own tests for kv_cache.py, as a strong candidate would write them.

The central test is prefix equivalence: decode one token at a time with the cache and compare
the newest token's output with an independent full causal attention forward, in float64, at
EVERY prefix. Checking only the last step, or only shapes, misses masking and append mistakes
that show up at some prefixes and not others.
"""

import math

import pytest
import torch
from kv_cache import KVCache, append, apply_rope, attend, decode_step, release, reset

TOLERANCE = 1e-5  # max absolute error of a float32 cache against the float64 reference


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def full_causal_attention(q, k, v):
    """Independent reference. q: [B, Hq, T, D]; k, v: [B, Hkv, T, D] -> [B, Hq, T, D], float64."""
    q, k, v = q.double(), k.double(), v.double()
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)  # query head h reads KV head h // groups
    v = v.repeat_interleave(groups, dim=1)
    t = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, Hq, T, T]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    return scores.masked_fill(future, float("-inf")).softmax(dim=-1) @ v


def newest_token_reference(query, k, v):
    """The last row of full causal attention: query [B, Hq, 1, D] at the newest position."""
    steps = k.shape[2]
    return full_causal_attention(query.expand(-1, -1, steps, -1), k, v)[:, :, -1:]


def assert_matches(actual, expected, what):
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    error = (actual.double() - expected.double()).abs().max().item()  # NaN fails the comparison too
    assert error <= TOLERANCE, f"{what}: max abs error {error:.2e} > {TOLERANCE:.0e}"


@pytest.mark.parametrize(
    "q_heads, kv_heads",
    [(4, 4), (6, 2), (4, 1)],
    ids=["mha", "gqa", "mqa"],
)
@pytest.mark.parametrize("capacity", [None, 4], ids=["no-capacity", "capacity-4"])
def test_newest_output_matches_full_attention_at_every_prefix(q_heads, kv_heads, capacity):
    batch, steps, head_dim = 2, 12, 8
    q = torch.randn(batch, q_heads, steps, head_dim)
    k = torch.randn(batch, kv_heads, steps, head_dim)
    v = torch.randn(batch, kv_heads, steps, head_dim)
    expected = full_causal_attention(q, k, v)  # [B, Hq, T, D]

    cache = KVCache() if capacity is None else KVCache(capacity=capacity)
    for t in range(steps):
        append(cache, k[:, :, t : t + 1], v[:, :, t : t + 1])
        out = attend(cache, q[:, :, t : t + 1])
        assert out.shape == (batch, q_heads, 1, head_dim)
        assert_matches(out, expected[:, :, t : t + 1], f"prefix of length {t + 1}")
    assert cache.keys.shape == (batch, kv_heads, steps, head_dim)  # GQA stores kv_heads heads only


def test_append_grows_time_and_tracks_lengths_and_capacity():
    cache = KVCache(capacity=8)
    append(cache, torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    append(cache, torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert cache.keys.shape == cache.values.shape == (1, 2, 4, 4)
    assert cache.lengths.tolist() == [4]
    assert cache.capacity == 8


def test_ragged_rows_attend_only_to_their_own_positions():
    kv_heads, q_heads, head_dim = 2, 4, 8
    k, v = torch.randn(3, kv_heads, 5, head_dim), torch.randn(3, kv_heads, 5, head_dim)
    # Padding (row 1 past 2, all of row 2) is NaN: a single padded slot that reaches the output,
    # even with weight 0 (0 * NaN is NaN), makes it NaN.
    k[1, :, 2:] = v[1, :, 2:] = k[2] = v[2] = float("nan")
    cache = KVCache()
    append(cache, k, v, torch.tensor([5, 2, 0]))  # a ragged prompt batch
    assert cache.lengths.tolist() == [5, 2, 0]
    # Each row's own sequence, kept independently: [Hkv, n, D].
    seq_k = [k[0], k[1, :, :2], k[2, :, :0]]
    seq_v = [v[0], v[1, :, :2], v[2, :, :0]]

    for step in range(3):
        new_k, new_v = torch.randn(3, kv_heads, 1, head_dim), torch.randn(3, kv_heads, 1, head_dim)
        counts = torch.tensor([1, 0, 1])  # row 1 has finished and stops growing
        append(cache, new_k, new_v, counts)
        for row in (0, 2):
            seq_k[row] = torch.cat((seq_k[row], new_k[row]), dim=1)
            seq_v[row] = torch.cat((seq_v[row], new_v[row]), dim=1)
        assert cache.lengths.tolist() == [6 + step, 2, 1 + step]

        query = torch.randn(3, q_heads, 1, head_dim)
        out = attend(cache, query)
        for row in range(3):
            r = slice(row, row + 1)
            expected = newest_token_reference(query[r], seq_k[row][None], seq_v[row][None])
            assert_matches(out[r], expected, f"step {step}, row {row}")


def test_row_of_length_zero_returns_zeros():
    cache = KVCache()
    append(cache, torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4), torch.tensor([3, 0]))
    out = attend(cache, torch.randn(2, 2, 1, 4))
    assert torch.equal(out[1], torch.zeros(2, 1, 4))


def test_large_logits_stay_finite_and_correct():
    k, v, q = torch.randn(1, 2, 6, 4) * 100, torch.randn(1, 2, 6, 4), torch.randn(1, 2, 1, 4) * 100
    cache = KVCache()
    append(cache, k, v)
    out = attend(cache, q)
    assert torch.isfinite(out).all()
    assert_matches(out, newest_token_reference(q, k, v), "large logits")


@pytest.fixture
def filled_cache():
    """Batch 2, kv_heads 2, 3 positions, head_dim 4, float32."""
    cache = KVCache()
    append(cache, torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4))
    return cache


# Appends incompatible with `filled_cache`: key shape, value shape, dtype, counts.
BAD_APPENDS = [
    pytest.param((2, 3, 4), (2, 3, 4), torch.float32, None, id="rank"),
    pytest.param((2, 2, 1, 4), (2, 2, 2, 4), torch.float32, None, id="key-value-mismatch"),
    pytest.param((3, 2, 1, 4), (3, 2, 1, 4), torch.float32, None, id="batch"),
    pytest.param((2, 1, 1, 4), (2, 1, 1, 4), torch.float32, None, id="kv_heads"),
    pytest.param((2, 2, 1, 8), (2, 2, 1, 8), torch.float32, None, id="head_dim"),
    pytest.param((2, 2, 1, 4), (2, 2, 1, 4), torch.float64, None, id="dtype"),
    pytest.param((2, 2, 1, 4), (2, 2, 1, 4), torch.float32, [2, 0], id="counts-range"),
    pytest.param((2, 2, 1, 4), (2, 2, 1, 4), torch.float32, [1], id="counts-shape"),
]


@pytest.mark.parametrize("key_shape, value_shape, dtype, counts", BAD_APPENDS)
def test_bad_append_raises_and_changes_nothing(filled_cache, key_shape, value_shape, dtype, counts):
    cache = filled_cache
    before = (cache.keys.clone(), cache.values.clone(), cache.lengths.clone(), cache.capacity)
    key, value = torch.randn(key_shape, dtype=dtype), torch.randn(value_shape, dtype=dtype)
    with pytest.raises(ValueError):
        append(cache, key, value, None if counts is None else torch.tensor(counts))
    assert torch.equal(cache.keys, before[0]) and torch.equal(cache.values, before[1])
    assert torch.equal(cache.lengths, before[2]) and cache.capacity == before[3]


@pytest.mark.parametrize(
    "shape",
    [(3, 2, 1, 4), (2, 2, 1, 8), (2, 3, 1, 4)],
    ids=["batch", "head_dim", "heads-not-multiple"],
)
def test_incompatible_query_raises(filled_cache, shape):
    with pytest.raises(ValueError):
        attend(filled_cache, torch.randn(shape))


def test_query_of_another_dtype_raises(filled_cache):
    with pytest.raises(ValueError):
        attend(filled_cache, torch.randn(2, 2, 1, 4, dtype=torch.float16))


def test_attend_on_empty_cache_raises():
    with pytest.raises(ValueError):
        attend(KVCache(), torch.randn(1, 1, 1, 4))


def test_reset_forgets_and_accepts_another_shape(filled_cache):
    reset(filled_cache)
    assert filled_cache.keys is None and filled_cache.lengths is None and filled_cache.capacity == 0
    # Another batch, head count, head_dim and dtype.
    k, v, q = (torch.randn(1, 3, t, 8, dtype=torch.float64) for t in (2, 2, 1))
    append(filled_cache, k, v)
    assert_matches(attend(filled_cache, q), newest_token_reference(q, k, v), "after reset")


def test_released_slot_never_sees_the_old_sequence(filled_cache):
    release(filled_cache, 0)
    assert filled_cache.lengths.tolist() == [0, 3]
    k, v, q = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    append(filled_cache, k, v, torch.tensor([1, 0]))
    # A new one-token sequence attends only to itself: its output is its own value.
    assert_matches(attend(filled_cache, q)[0], v[0].double(), "new sequence in released slot")


class Layer(torch.nn.Module):
    def __init__(self, d_model=16, n_heads=4, n_kv_heads=2, head_dim=4, rope_base=10000.0):
        super().__init__()
        self.wq = torch.nn.Linear(d_model, n_heads * head_dim, bias=False)
        self.wk = torch.nn.Linear(d_model, n_kv_heads * head_dim, bias=False)
        self.wv = torch.nn.Linear(d_model, n_kv_heads * head_dim, bias=False)
        self.wo = torch.nn.Linear(n_heads * head_dim, d_model, bias=False)
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, head_dim
        self.rope_base = rope_base


def full_layer_forward(layer, x):
    """Uncached forward over the whole sequence x: [B, T, d_model], RoPE at positions 0..T-1."""
    batch, steps, _ = x.shape
    q = layer.wq(x).view(batch, steps, layer.n_heads, layer.head_dim).transpose(1, 2)
    k = layer.wk(x).view(batch, steps, layer.n_kv_heads, layer.head_dim).transpose(1, 2)
    v = layer.wv(x).view(batch, steps, layer.n_kv_heads, layer.head_dim).transpose(1, 2)
    positions = torch.arange(steps).expand(batch, steps)
    q, k = apply_rope(q, positions, layer.rope_base), apply_rope(k, positions, layer.rope_base)
    out = full_causal_attention(q, k, v).float().transpose(1, 2).reshape(batch, steps, -1)
    return layer.wo(out)


@torch.no_grad()
def test_decode_step_matches_full_forward_at_every_prefix():
    layer = Layer()
    x = torch.randn(2, 10, 16)
    expected = full_layer_forward(layer, x)
    cache = KVCache()
    for t in range(x.shape[1]):
        out = decode_step(layer, cache, x[:, t : t + 1])
        assert_matches(out, expected[:, t : t + 1], f"decode step {t}")
