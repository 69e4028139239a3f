"""Fused weight layouts built once at swap time: one matrix for Q, K and V, one for gate and up."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from polyinfer.models.weights import LayerWeights

Linear = Callable[..., torch.Tensor]  # (x, weight, bias=None) -> x @ weight.T (+ bias)


@dataclass(frozen=True, slots=True)
class FusedLayer:
    """A layer's projections with QKV and/or gate-up concatenated along the output dimension."""

    w: LayerWeights
    qkv: torch.Tensor | None  # [q + 2 kv, hidden]
    qkv_bias: torch.Tensor | None
    gate_up: torch.Tensor | None  # [2 intermediate, hidden]
    q_size: int
    kv_size: int

    @classmethod
    def build(cls, w: LayerWeights, q_size: int, kv_size: int, fuse_qkv: bool, fuse_gate_up: bool) -> FusedLayer:
        qkv = torch.cat([w.q_proj, w.k_proj, w.v_proj]) if fuse_qkv else None
        bias = None
        if fuse_qkv and w.q_bias is not None and w.k_bias is not None and w.v_bias is not None:
            bias = torch.cat([w.q_bias, w.k_bias, w.v_bias])
        gate_up = torch.cat([w.gate_proj, w.up_proj]) if fuse_gate_up else None
        return cls(w, qkv, bias, gate_up, q_size, kv_size)

    def project_qkv(self, h: torch.Tensor, linear: Linear = F.linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.qkv is None:
            w = self.w
            return linear(h, w.q_proj, w.q_bias), linear(h, w.k_proj, w.k_bias), linear(h, w.v_proj, w.v_bias)
        q, k, v = linear(h, self.qkv, self.qkv_bias).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        return q, k, v

    def mlp(self, h: torch.Tensor, linear: Linear = F.linear,
            act: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """down(silu(gate(h)) * up(h)); `act` (the fused layout only) maps `[T, 2I]` gate-up to `[T, I]`."""
        w = self.w
        if self.gate_up is None:
            return linear(F.silu(linear(h, w.gate_proj)) * linear(h, w.up_proj), w.down_proj)
        gate_up = linear(h, self.gate_up)
        if act is None:
            gate, up = gate_up.chunk(2, dim=-1)
            return linear(F.silu(gate) * up, w.down_proj)
        return linear(act(gate_up), w.down_proj)
