"""Wrong decode_step implementations that compute the right outputs the wrong way: the two
down-level tells the question names, which only `kv-only` can see. (The hidden states that
reprojects-the-prefix keeps are not reordered by `reorder`, so its beams break too.)"""

from __future__ import annotations

from graders.shared.mutation import Mutant
from tests.wrong import wrong

PROJECT_Q = "    q = layer.wq(x).view(batch, 1, heads, head_dim).transpose(1, 2)\n"
PROJECT_K = "    k = layer.wk(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)\n"
PROJECT_V = "    v = layer.wv(x).view(batch, 1, kv_heads, head_dim).transpose(1, 2)\n"
APPEND = "    append(cache, k, v, counts)\n"

WRONG = [
    wrong(
        Mutant(
            "caches-queries",
            "decode_step keeps every step's rotated query in the cache as well",
            replace=(
                (APPEND, APPEND + '    cache.queries = getattr(cache, "queries", []) + [q]\n'),
            ),
        ),
        fails={"kv-only"},
        tells={"caches-q"},
    ),
    wrong(
        Mutant(
            "reprojects-the-prefix",
            "decode_step keeps the hidden states and projects all of them "
            "with wk and wv at every step, keeping only the newest position's k and v",
            replace=(
                (
                    PROJECT_K + PROJECT_V,
                    '    hidden = getattr(cache, "hidden", None)\n'
                    "    cache.hidden = x if hidden is None else torch.cat((hidden, x), dim=1)\n"
                    "    steps = cache.hidden.shape[1]\n"
                    "    k = layer.wk(cache.hidden).view(batch, steps, kv_heads, head_dim)[:, -1:]"
                    ".transpose(1, 2)\n"
                    "    v = layer.wv(cache.hidden).view(batch, steps, kv_heads, head_dim)[:, -1:]"
                    ".transpose(1, 2)\n",
                ),
            ),
        ),
        fails={"kv-only", "beam-reorder"},
        tells={"recomputes-projections"},
    ),
    wrong(
        Mutant(
            "reprojects-the-prefix-fused",
            "decode_step projects all the kept hidden states at every "
            "step through one fused weight, wq, wk and wv concatenated (gpt-fast's wqkv)",
            replace=(
                (
                    PROJECT_Q + PROJECT_K + PROJECT_V,
                    '    hidden = getattr(cache, "hidden", None)\n'
                    "    cache.hidden = x if hidden is None else torch.cat((hidden, x), dim=1)\n"
                    "    wqkv = torch.cat((layer.wq.weight, layer.wk.weight, layer.wv.weight))\n"
                    "    q, k, v = torch.nn.functional.linear(cache.hidden, wqkv)[:, -1:].split(\n"
                    "        (heads * head_dim, kv_heads * head_dim, kv_heads * head_dim), dim=-1)\n"
                    "    q = q.view(batch, 1, heads, head_dim).transpose(1, 2)\n"
                    "    k = k.view(batch, 1, kv_heads, head_dim).transpose(1, 2)\n"
                    "    v = v.view(batch, 1, kv_heads, head_dim).transpose(1, 2)\n",
                ),
            ),
        ),
        fails={"kv-only", "beam-reorder"},
        tells={"recomputes-projections"},
    ),
]
