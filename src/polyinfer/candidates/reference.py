"""The reference forward pass: plain PyTorch, one sequence at a time in attention. The correctness oracle.

Numerics follow Hugging Face transformers' Llama/Qwen modelling: RMSNorm in float32, RoPE tables in
float32 cast to the activation dtype, rotate-half rotary layout.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import SwapContext
from polyinfer.models.weights import LayerWeights

KNOBS: dict[str, list] = {}


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class ReferenceForward:
    def __init__(self, ctx: SwapContext) -> None:
        self.ctx = ctx
        self.inv_freq = ctx.spec.rope.inv_freq(ctx.spec.head_dim).to(ctx.device)

    def rope_tables(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]  # [T, 1, head_dim]
        return emb.cos().to(dtype), emb.sin().to(dtype)

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch) -> torch.Tensor:
        spec, bs = self.ctx.spec, self.ctx.kv.block_size
        group = spec.num_heads // spec.num_kv_heads
        out = torch.empty_like(q)
        start = 0
        for b, (seq_len, n) in enumerate(zip(batch.seq_lens_host, batch.query_lens_host, strict=True)):
            blocks = batch.block_tables[b, : (seq_len + bs - 1) // bs].long()
            k = k_cache[blocks].reshape(-1, spec.num_kv_heads, spec.head_dim)[:seq_len]
            v = v_cache[blocks].reshape(-1, spec.num_kv_heads, spec.head_dim)[:seq_len]
            k = k.repeat_interleave(group, dim=1).transpose(0, 1)  # [heads, seq_len, d]
            v = v.repeat_interleave(group, dim=1).transpose(0, 1)
            q_pos = torch.arange(seq_len - n, seq_len, device=q.device)[:, None]
            k_pos = torch.arange(seq_len, device=q.device)[None, :]
            mask = k_pos <= q_pos
            if spec.sliding_window:
                mask &= k_pos > q_pos - spec.sliding_window
            qb = q[start : start + n].transpose(0, 1)  # [heads, n, d]
            o = F.scaled_dot_product_attention(qb, k, v, attn_mask=mask)
            out[start : start + n] = o.transpose(0, 1)
            start += n
        return out

    # Derived candidates override these two hooks to change a layer's projections without copying the rest.
    def project_qkv(self, i: int, lw: LayerWeights, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return F.linear(h, lw.q_proj, lw.q_bias), F.linear(h, lw.k_proj, lw.k_bias), F.linear(h, lw.v_proj, lw.v_bias)

    def mlp(self, i: int, lw: LayerWeights, h: torch.Tensor) -> torch.Tensor:
        return F.linear(F.silu(F.linear(h, lw.gate_proj)) * F.linear(h, lw.up_proj), lw.down_proj)

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> torch.Tensor:
        spec, w, kv = self.ctx.spec, self.ctx.weights, self.ctx.kv
        eps, d = spec.rms_norm_eps, spec.head_dim
        x = w.embed[batch.input_ids]
        t = x.shape[0]
        cos, sin = self.rope_tables(batch.positions, x.dtype)
        for i, lw in enumerate(w.layers):
            h = rms_norm(x, lw.input_norm, eps)
            q, k, v = self.project_qkv(i, lw, h)
            q, k, v = q.view(t, spec.num_heads, d), k.view(t, spec.num_kv_heads, d), v.view(t, spec.num_kv_heads, d)
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
            x = x + self.mlp(i, lw, h)
        x = rms_norm(x[batch.logits_indices], w.norm, eps)
        return F.linear(x, w.lm_head).float()


def build(ctx: SwapContext) -> ReferenceForward:
    return ReferenceForward(ctx)
