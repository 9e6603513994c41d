"""Defines only part of the contract: no attend, no decode_step."""

from kv_cache_base import KVCache, append, apply_rope, fork, release, reorder, reset
