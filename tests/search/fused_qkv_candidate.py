"""A candidate derived from the reference: the Q, K and V projections are fused into one matmul, with the
weights concatenated once at build time. What a good LLM reply holds in the agent tests."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward, rms_norm, rotate_half
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import SwapContext


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

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> torch.Tensor:
        spec, w, kv = self.ctx.spec, self.ctx.weights, self.ctx.kv
        eps, d = spec.rms_norm_eps, spec.head_dim
        q_width, kv_width = spec.num_heads * d, spec.num_kv_heads * d
        x = w.embed[batch.input_ids]
        t = x.shape[0]
        cos, sin = self.rope_tables(batch.positions, x.dtype)
        for i, lw in enumerate(w.layers):
            h = rms_norm(x, lw.input_norm, eps)
            q, k, v = F.linear(h, *self.qkv[i]).split([q_width, kv_width, kv_width], dim=-1)
            q = q.reshape(t, spec.num_heads, d)
            k = k.reshape(t, spec.num_kv_heads, d)
            v = v.reshape(t, spec.num_kv_heads, d)
            if lw.q_norm is not None and lw.k_norm is not None:
                q, k = rms_norm(q, lw.q_norm, eps), rms_norm(k, lw.k_norm, eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = kv.layer(i)
            k_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = k
            v_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = v
            attn = self.attention(q, k_cache, v_cache, batch)
            x = x + F.linear(attn.reshape(t, -1), lw.o_proj)
            h = rms_norm(x, lw.post_norm, eps)
            x = x + F.linear(F.silu(F.linear(h, lw.gate_proj)) * F.linear(h, lw.up_proj), lw.down_proj)
        x = rms_norm(x[batch.logits_indices], w.norm, eps)
        return F.linear(x, w.lm_head).float()


def build(ctx: SwapContext) -> FusedQKVForward:
    return FusedQKVForward(ctx)
