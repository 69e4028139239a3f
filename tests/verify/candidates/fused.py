"""Honest: fuses the Q/K/V projections and the gate/up projections into single matrices at build time."""

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward, rms_norm, rotate_half


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

    @torch.inference_mode()
    def __call__(self, batch):
        spec, w, kv = self.ctx.spec, self.ctx.weights, self.ctx.kv
        eps, d = spec.rms_norm_eps, spec.head_dim
        x = w.embed[batch.input_ids]
        t = x.shape[0]
        cos, sin = self.rope_tables(batch.positions, x.dtype)
        for i, lw in enumerate(w.layers):
            h = rms_norm(x, lw.input_norm, eps)
            qkv = F.linear(h, *self.qkv[i])
            q, k, v = qkv.split([spec.q_size, spec.kv_size, spec.kv_size], dim=-1)
            q = q.reshape(t, spec.num_heads, d)
            k = k.reshape(t, spec.num_kv_heads, d)
            v = v.reshape(t, spec.num_kv_heads, d)
            if lw.q_norm is not None:
                q, k = rms_norm(q, lw.q_norm, eps), rms_norm(k, lw.k_norm, eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = kv.layer(i)
            k_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = k
            v_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = v
            attn = self.attention(q, k_cache, v_cache, batch)
            x = x + F.linear(attn.reshape(t, -1), lw.o_proj)
            gate, up = F.linear(rms_norm(x, lw.post_norm, eps), self.gate_up[i]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, lw.down_proj)
        x = rms_norm(x[batch.logits_indices], w.norm, eps)
        return F.linear(x, w.lm_head).float()


def build(ctx):
    return FusedForward(ctx)
