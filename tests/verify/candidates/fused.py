"""Honest: fuses the Q/K/V projections and the gate/up projections into single matrices at build time."""

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward


class FusedForward(ReferenceForward):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.qkv = []
        self.gate_up = []
        for lw in ctx.weights.layers:
            bias = None
            if lw.q_bias is not None:
                bias = torch.cat([lw.q_bias, lw.k_bias, lw.v_bias])
            self.qkv.append((torch.cat([lw.q_proj, lw.k_proj, lw.v_proj]), bias))
            self.gate_up.append(torch.cat([lw.gate_proj, lw.up_proj]))

    def project_qkv(self, i, lw, h):
        spec = self.ctx.spec
        return F.linear(h, *self.qkv[i]).split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)

    def mlp(self, i, lw, h):
        gate, up = F.linear(h, self.gate_up[i]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, lw.down_proj)


def build(ctx):
    return FusedForward(ctx)
