"""Measure how far correct implementations land from the judge's reference, to set tolerances.

    python -m graders.shared.tolerances

Correct implementations (trusted code, imported here in-process; a candidate's file never is):
the reference solution, the concat baseline, and two other styles of `attend` over the
reference's cache: the weights multiplied with float32 values (no rounding of the weights), and
torch's scaled_dot_product_attention in the cache's dtype. Each decodes the public cases' shapes
one token at a time (the public seed and EXTRA_SEEDS more), and every prefix is compared with
graders.shared.reference.causal_attention (float64, from the same inputs: low-precision inputs upcast
exactly). Printed per dtype, case and style: the max abs error, the worst error in units of
eps * (1 + |expected|), and the share of the tolerance in use the worst element takes (its inverse
is the margin). One mistake is measured alongside (two variants), to show what still fails.

Measured (torch 2.13 CPU, 51 seeds per case; "share" is the worst error / the tolerance):
    float32   max abs 6.4e-07 (3.1 float32 eps), share of 1e-5 + 1e-4*|expected| 0.029 (34x)
    float64   max abs 5.9e-07, share 0.033 of the float32 tolerance: the contract's softmax runs in
              float32, so a float64 cache is only as exact as float32, and
              compare.TOLERANCE[float64] is float32's (a float64-sized one, 1e-10 + 1e-8, would
              fail every correct implementation that follows the contract).
    bfloat16  ordinary 1.6e-02 (0.65 eps), share 0.17 (6x); low-precision's case 0.13 (7x)
              large logits 1.3e-02 (0.61 eps), share 0.095 (10x)
    float16   ordinary 2.1e-03 (0.79 eps), share 0.19 (5x); low-precision's case 0.14 (7x)
              large logits 5.7e-03 (4.3 eps: float32 scores of ~80000 before the 1/sqrt(D) scale
              carry ~1e-2 of rounding), share 0.084 (12x)
The float32-softmax reference (scores and softmax in float32 from the same low-precision inputs)
differs from the float64 one by at most 5.3e-07 on ordinary inputs, nothing beside the rounding
of a low-precision output (half an ulp: 0.5 eps relative); at logits near 20000 it is itself off
by 2.7e-03 (its scores are float32). So the judge keeps one reference, float64, and the
low-precision tolerances cover the output rounding.

Chosen (graders/shared/compare.py; an element passes when its error <= atol + rtol*|expected|):
    bfloat16      3e-2 + 3e-2*|expected|   (3.8 eps)
    float16       4e-3 + 4e-3*|expected|   (4.1 eps)
    large logits  5e-2 + 5e-2*|expected|, both dtypes
The mistake, scores and softmax in the cache's dtype, gives NaN (fp16, unscaled) or errors of
~3.4 (bf16; fp16 with q scaled first) at large logits, 29-33x the tolerance; on ordinary inputs
it stays within 2.2 eps (share 0.54): not detectable there, and not claimed.
"""

from __future__ import annotations

import importlib.util
import math

import torch
import torch.nn.functional as F

from graders.shared import bundled, cases, reference
from graders.shared.compare import LARGE_LOGITS_LOW_PRECISION, TOLERANCE

EXTRA_SEEDS = 50
DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)
LOW_PRECISION = (torch.bfloat16, torch.float16)
SHAPES = [  # case, B, Hq, Hkv, T, D, public seed: prefix-equivalence's and gqa's public shapes
    ("prefix-equivalence", 2, 4, 4, 12, 16, 0),
    ("gqa 6/2", 2, 6, 2, 7, 8, 700),
    ("gqa 12/4", 2, 12, 4, 7, 8, 701),
    ("mqa 4/1", 2, 4, 1, 7, 8, 702),
]
# low-precision's public cases (graders/dense/items/low_precision.py), per dtype from one seed: an
# ordinary sequence [B, H, T, D], then q and k of logits near LOGIT, a few SPREADs apart.
LOW_PRECISION_SEEDS = {torch.bfloat16: 600, torch.float16: 601}
LP_B, LP_H, LP_T, LP_D, LP_LARGE_H, LP_LARGE_T, LOGIT, SPREAD = 2, 4, 12, 16, 2, 8, 20000.0, 3.0


def _load(name: str):
    path = bundled.SOLUTIONS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"tolerances_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _decoder(module, attend=None):
    """A function decoding seq one token at a time through `module`'s cache (attending with
    `attend` if given) and returning every step's output, [B, Hq, T, D]."""

    def run(seq: dict) -> torch.Tensor:
        cache, outputs = module.KVCache(), []
        for t in range(seq["k"].shape[2]):
            module.append(cache, seq["k"][:, :, t : t + 1], seq["v"][:, :, t : t + 1])
            query = seq["q"][:, :, t : t + 1]
            outputs.append((attend or module.attend)(cache, query))
        return torch.cat(outputs, dim=2)

    return run


