"""The figures of solutions/README.md's step "speculative decoding and sliding windows" (contract
section 8), measured on the reference solution: what verifying drafts costs against decoding
them one by one, what a rollback costs, what a chunk without its mask gets wrong, and what a
window saves. `kata bench` measures the windowed step against its floor in its own table.

    python -m benchmarks.section8        (from the repository; prints the figures and the CPU)

float32, B=1, 8 KV and query heads, head_dim 128 (the bench's MHA shape). Times are medians of
interleaved repetitions (benchmarks.timing), as the bench takes them.
"""

from __future__ import annotations

import math
import os
import time

import torch

from benchmarks import machine, timing
from benchmarks.subjects import storage_bytes
from graders.shared import bundled
from graders.worker.serve import import_file

PREFIX = 4096  # positions cached before the drafts
DRAFTS = 4  # drafts verified in one chunk (k)
LONG, WINDOW = 16384, 1024  # the window's run, and W
REPS = 41


def main() -> None:
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    kv = import_file(str(bundled.SOLUTIONS / "kv_cache.py"), "kata_section8_reference")
    gen = torch.Generator().manual_seed(0)

    def normal(*size):
        return torch.randn(*size, generator=gen)

    keys, values = normal(1, 8, LONG, 128), normal(1, 8, LONG, 128)  # [B, Hkv, T, D]
    drafts_k, drafts_v = normal(1, 8, DRAFTS, 128), normal(1, 8, DRAFTS, 128)
    query, chunk_query = normal(1, 8, 1, 128), normal(1, 8, DRAFTS, 128)
    with torch.inference_mode():
        cache = kv.KVCache()
        kv.append(cache, keys[:, :, :PREFIX].clone(), values[:, :, :PREFIX].clone())
        back = torch.tensor([PREFIX])

        def decode_one():  # a plain decode step: append a token, attend it, as the bench does
            kv.append(cache, drafts_k[:, :, :1], drafts_v[:, :, :1])
            kv.attend(cache, query)

        def verify_chunk():  # k drafts appended and verified in one call, then all rejected
            kv.append(cache, drafts_k, drafts_v)
            kv.attend_chunk(cache, chunk_query)
            kv.truncate(cache, back)

        full = kv.KVCache()
        kv.append(full, keys.clone(), values.clone())
        windowed = kv.KVCache(window=WINDOW)
        for p in range(LONG):
            kv.append(windowed, keys[:, :, p : p + 1], values[:, :, p : p + 1])

        def full_step():
            kv.append(full, drafts_k[:, :, :1], drafts_v[:, :, :1])
            kv.attend(full, query)

        def window_step():
            kv.append(windowed, drafts_k[:, :, :1], drafts_v[:, :, :1])
            kv.attend(windowed, query)

        calls = {
            "decode": decode_one,
            "verify": verify_chunk,
            "full": full_step,
            "window": window_step,
        }
        for call in calls.values():
            call()
        ms = {
            name: timing.Summary.of(seconds).median * 1e3
            for name, seconds in timing.interleaved(calls, REPS).items()
        }
        rollback_us = _truncate_seconds(kv, cache, drafts_k, drafts_v, back) * 1e6
        unmasked = _unmasked_error(
            keys[:, :, :PREFIX], values[:, :, :PREFIX], drafts_k, drafts_v, chunk_query
        )
        full_bytes, window_bytes = storage_bytes(full), storage_bytes(windowed)

    facts = machine.facts()
    print(f"{facts['cpu']}, {facts['torch_threads']} torch threads, torch {facts['torch']}")
    print(
        f"T={PREFIX}, k={DRAFTS} drafts: one decode step {ms['decode']:.3f} ms; verifying "
        f"the {DRAFTS} in one chunk {ms['verify']:.3f} ms ({ms['verify'] / ms['decode']:.2f}x "
        f"one step, against {DRAFTS}x decoded one by one)"
    )
    print(
        f"rolling the {DRAFTS} drafts back (truncate): {rollback_us:.0f} us, "
        f"{rollback_us / (ms['decode'] * 1e3):.0%} of a decode step; nothing copied"
    )
    print(
        f"a chunk without its causal mask: query 0 of {DRAFTS} sees {DRAFTS - 1} later "
        f"positions, max abs error {unmasked:.2e} against float64 attention"
    )
    print(
        f"T={LONG}: full cache step {ms['full']:.3f} ms, {full_bytes / 2**20:.0f} MiB held; "
        f"window W={WINDOW} step {ms['window']:.3f} ms "
        f"({ms['full'] / ms['window']:.1f}x faster), {window_bytes / 2**20:.0f} MiB held "
        f"({full_bytes / window_bytes:.0f}x less)"
    )


def _truncate_seconds(kv, cache, drafts_k, drafts_v, back) -> float:
    """The median seconds of `truncate` back to `back`, each after an untimed append of drafts."""
    seconds = []
    for _ in range(REPS):
        kv.append(cache, drafts_k, drafts_v)
        start = time.perf_counter()
        kv.truncate(cache, back)
        seconds.append(time.perf_counter() - start)
    return timing.Summary.of(seconds).median


def _unmasked_error(keys, values, drafts_k, drafts_v, query) -> float:
    """Max abs error of attention over the prefix and every draft (no causal mask) against the
    float64 causal attention of each query of the chunk."""
    k = torch.cat([keys, drafts_k], dim=2).double()  # [B, H, T + t, D]
    v = torch.cat([values, drafts_v], dim=2).double()
    t, length = query.shape[2], k.shape[2]
    scores = query.double() @ k.transpose(-1, -2) / math.sqrt(query.shape[3])  # [B, H, t, T + t]
    later = torch.arange(length)[None, :] > (length - t + torch.arange(t))[:, None]  # [t, T + t]
    causal = torch.softmax(scores.masked_fill(later, float("-inf")), dim=-1) @ v
    unmasked = torch.softmax(scores, dim=-1) @ v
    return float((unmasked - causal).abs().max())


if __name__ == "__main__":
    main()
