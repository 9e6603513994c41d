"""The tiled paged step's math (benchmarks/tiled_paged_attention.py) against the judge's float64
attention: the same output whatever tile and block a length ends in, with blocks in any order,
stale slots holding NaN, and int8 pools scaled in the scores and weights instead of in the
values."""

from __future__ import annotations

import pytest
import torch

from benchmarks.tiled_paged_attention import tiled_paged_attention
from tests.test_fused_attention import newest_token_attention

BS = 4  # slots a block: small, so that a few tiles are a short cache (the bench's blocks hold 16)
TILE = 128 * BS  # positions a tile: tiled_paged_attention reads 128 blocks at a time
LENGTHS = [1, TILE - 1, TILE, TILE + 1, 2 * TILE + 37]


def paged(x: torch.Tensor, blocks: torch.Tensor, quantize: bool):
    """x [B, Hkv, T, D] (T = W * BS) in the blocks `blocks` [B, W] of a pool [num_blocks, Hkv, BS,
    D] with 3 blocks to spare, NaN in the blocks nobody holds; (pool, its scales or None, the
    float64 values the pool holds as [B, Hkv, T, D])."""
    batch, kv_heads, length, head_dim = x.shape
    as_blocks = x.view(batch, kv_heads, length // BS, BS, head_dim).transpose(
        1, 2
    )  # [B, W, Hkv, BS, D]
    pool = torch.full((blocks.numel() + 3, kv_heads, BS, head_dim), float("nan"))
    pool[blocks] = as_blocks
    if not quantize:
        return pool, None, x.double()
    scale = pool.abs().amax(-1) / 127  # [num_blocks, Hkv, BS]: one scale per token and head
    quantized = (pool / scale[..., None]).round().nan_to_num(0).to(torch.int8)
    held = quantized[blocks].double() * scale[blocks][..., None].double()  # [B, W, Hkv, BS, D]
    return quantized, scale, held.transpose(1, 2).reshape(x.shape)


def garbage_scratch(pool: torch.Tensor):
    """A `scratch(name, dtype, n)` as the cache's `_scratch` gives it: the same memory for a name
    from call to call, here full of NaN (or 77 in int8) before the function writes it."""
    buffers = {}

    def scratch(name: str, dtype: torch.dtype, n: int) -> torch.Tensor:
        if name not in buffers:
            fill = float("nan") if dtype.is_floating_point else 77
            buffers[name] = torch.full((n, *pool.shape[1:]), fill, dtype=dtype)
        return buffers[name][:n]

    return scratch


# Ragged rows, and a row of length 0, have slots past their length in every tile; rows of one
# length only in the last block, which may be the last of its tile (T = TILE - 1).
ROWS = {"ragged": lambda length: [length, length // 2, 0], "equal": lambda length: [length] * 3}


@pytest.mark.parametrize("quantize", [False, True], ids=["float32", "int8"])
@pytest.mark.parametrize("length", LENGTHS, ids=[f"T={t}" for t in LENGTHS])
@pytest.mark.parametrize("q_heads", [2, 8], ids=["mha", "gqa"])
@pytest.mark.parametrize("rows", ROWS.values(), ids=ROWS.keys())
def test_tiled_paged_attention_matches_float64_attention(rows, length, q_heads, quantize):
    gen = torch.Generator().manual_seed(length)
    width = -(-length // BS)  # blocks a row of `length` positions needs
    query = torch.randn(3, q_heads, 1, 16, generator=gen)
    keys, values = torch.randn(2, 3, 2, width * BS, 16, generator=gen)  # [B, Hkv, T, D] each
    lengths = torch.tensor(rows(length))
    stale = (torch.arange(width * BS) >= lengths[:, None])[:, None, :, None]  # [B, 1, T, 1]
    keys, values = keys.masked_fill(stale, float("nan")), values.masked_fill(stale, float("nan"))
    blocks = torch.randperm(3 * width + 3, generator=gen)[: 3 * width].view(3, width)  # any order
    k_pool, k_scale, held_keys = paged(keys, blocks, quantize)
    v_pool, v_scale, held_values = paged(values, blocks, quantize)
    got = tiled_paged_attention(
        query, k_pool, v_pool, k_scale, v_scale, blocks, lengths, garbage_scratch(k_pool)
    )
    want = newest_token_attention(
        query, held_keys.nan_to_num(0), held_values.nan_to_num(0), lengths
    )
    # float32 against float64 over at most 1061 positions: the error measured is below 1e-6.
    assert torch.isfinite(got).all(), "a stale slot's NaN reached the output"
    assert (got.double() - want).abs().max() < 1e-5, (got.double() - want).abs().max()
