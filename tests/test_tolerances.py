"""Every tolerance the judge compares with, pinned from both sides at the cases its items use.

For each kind (a cache dtype, large logits, int8), two checks on the item's own public cases:
- correct code lands within the share of the tolerance measured and written here (MEASURED):
  the reference solution decoded in-process in the case's dtype (trusted code; a candidate's file
  never runs here), or for int8 an independent quantize-dequantize, against the float64 reference;
- outputs built from the float64 reference, every element moved by 0.9x the bound the judge
  promises (each Kind's atol and rtol, written out here again) pass, and by 1.1x fail, element
  by element, through the tolerance object the item compares with.
So loosening a constant (1.1x passes) or tightening it (0.9x fails; correct code's share grows
past MEASURED * SLACK) fails a test here. quantized-kv's memory bound (0.3x) is pinned the same
way, at 0.3x and 0.301x. `python -m graders.shared.tolerances` is how the constants
were chosen, over 51 seeds (tests/test_tolerance_measurement.py).
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from graders.dense import decode_loop
from graders.dense.items import gqa, low_precision, prefix_equivalence, reset
from graders.dense.items import stable_softmax
from graders.serving.items import quantized_kv
from graders.shared import bundled, cases, reference
from graders.shared.compare import TOLERANCE, Tolerance, close, require_close
from graders.shared.plans import Fail, Plan, Results
from graders.shared.tracks import TRACKS

# How far correct code's measured share may grow before the test says the margin is gone: the
# measurements are deterministic on one machine; another BLAS may round a worst element apart.
SLACK = 1.5

Run = tuple[dict[str, torch.Tensor], tuple[int, ...]]  # a case's q, k, v and its appends


def _prefix_and_gqa_cases() -> list[Run]:
    return [
        (case.seq, case.appends)
        for case in (*prefix_equivalence._public_cases(), *gqa._public_cases())
    ]


def _reset_case() -> list[Run]:
    """reset's float64 batch after the reset: drawn after the float32 batch, as grade does."""
    g = cases.generator(70)
    old, new = reset.OLD, reset.NEW
    cases.sequence(g, old["B"], old["H"], old["H"], old["steps"], old["D"], old["dtype"])
    seq = cases.sequence(g, new["B"], new["H"], new["H"], new["steps"], new["D"], new["dtype"])
    return [(seq, (1,) * new["steps"])]


def _low_precision_case(dtype: torch.dtype, kind: str) -> Callable[[], list[Run]]:
    def run() -> list[Run]:
        seq = low_precision._case_inputs()[dtype, kind]
        return [(seq, (1,) * seq["k"].shape[2])]

    return run


def _stable_softmax_cases() -> list[Run]:
    """stable-softmax's three public cases, drawn in grade's order."""
    g = cases.generator(300)
    B, H, T, D = stable_softmax.B, stable_softmax.H, stable_softmax.T, stable_softmax.D
    seqs = [
        stable_softmax._aligned(g, sign=1.0),
        stable_softmax._aligned(g, sign=-1.0),
        cases.sequence(g, B, H, H, T, D, scale=40.0),
    ]
    return [(seq, (1,) * T) for seq in seqs]


@dataclass(frozen=True)
class Kind:
    """One tolerance as an item uses it: the object it compares with, the bound the judge
    promises (atol + rtol * |expected|), and the item's cases."""

    name: str
    tolerance: Tolerance
    atol: float
    rtol: float
    runs: Callable[[], list[Run]]


