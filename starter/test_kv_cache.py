"""Your own tests for kv_cache.py. Run them in the folder that holds both files (the workspace
`kata init` made): `python -m pytest -q test_kv_cache.py`.

`kata grade`, run in the same folder, runs them against its reference solution, where they must
pass, and against its bundled wrong implementations, which they should catch. They fail with
NotImplementedError until you implement kv_cache.py; that is expected.
"""

import torch
from kv_cache import KVCache, append


def test_append_grows_the_time_dimension():
    cache = KVCache()
    append(cache, torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4))
    append(cache, torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert cache.keys.shape == cache.values.shape == (1, 2, 4, 4)
    assert cache.lengths.tolist() == [4]


# TODO: a shape check like the one above catches almost nothing. A good test compares values:
#   - Write an independent full causal attention in float64 (scores, causal mask, softmax, @ v)
#     for queries [B, Hq, T, D] and keys/values [B, Hkv, T, D].
#   - Append one token at a time and compare attend's output for the newest query with that
#     token's row of the full forward at EVERY prefix, not only the last one.
#   - Ragged rows: append with counts (e.g. tensor([5, 2, 0])) and check that each row matches
#     full attention over its own sequence only.
#   - Also: incompatible appends raise ValueError and leave the cache unchanged; reset; release.
