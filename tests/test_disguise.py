"""graders.dense.disguise rewrites the reference into a correct implementation no test file can know
ahead of a grade: other private names, another order, no docstrings, ast.unparse's layout; the
contract's names and what the code computes unchanged."""

from __future__ import annotations

import ast
import textwrap
import types

import pytest
import torch

from graders.dense.disguise import disguise
from graders.dense.mistakes import MISTAKES
from graders.shared.mutation import REFERENCE

CONTRACT = (
    "KVCache",
    "append",
    "attend",
    "reset",
    "release",
    "reorder",
    "fork",
    "apply_rope",
    "decode_step",
)


def load(source: str) -> types.ModuleType:
    module = types.ModuleType("kv_cache")
    exec(compile(source, "<kv_cache>", "exec"), module.__dict__)
    return module


def test_the_same_seed_gives_the_same_disguise_and_another_seed_another():
    reference = REFERENCE.read_text()
    assert disguise(reference, 7) == disguise(reference, 7)
    assert disguise(reference, 7) != disguise(reference, 8)


@pytest.mark.parametrize("seed", [0, 7, 2026])
def test_private_names_locals_attributes_and_docstrings_change_and_the_contract_stays(seed):
    source = disguise(REFERENCE.read_text(), seed)
    module = load(source)
    assert all(hasattr(module, name) for name in CONTRACT)
    for private in ("_validate_append", "_reserve", "_next_power_of_two"):
        assert not hasattr(module, private), private
    names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    assert not {"scores", "weights", "past_end", "groups"} & names
    assert "k_storage" not in source and "requested_capacity" not in source
    assert module.attend.__doc__ is None and module.KVCache.__doc__ is None
    cache = module.KVCache(capacity=4)
    module.append(cache, torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    assert cache.keys.shape == (1, 1, 2, 4) and cache.lengths.tolist() == [2]
    assert cache.capacity == 4


def test_the_definitions_come_in_another_order_for_some_seeds():
    def order(source: str) -> list[str]:
        return [n.name for n in ast.parse(source).body if isinstance(n, ast.FunctionDef)]

    reference = order(disguise(REFERENCE.read_text(), 0))
    assert any(order(disguise(REFERENCE.read_text(), seed)) != reference for seed in range(1, 4))


@pytest.mark.parametrize("seed", [0, 7, 2026])
def test_the_disguise_computes_exactly_what_the_reference_does(seed):
    """Bit for bit: the same operations on the same tensors, for every function of the
    contract (ragged appends, GQA, release, reorder, fork, decode_step)."""
    outputs = []
    for module in (load(REFERENCE.read_text()), load(disguise(REFERENCE.read_text(), seed))):
        g = torch.Generator().manual_seed(1)
        cache = module.KVCache()
        module.append(
            cache,
            torch.randn(3, 2, 5, 8, generator=g),
            torch.randn(3, 2, 5, 8, generator=g),
            torch.tensor([5, 2, 0]),
        )
        query = torch.randn(3, 4, 1, 8, generator=g)  # GQA: 4 query heads on 2 kv heads
        first = module.attend(cache, query)
        module.release(cache, 1)
        module.reorder(cache, torch.tensor([0, 0, 2]))
        branch = module.fork(cache)
        torch.manual_seed(2)  # the same weights for both
        layer = types.SimpleNamespace(
            n_heads=4,
            n_kv_heads=2,
            head_dim=8,
            rope_base=10000.0,
            **{
                w: torch.nn.Linear(32, out, bias=False)
                for w, out in (("wq", 32), ("wk", 16), ("wv", 16), ("wo", 32))
            },
        )
        step = module.decode_step(layer, branch, torch.randn(3, 1, 32, generator=g))
        outputs.append((first, module.attend(cache, query), step, branch.lengths))
    for ours, theirs in zip(*outputs):
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_a_disguised_mistake_is_the_disguised_reference_but_for_its_mistake(mistake):
    """The same seed gives a mistake the reference's new names and order: the two differ
    where the mistake is, not in what a test could fingerprint."""
    for seed in range(4):
        reference, wrong = disguise(REFERENCE.read_text(), seed), disguise(mistake.source(), seed)
        compile(wrong, mistake.name, "exec")
        assert wrong != reference
        if mistake.name != "appends-on-heads":  # the others edit a line or two of attend, append
            changed = set(wrong.splitlines()) ^ set(reference.splitlines())
            assert 0 < len(changed) <= 4, (seed, changed)


def test_what_could_change_the_meaning_is_left_as_written():
    """Names a nested scope or a global statement shares, builtins and module names a
    comprehension could shadow, attributes a string names, and definitions whose decorators
    name each other keep their names and order."""
    source = textwrap.dedent("""\
        import functools
        _count = 0

        def counted(f):
            return f

        def outer(xs):
            total = 0
            def inner():
                return total
            return inner()

        def bumps():
            global _count
            _count += 1
            return _count

        def shadows(rows):
            return [len for len in rows]

        def named(box):
            box.slot = 1
            return getattr(box, "slot")

        @counted
        def one():
            return 1

        @functools.wraps(one)
        def two():
            return 2
    """)
    rewritten = disguise(source, 3)
    module = load(rewritten)
    assert module.outer([]) == 0 and module.bumps() == 1 and module.shadows([4]) == [4]
    assert module.named(types.SimpleNamespace()) == 1
    assert "total = 0" in rewritten and "global " in rewritten and "len for len" in rewritten
    assert "box.slot = 1" in rewritten
    assert rewritten.index("def one") < rewritten.index("def two")
