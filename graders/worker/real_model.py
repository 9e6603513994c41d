"""The worker side of `real-model`: the candidate's cache inside a transformers Llama.

Trusted code, run as the plan operation ``real_model``. It builds the judge's tiny
`LlamaForCausalLM` (config and weights come in the operation: nothing is downloaded) and calls
`generate` with a `KataCache`, a transformers `Cache` whose layers (`KataLayer`, a
`CacheLayerMixin` each) call only the contract's names on one candidate `KVCache` per layer:

    the model's call                      the contract's function
    Cache.update (every forward)          append(cache, k, v)           keys after RoPE
    Cache.reorder_cache (beam search)     reorder(cache, beam_idx)
    Cache.crop(-n) (assisted decoding)    truncate(cache, lengths - n)  rejected drafts
    the attention, attention "candidate"  attend (one new token) or attend_chunk (a prompt,
                                          a verify round), registered with AttentionInterface
    the attention, attention "model"      the model's own sdpa over cache.keys / cache.values

The candidate's attention runs only where a batch has no padding (its `attend` has no padding
mask); a left-padded batch runs the model's attention, whose mask covers the padding. The
judge runs the same generation with transformers' own DynamicCache in a worker that holds no
candidate code (`reference`), and compares; nothing here judges.

transformers is imported inside the operation: a worker that never runs it never imports it.

Operation fields: model {"config": LlamaConfig fields, "weights": state dict}, assistant (the
same, or None), input_ids int64 [B, P], attention_mask int64 [B, P], mode "greedy" | "beam" |
"assisted", attention "candidate" | "model", new_tokens N, beams. Result: ``{"missing":
[names]}`` when the file lacks a name the item needs; ``{"mismatch": text, "calls"}`` when the
candidate's keys or values stopped matching what the model wrote (a failure the kata found,
not an exception of the candidate's); else sequences int64 [B, P + N], logits
float32 [N, rows, vocab] (rows: B, or B * beams for a beam search) and calls {name: count}.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from graders.worker.wire import TEXT_CHARS

NEEDS = ("KVCache", "append", "attend", "attend_chunk", "reorder", "truncate")
COUNTED = ("append", "attend", "attend_chunk", "reorder", "truncate")
ATTENTION = "kata"  # the name the candidate's attention is registered under


@torch.no_grad()
def real_model(state, op: dict) -> dict:
    """The candidate's cache in `generate` (the plan operation)."""
    missing = [name for name in NEEDS if not hasattr(state.module, name)]
    if missing:
        return {"missing": missing}
    contract = Contract(state.fn)
    if op["attention"] == "candidate" and not bool(op["attention_mask"].all()):
        raise AssertionError("the kata's plan: the candidate's attention on a padded batch")
    cache = _cache_class()(contract, op["attention"] == "candidate")
    try:
        with _active(cache):
            result = generate(op, cache)
    except Mismatch as exc:
        return {"mismatch": str(exc)[:TEXT_CHARS], "calls": dict(contract.calls)}
    return {**result, "calls": dict(contract.calls)}


def preload() -> None:
    """Import what `real_model` needs, ahead of its request: in a worker that serves this item
    alone, before the candidate's file, so that every forked child starts with it."""
    import transformers.generation.utils  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401

    _cache_class()


class Mismatch(Exception):
    """The candidate's cache holds what the model did not write (the kata's check, not an
    exception of the candidate's code): a failure, with the words to say it."""


@torch.no_grad()
def reference(op: dict) -> dict:
    """The same generation with transformers' DynamicCache and the model's own attention: run
    in the reference worker, which holds no candidate code."""
    from transformers import DynamicCache

    return generate({**op, "attention": "model"}, DynamicCache())


def generate(op: dict, cache) -> dict:
    """`generate` of op's model through `cache`: sequences [B, P + N], logits [N, rows, V]."""
    from transformers import GenerationConfig

    model = build(op["model"], ATTENTION if op["attention"] == "candidate" else "sdpa")
    beams = op["beams"] if op["mode"] == "beam" else 1
    config = GenerationConfig(  # no EOS: every run generates new_tokens tokens
        max_new_tokens=op["new_tokens"],
        do_sample=False,
        num_beams=beams,
        use_cache=True,
        output_logits=True,
        return_dict_in_generate=True,
        pad_token_id=0,
        eos_token_id=None,
        **({"early_stopping": False, "length_penalty": 0.0} if beams > 1 else {}),
    )
    assistant = build(op["assistant"], "sdpa") if op["mode"] == "assisted" else None
    out = model.generate(
        input_ids=op["input_ids"],
        attention_mask=op["attention_mask"],
        cache=cache,
        generation_config=config,
        assistant_model=assistant,
    )
    return {"sequences": out.sequences, "logits": torch.stack(out.logits).float()}


