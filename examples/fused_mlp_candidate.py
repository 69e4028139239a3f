"""A minimal candidate: the reference forward with gate and up projections fused into one matmul.

    polyinfer generate --prompt "Hi" --candidate examples/fused_mlp_candidate.py   # (through bench/verify)
    polyinfer verify examples/fused_mlp_candidate.py

`build(ctx)` runs once at swap time: it may derive weights (here one [2*intermediate, hidden] matrix per
layer) but must not allocate KV memory. The returned callable gets a `Batch` every step and returns
float logits for `batch.logits_indices`.
"""

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import ReferenceForward, rms_norm, rotate_half

KNOBS = {}


class FusedMLP(ReferenceForward):
    def __init__(self, ctx):
        super().__init__(ctx)
        self.gate_up = [torch.cat([w.gate_proj, w.up_proj]) for w in ctx.weights.layers]

    @torch.inference_mode()
    def __call__(self, batch):
        spec, w, kv = self.ctx.spec, self.ctx.weights, self.ctx.kv
        eps, d = spec.rms_norm_eps, spec.head_dim
        x = w.embed[batch.input_ids]
        t = x.shape[0]
        cos, sin = self.rope_tables(batch.positions, x.dtype)
        for i, lw in enumerate(w.layers):
            h = rms_norm(x, lw.input_norm, eps)
            q = F.linear(h, lw.q_proj, lw.q_bias).view(t, spec.num_heads, d)
            k = F.linear(h, lw.k_proj, lw.k_bias).view(t, spec.num_kv_heads, d)
            v = F.linear(h, lw.v_proj, lw.v_bias).view(t, spec.num_kv_heads, d)
            if lw.q_norm is not None:
                q, k = rms_norm(q, lw.q_norm, eps), rms_norm(k, lw.k_norm, eps)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k_cache, v_cache = kv.layer(i)
            k_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = k
            v_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = v
            x = x + F.linear(self.attention(q, k_cache, v_cache, batch).reshape(t, -1), lw.o_proj)
            gate, up = F.linear(rms_norm(x, lw.post_norm, eps), self.gate_up[i]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, lw.down_proj)
        return F.linear(rms_norm(x[batch.logits_indices], w.norm, eps), w.lm_head).float()


def build(ctx):
    return FusedMLP(ctx)
