"""The judge's small decoder, float64, and its uncached forwards: what cached decoding must equal.

Nothing here knows about caches or solutions. The model: a token embedding, then per layer
``h = h + attention(h)`` (graders.shared.reference.attention_layer: RoPE, causal, float64) and
``h = h + mlp(h)``, then a head tied to the embedding. The worker runs the same model in float32,
with the candidate's decode_step as the attention and its reorder between steps
(graders/worker/beam_search.py, where `mlp` lives); the judge recomputes every step from the whole
sequence, so nothing the candidate cached can reach its numbers.
"""

from __future__ import annotations

import torch

from graders.shared import cases, reference
from graders.worker.beam_search import mlp


def weights(
    g: torch.Generator,
    vocab: int,
    d_model: int,
    n_heads: int,
    n_kv_heads: int,
    head_dim: int,
    layers: int,
    d_ff: int,
) -> dict:
    """{"embed": [vocab, d_model], "layers": [{wq, wk, wv, wo, w1 [d_ff, d_model], w2}]}, float32."""
    return {
        "embed": cases.randn(g, vocab, d_model, scale=0.5),
        "layers": [
            {
                **cases.layer_weights(g, d_model, n_heads, n_kv_heads, head_dim),
                "w1": cases.randn(g, d_ff, d_model, scale=d_model**-0.5),
                "w2": cases.randn(g, d_model, d_ff, scale=d_ff**-0.5),
            }
            for _ in range(layers)
        ],
    }


def log_probs(
    w: dict, tokens: torch.Tensor, n_heads: int, n_kv_heads: int, rope_base: float
) -> torch.Tensor:
    """Uncached: log-probabilities of the next token after each row's whole sequence.

    tokens int64 [B, T] -> [B, vocab] float64, from a full forward over all T positions.
    """
    embed = w["embed"].double()
    h = embed[tokens]  # [B, T, d_model]
    for layer in w["layers"]:
        h = h + reference.attention_layer(h, layer, n_heads, n_kv_heads, rope_base)["out"]
        h = h + mlp(h, layer)
    return torch.log_softmax(h[:, -1] @ embed.T, dim=-1)
