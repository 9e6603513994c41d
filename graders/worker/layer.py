"""The layer a plan's `layer` operation builds for the candidate's `decode_step`.

Trusted worker-side code: the four projections (wq, wk, wv, wo) as bias-free Linear layers
holding the judge's weights, and the head geometry, frozen. graders.worker.ops builds one per
`layer` operation; graders.worker.beam_search one per layer of its decoder.
"""

from __future__ import annotations

import torch


class Layer(torch.nn.Module):
    """What `decode_step` receives: the four projections and the head geometry."""

    def __init__(
        self, weights: dict, n_heads: int, n_kv_heads: int, head_dim: int, rope_base: float
    ):
        super().__init__()
        for name, weight in weights.items():
            out_features, in_features = weight.shape
            linear = torch.nn.Linear(in_features, out_features, bias=False, dtype=weight.dtype)
            linear.weight.data.copy_(weight)
            setattr(self, name, linear)
        self.n_heads, self.n_kv_heads, self.head_dim, self.rope_base = (
            n_heads,
            n_kv_heads,
            head_dim,
            rope_base,
        )