def build(spec: dict, attention: str):
    """The judge's Llama: its config, its weights, evaluation mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**spec["config"])
    config._attn_implementation = attention
    model = LlamaForCausalLM(config)
    model.load_state_dict(spec["weights"], strict=True)
    return model.eval().requires_grad_(False)


class Contract:
    """The candidate's functions, each call counted."""

    def __init__(self, fn):
        self.fn = fn
        self.calls = {name: 0 for name in COUNTED}

    def __call__(self, name: str, *args):
        self.calls[name] += 1
        return self.fn(name)(*args)

    def new(self):
        return self.fn("KVCache")()


_ACTIVE = []  # the KataCache of the generate running now: its attention reads it


@contextmanager
def _active(cache):
    _ACTIVE.append(cache)
    try:
        yield
    finally:
        _ACTIVE.pop()


def candidate_attention(
    module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs
):
    """The candidate's attend (t == 1) or attend_chunk (t > 1) over layer `module.layer_idx`'s
    cache, as transformers calls an attention: query [B, Hq, t, D] after RoPE -> [B, t, Hq, D].
    `key`, `value` (what update returned) and the mask (None: no mask function is registered
    for this attention, and the batch has no padding) are not needed."""
    layer = _ACTIVE[-1].layers[module.layer_idx]
    t = query.shape[2]
    name = "attend" if t == 1 else "attend_chunk"
    out = layer.contract(name, layer.cache, query)
    if not isinstance(out, torch.Tensor) or out.shape != query.shape:
        raise TypeError(
            f"{name} returned {type(out).__name__} {list(getattr(out, 'shape', []))}"
            f", expected a tensor {list(query.shape)}"
        )
    return out.transpose(1, 2).contiguous(), None


def _cache_class():
    """KataCache and KataLayer, defined once transformers is imported (they subclass its types);
    the candidate's attention registered with AttentionInterface."""
    global _KATA_CACHE
    if _KATA_CACHE is None:
        _KATA_CACHE = _define()
    return _KATA_CACHE


_KATA_CACHE = None


def _define():
    from transformers import AttentionInterface
    from transformers.cache_utils import Cache, CacheLayerMixin

    AttentionInterface.register(ATTENTION, candidate_attention)

    class KataLayer(CacheLayerMixin):
        """One layer's candidate KVCache. `length` is the model's count of what it appended
        (less what it cropped): transformers' masks and positions come from it, never from
        the candidate's `lengths`."""

        is_sliding = False
        is_croppable = True

        def __init__(self, contract: Contract, own_attention: bool):
            super().__init__()
            self.contract, self.own_attention = contract, own_attention
            self.cache, self.length = None, 0

        def lazy_initialization(self, key_states, value_states) -> None:
            self.cache = self.contract.new()
            self.device = key_states.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            """append(cache, k, v): k, v [B, Hkv, t, D] after RoPE. Returns what the model's
            attention reads: the candidate's keys and values (unused by its own attention)."""
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            self.contract("append", self.cache, key_states, value_states)
            self.length += key_states.shape[-2]
            if self.own_attention:
                return key_states, value_states
            keys, values = self.cache.keys, self.cache.values  # [B, Hkv, T, D]
            for name, held in (("keys", keys), ("values", values)):
                if (
                    not isinstance(held, torch.Tensor)
                    or held.dim() != 4
                    or held.shape[-2] != self.length
                ):
                    raise Mismatch(
                        f"after append, cache.{name} is {type(held).__name__} "
                        f"{list(getattr(held, 'shape', []))}, where the model has written "
                        f"{self.length} positions of each row (contract: [B, Hkv, T, D], "
                        "T = max(lengths))"
                    )
            return keys, values

        def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
            return self.length + query_length, 0

        def get_seq_length(self) -> int:
            return self.length

        def get_max_length(self) -> int:
            return -1

        def reorder_cache(self, beam_idx) -> None:
            if self.length:
                self.contract("reorder", self.cache, beam_idx.to(torch.int64))

        def crop(self, tokens_to_remove: int) -> None:
            """transformers 5: crop(-n) drops the last n positions (a positive value, the 4.x
            absolute length, raises as DynamicLayer's does)."""
            if tokens_to_remove > 0:
                raise ValueError(f"crop({tokens_to_remove}): transformers 5 crops by -n")
            if tokens_to_remove == 0 or not self.is_initialized:
                return
            self.length = max(0, self.length + tokens_to_remove)
            rows = self.cache.lengths.shape[0]
            self.contract("truncate", self.cache, torch.full((rows,), self.length))

        def batch_select_indices(self, indices) -> None:
            self.reorder_cache(indices)

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.length:
                rows = self.cache.lengths.shape[0]
                self.reorder_cache(torch.arange(rows).repeat_interleave(repeats))

        def reset(self) -> None:
            if self.is_initialized:
                self.contract.fn("reset")(self.cache)
            self.length = 0

    class KataCache(Cache):
        """A transformers Cache of KataLayers, one added for each layer the model updates."""

        def __init__(self, contract: Contract, own_attention: bool):
            super().__init__(layers=[])
            self.contract, self.own_attention = contract, own_attention

        def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
            while len(self.layers) <= layer_idx:
                self.layers.append(KataLayer(self.contract, self.own_attention))
            return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    return KataCache
