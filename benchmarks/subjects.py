"""What `kata bench` steps: every subject makes decode steps from one shared history.

A decode step is what a decoder does per token and layer: append the newest key and value to the
cache, then attend the newest query over everything cached. Every subject of a cell starts from
the same T cached positions (`History`) and returns the attention output of each step, which the
runner checks once against float64 attention before it times anything.

Subjects:
    contract caches   a dense file (KVCache, append, attend: the bundled concat and preallocated
                      solutions, or a candidate's) or a serving file (PagedKVCache), used only
                      through the contract. A dense cache gets no capacity hint, as a decoder that
                      does not know its final length would call it.
    tiled, fused      the preallocated solution's cache with `tiled_attention`, or with
                      `fused_attention` compiled.
    tiled-paged,      the paged solution's pool with `tiled_paged_attention`, or with
    fused-paged       `fused_paged_attention` compiled.
    floors            bare attention over contiguous K and V (no cache around it) and the pure
                      read of K and V: what the machine does with no cache work at all.
    window            the preallocated solution's `KVCache(window=W)` (contract section 8),
                      filled a token at a time, against its floor: bare attention over the last
                      W positions. Its step attends W positions whatever T is.
    peers             Hugging Face transformers' DynamicCache and StaticCache with its own
                      scaled_dot_product_attention path, when transformers is installed.

Capacity. A cell of length T has capacity `capacity_for(T, steps)`: the next power of two above
every position the run writes. That is the capacity the preallocated solution's doubling reaches
by itself, and it is what StaticCache and the paged pools are given, so every peer holds the
same slots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from benchmarks.machine import Unavailable
from graders.worker.ops import reachable_tensors

BLOCK_SIZE = 16  # tokens per block of the paged caches (vLLM's default)


@dataclass(frozen=True)
class Shape:
    name: str
    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int


SHAPES = {
    "mha": Shape("mha", batch=1, q_heads=8, kv_heads=8, head_dim=128),
    "gqa": Shape("gqa", batch=1, q_heads=32, kv_heads=8, head_dim=128),
}


def capacity_for(length: int, steps: int) -> int:
    """Slots for a history of `length` positions and `steps` more: the next power of two."""
    return 1 << (length + steps - 1).bit_length()


@dataclass(frozen=True)
class History:
    """A cell's inputs, the same for every subject."""

    keys: Tensor  # [B, Hkv, T, D]: the T positions already cached
    values: Tensor  # [B, Hkv, T, D]
    new_key: Tensor  # [B, Hkv, 1, D]: what each step appends
    new_value: Tensor  # [B, Hkv, 1, D]
    query: Tensor  # [B, Hq, 1, D]: what each step attends with
    capacity: int
    window: int  # W of the windowed subjects: the newest query sees the last W positions

    @classmethod
    def random(
        cls,
        shape: Shape,
        dtype: torch.dtype,
        length: int,
        capacity: int,
        window: int,
        seed: int = 0,
    ):
        gen = torch.Generator().manual_seed(seed)
        b, hkv, d = shape.batch, shape.kv_heads, shape.head_dim

        def normal(*size):
            return torch.randn(*size, generator=gen).to(dtype)

        return cls(
            normal(b, hkv, length, d),
            normal(b, hkv, length, d),
            normal(b, hkv, 1, d),
            normal(b, hkv, 1, d),
            normal(b, shape.q_heads, 1, d),
            capacity,
            window,
        )

    def expected(self, appended: int, windowed: bool = False) -> Tensor:
        """The query's attention over the history and `appended` copies of the new token (over
        the last `window` of those positions if `windowed`), computed apart from every subject,
        in float64: [B, Hq, 1, D]."""
        keys = torch.cat([self.keys] + [self.new_key] * appended, dim=2).double()  # [B, Hkv, T', D]
        values = torch.cat([self.values] + [self.new_value] * appended, dim=2).double()
        if windowed:
            keys, values = (
                keys[:, :, -self.window :],
                values[:, :, -self.window :],
            )  # [B, Hkv, W, D]
        b, q_heads, _, d = self.query.shape
        q = self.query.double().reshape(b, keys.shape[1], -1, d)  # [B, Hkv, G, D]: h -> h // G
        weights = torch.softmax(
            q @ keys.transpose(-1, -2) / math.sqrt(d), dim=-1
        )  # [B, Hkv, G, T']
        return (weights @ values).reshape(b, q_heads, 1, d)


@dataclass
class Stepper:
    step: Callable[[], Tensor | None]  # one decode step: its output [B, Hq, 1, D] (None: no output)
    held_bytes: Callable[[], int]  # bytes of tensor storage the subject holds now
    appends: bool = True  # False for the floors: they attend over the history as it is
    quantized: bool = False  # int8 storage: judged by int8's error bound, not the dtype's
    windowed: bool = False  # attends the last `history.window` positions only


def storage_bytes(obj) -> int:
    """Bytes of the distinct tensor storages reachable from `obj` (a view counts its storage)."""
    storages = {}
    for _, tensor in reachable_tensors(obj):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
    return sum(storages.values())


