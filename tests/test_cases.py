"""`cases.randn` keeps its draws for the next grade in the same process, and a kept draw is the
same as drawing again: the same values, and the generator where drawing would leave it."""

from __future__ import annotations

import pytest
import torch

from graders.shared import cases


def drawn_directly(seed: int, *shape: int, dtype=torch.float32, scale=1.0):
    """What `cases.randn` gives from a fresh generator of `seed`, computed without it, and the
    generator after the draw."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype), g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_a_draw_met_again_is_the_same_as_drawing_again(dtype):
    for attempt in range(3):  # the first draws, the others meet it kept
        want, g_want = drawn_directly(11, 2, 3, 5, dtype=dtype, scale=0.5)
        g = cases.generator(11)
        got = cases.randn(g, 2, 3, 5, dtype=dtype, scale=0.5)
        assert got.dtype == dtype and torch.equal(got, want), f"attempt {attempt}"
        assert torch.equal(torch.randn(4, generator=g), torch.randn(4, generator=g_want)), (
            f"attempt {attempt}: the generator is not where the draw leaves it"
        )


def test_each_draw_of_a_sequence_is_its_own():
    g = cases.generator(5)
    first, second = cases.randn(g, 3), cases.randn(g, 3)
    g = cases.generator(5)
    assert torch.equal(cases.randn(g, 3), first) and torch.equal(cases.randn(g, 3), second)
    assert not torch.equal(first, second)


def test_writing_to_a_draw_changes_no_later_draw():
    cases.randn(cases.generator(7), 4).fill_(0.0)
    want, _ = drawn_directly(7, 4)
    assert torch.equal(cases.randn(cases.generator(7), 4), want)


def test_draws_past_the_bound_are_forgotten_least_recently_used_first(monkeypatch):
    monkeypatch.setattr(cases, "_kept", type(cases._kept)())
    monkeypatch.setattr(cases, "_kept_bytes", 0)
    state = len(cases.generator(0).get_state().numpy().tobytes())
    monkeypatch.setattr(
        cases, "KEPT_BYTES", 2 * (1024 * 8 + 2 * state)
    )  # two draws of 1024 float64
    for seed in [0, 1, 0, 2]:  # 0 met again, so 1 is the least recently used when 2 comes
        cases.randn(cases.generator(seed), 1024, dtype=torch.float64)
    kept = {
        seed
        for seed in range(3)
        if any(key[0] == cases.generator(seed).get_state().numpy().tobytes() for key in cases._kept)
    }
    assert kept == {0, 2}, kept
    want, _ = drawn_directly(0, 1024, dtype=torch.float64)
    assert torch.equal(cases.randn(cases.generator(0), 1024, dtype=torch.float64), want)


def test_exact_logits_are_exact_in_float32_and_sit_at_their_offsets():
    g = cases.generator(3)
    offsets = torch.tensor([[-30000, -12000], [0, 25000]])  # [B, H]
    q = cases.exact_queries(g, 2, 2, 1, D=16)  # [B, H, 1, D]
    k = cases.exact_keys(g, offsets, 50, D=16)  # [B, H, T, D]
    assert q.dtype == k.dtype == torch.float32 and k.shape == (2, 2, 50, 16)
    logits = (q @ k.transpose(-1, -2)) / 4  # float32, as a candidate computes them
    exact = (q.double() @ k.double().transpose(-1, -2)) / 4
    assert torch.equal(logits.double(), exact), "a float32 logit was rounded"
    # Off by the rounding of the large coordinate (half of 128 / 4), and 15 small products (1 each).
    off = (exact[:, :, 0] - offsets[..., None]).abs()
    assert (off <= 16 + 15).all(), f"a logit is {off.max():g} off its offset"
