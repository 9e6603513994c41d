"""HOSTILE: a cache whose state, read when its append raises, is as large as it can make it.

Every append sets `capacity` to 2 ** 80 and `lengths` to a tensor of a
million rows, then raises. The worker sends the state of a cache whose call raised, for the
message to name (graders/worker/ops.py): it must send neither as it is (a capacity past int64's
range is left out, lengths are cut to 64 rows), and the item's message must stay short.
"""

import torch


class KVCache:
    def __init__(self, capacity=None):
        self.capacity = 0
        self.lengths = self.keys = self.values = None


def append(cache, new_key, new_value, counts=None):
    cache.capacity = 2 ** 80
    cache.lengths = torch.arange(1_000_000)
    raise RuntimeError("no room")


def attend(cache, query):
    raise RuntimeError("nothing stored")


def reset(cache):
    pass


def release(cache, index):
    pass


def decode_step(layer, cache, x, counts=None):
    raise RuntimeError("no room")


def apply_rope(x, positions, base=10000.0):
    return x