# -- the floors ----------------------------------------------------------------------------------


def bare_attention(query: Tensor, keys: Tensor, values: Tensor) -> Tensor:
    """softmax(q·Kᵀ/√D)·V for the newest query: [B, Hq, 1, D] over [B, Hkv, T, D] -> [B, Hq, 1, D].

    The fewest framework calls that compute decode attention: two matmuls in the storage dtype
    (a float32 softmax between them), grouped heads by a reshape, no mask, no cache bookkeeping.
    """
    b, q_heads, _, d = query.shape
    kv_heads = keys.shape[1]
    q = query.reshape(b, kv_heads, q_heads // kv_heads, d)  # [B, Hkv, G, D]
    scores = (q @ keys.transpose(-1, -2)) / math.sqrt(d)  # [B, Hkv, G, T]
    weights = torch.softmax(scores.float(), dim=-1).to(values.dtype)
    return (weights @ values).reshape(b, q_heads, 1, d)


def bare(history: History) -> Stepper:
    keys, values = history.keys.clone(), history.values.clone()  # contiguous [B, Hkv, T, D]
    return Stepper(
        lambda: bare_attention(history.query, keys, values),
        lambda: storage_bytes((keys, values)),
        appends=False,
    )


def bare_window(history: History) -> Stepper:
    """Bare attention over the history's last W positions: the floor of a windowed step."""
    keys = history.keys[:, :, -history.window :].clone()  # contiguous [B, Hkv, min(T, W), D]
    values = history.values[:, :, -history.window :].clone()
    return Stepper(
        lambda: bare_attention(history.query, keys, values),
        lambda: storage_bytes((keys, values)),
        appends=False,
        windowed=True,
    )


def read_bound(history: History) -> Stepper:
    """Summing K and V reads each byte once and does next to no arithmetic: no attention over
    the same tensors can take less time than this."""
    keys, values = history.keys.clone(), history.values.clone()

    def step():
        keys.sum()
        values.sum()

    return Stepper(step, lambda: storage_bytes((keys, values)), appends=False)


# -- contract caches -----------------------------------------------------------------------------


def contract_cache(module, quantize: str | None = None) -> Callable[[History], Stepper]:
    """The builder for a contract file: dense (KVCache, append, attend) or paged (PagedKVCache)."""
    if hasattr(module, "PagedKVCache"):
        return lambda history: _paged(module, history, quantize)
    if all(hasattr(module, name) for name in ("KVCache", "append", "attend")):
        return lambda history: _dense(module, history)
    raise ValueError(
        "the file has neither the dense contract (KVCache, append, attend) "
        "nor the serving one (PagedKVCache)"
    )


def _dense(module, history: History) -> Stepper:
    cache = module.KVCache()
    module.append(cache, history.keys.clone(), history.values.clone())

    def step():
        module.append(cache, history.new_key, history.new_value)
        return module.attend(cache, history.query)

    return Stepper(step, lambda: storage_bytes(cache))


def windowed(module) -> Callable[[History], Stepper]:
    """The dense cache of `module` made with `window=W`, fed the history a token at a time (a
    decoder's steps: a chunk of t would keep W + t - 1 slots, not W)."""

    def build(history: History) -> Stepper:
        cache = module.KVCache(window=history.window)
        for p in range(history.keys.shape[2]):
            module.append(cache, history.keys[:, :, p : p + 1], history.values[:, :, p : p + 1])

        def step():
            module.append(cache, history.new_key, history.new_value)
            return module.attend(cache, history.query)

        return Stepper(step, lambda: storage_bytes(cache), windowed=True)

    return build


def _paged(module, history: History, quantize: str | None) -> Stepper:
    cache, sequences = _filled_pool(module, history, quantize)

    def step():
        for b in sequences:
            cache.append(b, history.new_key[b], history.new_value[b])  # [Hkv, 1, D]
        return cache.attend(sequences, history.query)

    return Stepper(step, lambda: storage_bytes(cache), quantized=quantize is not None)


def _filled_pool(module, history: History, quantize: str | None):
    """A PagedKVCache of `module` holding the history, one sequence a row; (cache, seq ids)."""
    batch, kv_heads, _, head_dim = history.keys.shape
    blocks = batch * -(-history.capacity // BLOCK_SIZE)  # each sequence may fill its capacity
    options = {"quantize": quantize} if quantize else {}
    cache = module.PagedKVCache(
        blocks, BLOCK_SIZE, kv_heads, head_dim, dtype=history.keys.dtype, **options
    )
    sequences = list(range(batch))
    for b in sequences:
        cache.add(b)
        cache.append(b, history.keys[b].clone(), history.values[b].clone())  # [Hkv, T, D]
    return cache, sequences


def fused(module) -> Callable[[History], Stepper]:
    """The dense cache of `module` with `fused_attention` compiled; Unavailable where
    torch.compile does not work (no C++ compiler, an unsupported platform)."""
    from benchmarks.fused_attention import compiled_attention

    return attend_with(module, compiled_attention())


def tiled(module) -> Callable[[History], Stepper]:
    """The dense cache of `module` with `tiled_attention` as its attend's math."""
    from benchmarks.tiled_attention import tiled_attention

    return attend_with(module, tiled_attention)


def attend_with(module, attention) -> Callable[[History], Stepper]:
    """The dense cache of `module`, attended by `attention(query, keys, values, lengths)` on its
    views (what its `attend` does once the query is validated)."""

    def build(history: History) -> Stepper:
        cache = module.KVCache()
        module.append(cache, history.keys.clone(), history.values.clone())

        def step():
            module.append(cache, history.new_key, history.new_value)
            return attention(history.query, cache.keys, cache.values, cache.lengths)

        return Stepper(step, lambda: storage_bytes(cache))

    return build


def tiled_paged(module, quantize: str | None) -> Callable[[History], Stepper]:
    """The paged cache of `module` with `tiled_paged_attention` as its attend's math."""
    from benchmarks.tiled_paged_attention import tiled_paged_attention

    return paged_with(module, tiled_paged_attention, quantize, scratch=True)


def fused_paged(module, quantize: str | None) -> Callable[[History], Stepper]:
    """The paged cache of `module` with `fused_paged_attention` compiled as its attend's math;
    Unavailable where torch.compile does not work."""
    from benchmarks.fused_paged_attention import compiled_paged_attention

    return paged_with(module, compiled_paged_attention(), quantize)


def paged_with(
    module, attention, quantize: str | None, scratch: bool = False
) -> Callable[[History], Stepper]:
    """The paged cache of `module` (int8 pools with `quantize`), attended by `attention(query,
    k_pool, v_pool, k_scale, v_scale, blocks, lengths)` on its pools, with the cache's
    `_scratch` after them if `scratch` (what its `attend` does once the query is validated)."""

    def build(history: History) -> Stepper:
        cache, sequences = _filled_pool(module, history, quantize)

        def step():
            for b in sequences:
                cache.append(b, history.new_key[b], history.new_value[b])  # [Hkv, 1, D]
            # What the step's attend does once the query is validated: the padded tables.
            tables = [cache.block_table(b) for b in sequences]
            width = max(len(table) for table in tables)
            blocks = torch.tensor([table + [0] * (width - len(table)) for table in tables])
            lengths = torch.tensor([cache.length(b) for b in sequences])
            kept = (cache._scratch,) if scratch else ()
            return attention(
                history.query,
                cache.k_pool,
                cache.v_pool,
                cache.k_scale,
                cache.v_scale,
                blocks,
                lengths,
                *kept,
            )

        return Stepper(step, lambda: storage_bytes(cache), quantized=quantize is not None)

    return build


# -- Hugging Face transformers -------------------------------------------------------------------


def hugging_face(kind: str) -> Callable[[History], Stepper]:
    """transformers' DynamicCache or StaticCache ("dynamic", "static") stepped the way its Llama
    attention does it with attn_implementation="sdpa"."""
    try:
        import transformers
        from transformers.integrations.sdpa_attention import sdpa_attention_forward
    except ImportError as exc:
        raise Unavailable(
            f"transformers is not installed ({exc.name}): pip install 'kvkata[bench]'"
        ) from None
    transformers.logging.set_verbosity_error()

    class Attention(torch.nn.Module):
        """What sdpa_attention_forward reads from a Llama attention layer."""

        def __init__(self, groups: int):
            super().__init__()
            self.num_key_value_groups, self.is_causal = groups, True

    def build(history: History) -> Stepper:
        _, q_heads, _, head_dim = history.query.shape
        kv_heads, length = history.keys.shape[1], history.keys.shape[2]
        layer = Attention(q_heads // kv_heads)
        if kind == "dynamic":
            cache = transformers.DynamicCache()
        else:
            config = transformers.LlamaConfig(
                num_hidden_layers=1,
                num_attention_heads=q_heads,
                num_key_value_heads=kv_heads,
                head_dim=head_dim,
                hidden_size=q_heads * head_dim,
            )
            cache = transformers.StaticCache(config=config, max_cache_len=history.capacity)
        cache.update(history.keys.clone(), history.values.clone(), 0)
        slots = torch.arange(history.capacity)
        position = length  # where the next token goes

        def step():
            nonlocal position
            keys, values = cache.update(history.new_key, history.new_value, 0)
            # One unpadded row: HF skips the mask of a dynamic cache. A static cache attends over
            # every slot, masked past the newest position ([1, 1, 1, capacity], True = attend).
            mask = None if kind == "dynamic" else (slots <= position)[None, None, None, :]
            position += 1
            out, _ = sdpa_attention_forward(
                layer, history.query, keys, values, mask, scaling=head_dim**-0.5, is_causal=False
            )
            return out.transpose(1, 2)  # HF returns [B, 1, Hq, D]

        return Stepper(step, lambda: storage_bytes(cache))

    return build
