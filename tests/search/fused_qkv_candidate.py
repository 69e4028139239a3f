"""A candidate derived from the reference: the Q, K and V projections are fused into one matmul, with the
weights concatenated once at build time. What a good LLM reply holds in the agent tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward
from polyinfer.engine.candidate import SwapContext
from polyinfer.models.weights import LayerWeights


class FusedQKVForward(ReferenceForward):
    def __init__(self, ctx: SwapContext) -> None:
        super().__init__(ctx)
        self.qkv = []
        for lw in ctx.weights.layers:
            weight = torch.cat([lw.q_proj, lw.k_proj, lw.v_proj])
            bias = None
            if lw.q_bias is not None and lw.k_bias is not None and lw.v_bias is not None:
                bias = torch.cat([lw.q_bias, lw.k_bias, lw.v_bias])
            self.qkv.append((weight, bias))

    def project_qkv(self, i: int, lw: LayerWeights, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        spec = self.ctx.spec
        return F.linear(h, *self.qkv[i]).split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)


def build(ctx: SwapContext) -> FusedQKVForward:
    return FusedQKVForward(ctx)
