"""A minimal candidate: the reference forward with gate and up projections fused into one matmul.

    polyinfer verify examples/fused_mlp_candidate.py
    polyinfer bench --traffic chat --tier fast --candidate examples/fused_mlp_candidate.py

`build(ctx)` runs once at swap time: it may derive weights (here one [2*intermediate, hidden] matrix per
layer) but must not allocate KV memory. The returned callable gets a `Batch` every step and returns
float logits for `batch.logits_indices`; everything but the MLP is inherited from the reference.
"""

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward

KNOBS = {}


class FusedMLP(ReferenceForward):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.gate_up = [torch.cat([w.gate_proj, w.up_proj]) for w in ctx.weights.layers]

    def mlp(self, i, lw, h):
        gate, up = F.linear(h, self.gate_up[i]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, lw.down_proj)


def build(ctx):
    return FusedMLP(ctx)
