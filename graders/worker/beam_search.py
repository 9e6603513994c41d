"""The worker side of `beam-reorder`: a cached beam search through the candidate's functions.

Trusted code, run in the worker as the plan operation ``beam_search``. It builds the judge's
decoder (graders/dense/decoder.py) in float32: the token embedding, the MLP and the tied head are
computed here, each layer's attention is the candidate's `decode_step` on that layer's own
`KVCache`, and after every choice of beams the candidate's `reorder` is called on every layer's
cache with the same indices. It returns what it chose; the judge checks every choice against its
own uncached float64 search and trusts nothing here for the verdict.

Operation fields: weights {"embed", "layers": [{wq, wk, wv, wo, w1, w2}]}, prompt int64 [P],
beams, steps, n_heads, n_kv_heads, head_dim, rope_base. Result: tokens, beam_idx (int64) and
scores (float32), each [steps, beams]: at step s, new beam j continues old beam beam_idx[s, j]
with token tokens[s, j], and scores[s, j] is its summed log-probability.
"""

from __future__ import annotations

import torch

from graders.worker.layer import Layer


def mlp(h: torch.Tensor, layer: dict) -> torch.Tensor:
    """The feed-forward block, in h's dtype: w2 tanh(w1 h). h [..., d_model]."""
    return torch.tanh(h @ layer["w1"].to(h.dtype).T) @ layer["w2"].to(h.dtype).T


@torch.no_grad()
def beam_search(state, op: dict) -> dict:

    w, beams = op["weights"], op["beams"]
    layers = [
        Layer(
            {k: layer[k] for k in ("wq", "wk", "wv", "wo")},
            op["n_heads"],
            op["n_kv_heads"],
            op["head_dim"],
            op["rope_base"],
        ).requires_grad_(False)
        for layer in w["layers"]
    ]
    new_cache, decode_step, reorder = (
        state.fn("KVCache"),
        state.fn("decode_step"),
        state.fn("reorder"),
    )
    caches = [new_cache() for _ in layers]

    def next_log_probs(tokens: torch.Tensor) -> torch.Tensor:  # tokens [B] -> [B, vocab]
        h = w["embed"][tokens][:, None]  # [B, 1, d_model]
        for layer, cache, weights in zip(layers, caches, w["layers"]):
            out = decode_step(layer, cache, h)
            if not isinstance(out, torch.Tensor) or out.shape != h.shape:
                raise TypeError(
                    f"decode_step returned {type(out).__name__} "
                    f"{list(getattr(out, 'shape', []))}, expected {list(h.shape)}"
                )
            h = h + out
            h = h + mlp(h, weights)
        return torch.log_softmax(h[:, 0] @ w["embed"].T, dim=-1)

    for token in op["prompt"][:-1]:
        next_log_probs(token[None])
    log_probs = next_log_probs(op["prompt"][-1:])  # [1, vocab]: one row until the first choice
    scores = torch.zeros(1)
    chosen = {"tokens": [], "beam_idx": [], "scores": []}
    for step in range(op["steps"]):
        if step:
            for cache in caches:
                reorder(cache, chosen["beam_idx"][-1])
            log_probs = next_log_probs(chosen["tokens"][-1])
        vocab = log_probs.shape[-1]
        scores, flat = (scores[:, None] + log_probs).flatten().topk(beams)
        chosen["beam_idx"].append(flat // vocab)
        chosen["tokens"].append(flat % vocab)
        chosen["scores"].append(scores)
    return {name: torch.stack(values) for name, values in chosen.items()}
