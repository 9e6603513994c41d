"""Wrong paged caches: how attend reads the pool, where append writes, and int8 storage.

Each is solutions/paged_kv_cache.py (or, where named, tests/implementations/paged_vllm.py) with
one mistake candidates make; `fails` lists exactly the serving items it fails (all seven are
graded). paged-cow, paged-free and admission show up only where the mistake breaks what they
check too (their scripts send all-zero keys, so attention there is a plain average and blind to
scaling and head mapping).
"""

from pathlib import Path

from graders.shared.mutation import PAGED_REFERENCE, Mutant
from tests.wrong import wrong_serving

# tests/implementations/paged_vllm.py gathers padded block tables: block 0 stands in for blocks a
# row does not have, and what it holds (NaN, where never written) must be zeroed before use.
PAGED_VLLM = Path(__file__).resolve().parent.parent / "implementations" / "paged_vllm.py"
ZEROED_PADDING = "        values = torch.where(valid[:, :, None, None], values, 0.0)\n"

# Lines of solutions/paged_kv_cache.py that the mutants change.
PADDED = "padded = [t + [0] * (width - len(t)) for t in tables]"
PAST_END = "past_end = torch.arange(width * bs, device=self.device) >= lengths[:, None]"
GROUPED = "q = query.reshape(n, 1, self.kv_heads, groups, head_dim).float()"
OUT = "return out.reshape(n, q_heads, 1, head_dim).to(query.dtype)"
SCALED = "scores = q @ keys.transpose(-1, -2) / math.sqrt(head_dim)"
EMPTY = "weights = weights.masked_fill((lengths == 0)[:, None, None, None], 0.0)"
SLOTS = "slots = pos % bs"
ZERO_GUARD = "        s = torch.where(s > 0, s, torch.ones_like(s))\n"
NO_SCALES = "self.k_scale = self.v_scale = None"
STORED = "stored = torch.int8 if quantize else dtype"
TO_INT8 = ".round().clamp(-127, 127).to(torch.int8)"
DEQUANT = "            x.mul_(scale.index_select(0, rows)[..., None])"

CONTIGUOUS = "padded = [[t[0] + i for i in range(len(t))] + [0] * (width - len(t)) for t in tables]"
WHOLE_BLOCKS = """held = torch.tensor([len(t) * self.block_size for t in tables], device=self.device)
        past_end = torch.arange(width * bs, device=self.device) >= held[:, None]  # [N, T]"""
FLAT_ROW = "blocks, slots = blocks + pos // bs, pos % bs  # flat row table[p // bs] * bs + p"
BLOCK_SCALE = (
    ZERO_GUARD
    + """\
        first = slots == 0  # a block's first write sets the scale of all its slots
        scale[blocks[first], :, 0] = s[first]
        s = scale[blocks, :, 0]
"""
)
FIRST_TOKEN_SCALE = (
    ZERO_GUARD
    + """\
        s = self.first_scale.setdefault(id(pool), s[0]).expand_as(s)  # the first token's, [Hkv]
"""
)


def _mutant(name: str, description: str, *replace: tuple[str, str]) -> Mutant:
    return Mutant(name, description, replace=replace, base=PAGED_REFERENCE)


WRONG = [
    wrong_serving(
        _mutant(
            "paged-sorted-blocks",
            "attend gathers a sequence's blocks in id order (a sorted table), not in table order",
            (PADDED, "padded = [sorted(t) + [0] * (width - len(t)) for t in tables]"),
        ),
        fails={"paged-equivalence", "paged-block-table"},
    ),
    wrong_serving(
        _mutant(
            "paged-contiguous-blocks",
            "attend assumes a sequence's blocks are contiguous: it reads "
            "table[0], table[0] + 1, ...",
            (PADDED, CONTIGUOUS),
        ),
        fails={"paged-equivalence", "paged-block-table", "paged-cow"},
    ),
    wrong_serving(
        _mutant(
            "paged-stale-slots",
            "attend masks by whole blocks: the unwritten (or stale, from a freed "
            "sequence) slots of the last block are attended",
            (PAST_END, WHOLE_BLOCKS),
        ),
        fails={"paged-equivalence", "paged-block-table", "paged-cow", "quantized-kv"},
    ),
    wrong_serving(
        _mutant(
            "paged-gqa-modulo",
            "query head h reads KV head h % Hkv (heads interleaved), not h // (Hq // Hkv)",
            (
                GROUPED,
                "q = query.reshape(n, 1, groups, self.kv_heads, head_dim).transpose(2, 3).float()",
            ),
            (OUT, "return out.transpose(1, 2).reshape(n, q_heads, 1, head_dim).to(query.dtype)"),
        ),
        fails={"paged-equivalence"},
    ),
    wrong_serving(
        _mutant(
            "paged-no-scale",
            "scores are not scaled by 1/sqrt(head_dim)",
            (SCALED, "scores = q @ keys.transpose(-1, -2)  # [N, W, Hkv, G, bs], float32"),
        ),
        fails={"paged-equivalence", "paged-block-table", "quantized-kv"},
    ),
    wrong_serving(
        _mutant(
            "paged-empty-nan",
            "a sequence of length 0 gets a softmax over nothing: NaN, not zeros",
            (EMPTY, "pass  # every sequence has positions (not so)"),
        ),
        fails={"paged-equivalence"},
    ),
    wrong_serving(
        _mutant(
            "paged-slot-p",
            "append writes position p at slot p of block table[p // block_size], "
            "not slot p % block_size: the flat row table[p // bs] * bs + p, past the block's end "
            "(in the blocks after it, or past the pool: IndexError)",
            (SLOTS, FLAT_ROW),
        ),
        fails={
            "paged-equivalence",
            "paged-block-table",
            "paged-cow",
            "paged-free",
            "admission",
            "quantized-kv",
        },
    ),
    wrong_serving(
        _mutant(
            "int8-block-scale",
            "int8 with one scale per block and head, set by the block's first "
            "write: later, larger tokens in the block are clipped",
            (ZERO_GUARD, BLOCK_SCALE),
        ),
        fails={"quantized-kv"},
    ),
    wrong_serving(
        _mutant(
            "int8-first-token-scale",
            "int8 with one scale per head taken from the first token "
            "written, reused for every later token",
            (NO_SCALES, NO_SCALES + "\n        self.first_scale = {}"),
            (ZERO_GUARD, FIRST_TOKEN_SCALE),
        ),
        fails={"quantized-kv"},
    ),
    wrong_serving(
        _mutant(
            "int8-stored-float32",
            "quantizes and dequantizes, but keeps the pool in float32: no memory saved",
            (STORED, "stored = torch.float32 if quantize else dtype"),
            (TO_INT8, ".round().clamp(-127, 127)  # int8 values, kept as floats"),
        ),
        fails={"quantized-kv"},
    ),
    wrong_serving(
        _mutant(
            "int8-no-dequant-scale",
            "attend uses the int8 values without multiplying by their scales",
            (DEQUANT, "            pass  # the int8 values are used as they are"),
        ),
        fails={"quantized-kv"},
    ),
    wrong_serving(
        Mutant(
            "paged-padding-read",
            "attend gathers padded block tables and masks the scores, but "
            "multiplies the padding's values (block 0, never written: NaN) by their weights of 0",
            replace=((ZEROED_PADDING, ""),),
            base=PAGED_VLLM,
        ),
        fails={"paged-equivalence", "paged-block-table", "paged-cow", "paged-free", "quantized-kv"},
    ),
]