KINDS = [
    Kind("float32", prefix_equivalence.TOL, 1e-5, 1e-4, _prefix_and_gqa_cases),
    Kind("float64", TOLERANCE[torch.float64], 1e-5, 1e-4, _reset_case),
    Kind(
        "bfloat16",
        low_precision.TOLERANCE[torch.bfloat16],
        3e-2,
        3e-2,
        _low_precision_case(torch.bfloat16, "ordinary"),
    ),
    Kind(
        "float16",
        low_precision.TOLERANCE[torch.float16],
        4e-3,
        4e-3,
        _low_precision_case(torch.float16, "ordinary"),
    ),
    Kind(
        "large logits bfloat16",
        low_precision.LARGE_LOGIT_TOLERANCE,
        5e-2,
        5e-2,
        _low_precision_case(torch.bfloat16, "large logits"),
    ),
    Kind(
        "large logits float16",
        low_precision.LARGE_LOGIT_TOLERANCE,
        5e-2,
        5e-2,
        _low_precision_case(torch.float16, "large logits"),
    ),
    Kind(
        "large logits float32", stable_softmax.STABLE_TOLERANCE, 5e-3, 1e-3, _stable_softmax_cases
    ),
]
# Correct code's worst error as a share of the promised bound on the cases above (1 / margin),
# measured with torch 2.13 on CPU; graders/shared/compare.py states the same margins at its constants.
MEASURED = {
    "float32": 0.013,  # 4.1e-7 max abs: 80x
    "float64": 0.026,  # 4.3e-7: 39x (the softmax runs in float32 for a float64 cache too)
    "bfloat16": 0.10,  # 6.8e-3: 10x
    "float16": 0.096,  # 1.1e-3: 10x
    "large logits bfloat16": 0.095,  # 7.6e-3: 11x
    "large logits float16": 0.026,  # 2.6e-3: 39x
    "large logits float32": 0.031,  # 1.9e-4: 32x
    "int8": 0.24,  # 4.7e-3 of the values' magnitude: 4.2x
}
INT8_BOUND = 2e-2  # quantized-kv: max |error| / max |values| of the row's sequence


def _solution():
    spec = importlib.util.spec_from_file_location(
        "pinned_kv_cache", bundled.SOLUTIONS / "kv_cache.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SOLUTION = _solution()


def _decoded(seq: dict[str, torch.Tensor], appends: tuple[int, ...]) -> list[torch.Tensor]:
    """The reference solution's attend after each append, [B, Hq, 1, D] in the case's dtype."""
    cache, outputs, end = SOLUTION.KVCache(), [], 0
    for t in appends:
        SOLUTION.append(cache, seq["k"][:, :, end : end + t], seq["v"][:, :, end : end + t])
        end += t
        outputs.append(SOLUTION.attend(cache, seq["q"][:, :, end - 1 : end]))
    return outputs


def _expected(seq: dict[str, torch.Tensor], appends: tuple[int, ...]) -> list[torch.Tensor]:
    ends = torch.tensor(appends).cumsum(0).tolist()
    return [decode_loop.newest(seq, end) for end in ends]


def _moved(
    expected: torch.Tensor, factor: float, atol: float, rtol: float, seed: int
) -> torch.Tensor:
    """`expected` with every element moved by `factor` times atol + rtol * |expected|, up or
    down at random."""
    sign = torch.randint(0, 2, expected.shape, generator=torch.Generator().manual_seed(seed))
    return expected + (2.0 * sign - 1) * factor * (atol + rtol * expected.abs())


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_correct_code_sits_within_the_measured_share_of_each_tolerance(kind):
    share = 0.0
    for seq, appends in kind.runs():
        for got, expected in zip(_decoded(seq, appends), _expected(seq, appends)):
            assert got.dtype == seq["q"].dtype
            error = (got.double() - expected).abs()
            bound = kind.tolerance.atol + kind.tolerance.rtol * expected.abs()  # the judge's
            share = max(share, float((error / bound).max()))
            assert close(got, expected, kind.tolerance).all()
    assert share <= MEASURED[kind.name] * SLACK, (
        f"correct code uses {share:.3f} of the {kind.name} tolerance, measured "
        f"{MEASURED[kind.name]}: was the tolerance tightened?"
    )


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.name)
def test_an_output_just_inside_the_promised_bound_passes_and_just_outside_fails(kind):
    for n, (seq, appends) in enumerate(kind.runs()):
        expected = _expected(seq, appends)
        inside = [_moved(e, 0.9, kind.atol, kind.rtol, seed=n) for e in expected]
        outside = [_moved(e, 1.1, kind.atol, kind.rtol, seed=n) for e in expected]
        for step, e in enumerate(expected):
            assert close(inside[step], e, kind.tolerance).all(), f"0.9x failed at step {step}"
            assert not close(outside[step], e, kind.tolerance).any(), f"1.1x passed at {step}"
        require_close(inside, expected, kind.tolerance, case=kind.name)
        with pytest.raises(Fail, match=f"^{kind.name}: first differs at step 0"):
            require_close(outside, expected, kind.tolerance, case=kind.name)


