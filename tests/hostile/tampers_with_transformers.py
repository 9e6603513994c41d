"""Correct to L6, wrong past it (truncate keeps the drafts, attend_chunk has no causal mask),
and at import tampers with what runs beside it in the real-model item's worker: @TAMPER@.

    adapter   the kata's adapter (graders.worker.real_model) is reachable from here: its
              generate is replaced by one through transformers' DynamicCache, and the calls
              it counts are forged to look like a cache that served every step
    generate  GenerationMixin.generate drops the cache it is given (the model then makes its
              own DynamicCache): the adapter's cache is never called
    weights   LlamaForCausalLM.load_state_dict scales every weight: the model is not the judge's

What it can gain is the real-model item's points (tests/test_real_model.py), never a level
(docs/decisions.md, "real-model runs beside the candidate's code").
"""

import torch

import kv_cache_base as _base

KVCache, append, attend, reset, release, decode_step, apply_rope, reorder, fork = (
    _base.KVCache, _base.append, _base.attend, _base.reset, _base.release, _base.decode_step,
    _base.apply_rope, _base.reorder, _base.fork)


def truncate(cache, lengths):  # keeps the drafts: nothing is dropped
    pass


def attend_chunk(cache, query):  # every query of the chunk sees the whole chunk
    t = query.shape[2]
    return torch.cat([attend(cache, query[:, :, i : i + 1]) for i in range(t)], dim=2)


TAMPER = "@TAMPER@"
if TAMPER == "adapter":
    from transformers import DynamicCache

    import graders.worker.real_model as _adapter

    _generate = _adapter.generate

    def _through_dynamic_cache(op, cache):
        for name in cache.contract.calls:
            cache.contract.calls[name] = 40
        return _generate({**op, "attention": "model"}, DynamicCache())

    _adapter.generate = _through_dynamic_cache
elif TAMPER == "generate":
    from transformers.generation.utils import GenerationMixin

    _original = GenerationMixin.generate

    def _without_the_cache(self, *args, cache=None, **kwargs):
        return _original(self, *args, **kwargs)

    GenerationMixin.generate = _without_the_cache
elif TAMPER == "weights":
    from transformers import LlamaForCausalLM

    _load = LlamaForCausalLM.load_state_dict

    def _scaled(self, weights, *args, **kwargs):
        return _load(self, {k: v * 1.5 for k, v in weights.items()}, *args, **kwargs)

    LlamaForCausalLM.load_state_dict = _scaled