def _expanded(cache, query):
    """keys and values [B, Hq, T, D] of an unragged cache, KV heads repeated for the query heads."""
    group = query.shape[1] // cache.keys.shape[1]
    return cache.keys.repeat_interleave(group, 1), cache.values.repeat_interleave(group, 1)


def _float32_product(cache, query):
    keys, values = _expanded(cache, query)
    scores = query.float() @ keys.float().transpose(-1, -2) / math.sqrt(query.shape[-1])
    return (torch.softmax(scores, dim=-1) @ values.float()).to(query.dtype)


def _sdpa(cache, query):
    return F.scaled_dot_product_attention(query, *_expanded(cache, query))


def _softmax_in_cache_dtype(cache, query, prescale=False):  # a mistake
    keys, values = _expanded(cache, query)
    scale = 1 / math.sqrt(query.shape[-1])
    scores = (query * scale if prescale else query) @ keys.transpose(-1, -2)
    scores = scores if prescale else scores * scale
    return torch.softmax(scores, dim=-1) @ values


def _float32_reference(seq: dict) -> torch.Tensor:
    """Full causal attention with float32 scores and softmax, from the same inputs."""
    q, k, v = (seq[n].float() for n in "qkv")
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    T = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _cases(dtype: torch.dtype):
    """(case, tolerance, [seq per seed]) for `dtype`: the public seed, then EXTRA_SEEDS more."""
    extra, other = range(10_000, 10_000 + EXTRA_SEEDS), range(20_000, 20_000 + EXTRA_SEEDS)
    tol = TOLERANCE[dtype]
    for name, B, Hq, Hkv, T, D, seed in SHAPES:
        yield (
            name,
            tol,
            [
                cases.sequence(cases.generator(s), B, Hq, Hkv, T, D, dtype=dtype)
                for s in (seed, *extra)
            ],
        )
    if dtype in LOW_PRECISION:
        g = cases.generator(LOW_PRECISION_SEEDS[dtype])
        ordinary = cases.sequence(g, LP_B, LP_H, LP_H, LP_T, LP_D, dtype=dtype)
        yield (
            "low-precision ordinary",
            tol,
            [ordinary]
            + [
                cases.sequence(cases.generator(s), LP_B, LP_H, LP_H, LP_T, LP_D, dtype=dtype)
                for s in other
            ],
        )
        yield (
            "low-precision large logits",
            LARGE_LOGITS_LOW_PRECISION,
            [_large_logits(g, dtype)] + [_large_logits(cases.generator(s), dtype) for s in extra],
        )


def _large_logits(g: torch.Generator, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return cases.large_logits(g, LP_B, LP_LARGE_H, LP_LARGE_T, LP_D, LOGIT, SPREAD, dtype)


def main() -> None:
    solution, baseline = _load("kv_cache"), _load("concat_kv_cache")
    styles = {
        "reference solution": _decoder(solution),
        "concat baseline": _decoder(baseline),
        "float32 product": _decoder(solution, _float32_product),
        "sdpa": _decoder(solution, _sdpa),
        "MISTAKE softmax in cache dtype": _decoder(solution, _softmax_in_cache_dtype),
        "MISTAKE the same, q scaled first": _decoder(
            solution, lambda cache, query: _softmax_in_cache_dtype(cache, query, prescale=True)
        ),
    }
    print(f"{'dtype':9} {'case':27} {'style':33} {'max abs':>8} {'eps units':>9} {'tol share':>9}")
    for dtype in DTYPES:
        eps = torch.finfo(dtype if dtype in LOW_PRECISION else torch.float32).eps
        for name, tol, seqs in _cases(dtype):
            expected = [reference.causal_attention(s["q"], s["k"], s["v"]) for s in seqs]
            for style, run in styles.items():
                abs_err = eps_units = share = 0.0
                for s, e in zip(seqs, expected):
                    err = (run(s).double() - e).abs().nan_to_num(math.inf)
                    abs_err = max(abs_err, float(err.max()))
                    eps_units = max(eps_units, float((err / (eps * (1 + e.abs()))).max()))
                    share = max(share, float((err / (tol.atol + tol.rtol * e.abs())).max()))
                print(
                    f"{str(dtype)[6:]:9} {name:27} {style:33} {abs_err:8.1e} {eps_units:9.2f} "
                    f"{share:9.3f}"
                )
            gap = max(
                float((_float32_reference(s).double() - e).abs().max())
                for s, e in zip(seqs, expected)
            )
            print(f"{str(dtype)[6:]:9} {name:27} {'float32-softmax reference':33} {gap:8.1e}")


if __name__ == "__main__":
    main()