def _int8_roundtrip(x: torch.Tensor) -> torch.Tensor:
    """x [Hkv, L, D] quantized to int8 with one scale per (head, token), absmax / 127, and back:
    float64."""
    x = x.double()
    scale = x.abs().amax(dim=-1, keepdim=True) / 127  # [Hkv, L, 1]
    return (x / scale.where(scale > 0, 1.0)).round().clamp(-127, 127) * scale


def test_correct_int8_attention_sits_within_the_measured_share_of_the_bound():
    share = 0.0
    for pool, _ in quantized_kv._public_cases(Plan(), 800).values():
        for read in pool.reads:
            for row, (keys, values) in enumerate(read.kv):
                got = reference.causal_attention(
                    read.query[row : row + 1],
                    _int8_roundtrip(keys)[None],
                    _int8_roundtrip(values)[None],
                )
                error = (got[0] - read.expected[row]).abs().max() / values.double().abs().max()
                share = max(share, float(error) / quantized_kv.BOUND)
    assert 0 < share <= MEASURED["int8"] * SLACK, f"correct int8 code uses {share:.3f} of BOUND"


@pytest.mark.parametrize("factor, fails", [(0.9, False), (1.1, True)])
def test_int8_attention_just_inside_the_bound_passes_and_just_outside_fails(factor, fails):
    pools = quantized_kv._public_cases(Plan(), 800)
    results = {}
    for pool, _ in pools.values():
        for n, read in enumerate(pool.reads):
            magnitude = torch.stack([v.double().abs().max() for _, v in read.kv])  # [rows]
            bound = factor * INT8_BOUND * magnitude[:, None, None, None]  # [rows, 1, 1, 1]
            sign = (
                2.0
                * torch.randint(
                    0, 2, read.expected.shape, generator=torch.Generator().manual_seed(n)
                )
                - 1
            )
            results[read.index] = read.expected + sign * bound
    if not fails:
        quantized_kv._check(results, pools)
        return
    with pytest.raises(Fail, match=r"2\.20e-02"):
        quantized_kv._check(results, pools)


# Tolerances pinned in a test of their own: real-model's logits need transformers, and its
# measurement runs generate (tests/test_real_model.py holds the band and the bound).
PINNED_ELSEWHERE = {"real_model.LOGITS": (1e-4, 1e-4)}


def test_every_tolerance_an_item_holds_is_one_pinned_here():
    pinned = {(kind.atol, kind.rtol) for kind in KINDS}
    held = {}
    for package in (track.items for track in TRACKS.values()):
        for info in pkgutil.iter_modules(importlib.import_module(package).__path__):
            module = importlib.import_module(f"{package}.{info.name}")
            for name, value in vars(module).items():
                if isinstance(value, Tolerance):
                    held[f"{info.name}.{name}"] = (value.atol, value.rtol)
    for name, bound in PINNED_ELSEWHERE.items():
        assert held.pop(name) == bound, name
    assert held and all(bound in pinned for bound in held.values()), held
    assert {(t.atol, t.rtol) for t in TOLERANCE.values()} <= pinned


class _Pools:
    """A candidate whose float32 and int8 pools report these pool_bytes (the plan: the two
    pools made, then pool_bytes of each)."""

    def __init__(self, float32: int, int8: int):
        self.sizes = (float32, int8)

    def run(self, plan: Plan) -> Results:
        return Results(values=[None, None, *self.sizes])


@pytest.mark.parametrize("ratio, fails", [(0.3, False), (0.301, True)])
def test_an_int8_pool_of_at_most_0_3x_the_float32_pools_bytes_passes(ratio, fails):
    """quantized-kv's memory bound (the contract's 0.3x for head_dim 64), at its public pool."""
    float32 = 4 * 2 * 32 * 16 * 4 * 64  # K and V, 32 blocks of 16 slots, 4 heads of 64
    pools = _Pools(float32, int(ratio * float32))
    if not fails:
        measured = quantized_kv._memory(pools, 32, 16, 4, 64, "a pool")
        assert measured == pytest.approx(ratio, abs=1e-5)
        return
    with pytest.raises(Fail, match=r"0\.30x"):
        quantized_kv._memory(pools, 32, 16, 4, 64, "a pool")
