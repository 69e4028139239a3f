"""A tunable forward pass: the reference's math, with the choices the knob searcher explores.

Knobs (the first choice of each reproduces the reference's structure):
- fuse_qkv / fuse_gate_up: concatenate projection weights at swap time, one matmul instead of 3 / 2;
- rope: recompute cos/sin every step, or look them up from a table built at swap time;
- decode_attention: per-sequence loop, one batched PyTorch attention for all decoding sequences, or the
  Triton flash-decoding kernel (offered on CUDA; by name it also runs under the Triton interpreter);
- prefill_attention: per-sequence loop, or the Triton paged prefill kernel;
- cuda_graphs: replay decode steps from CUDA graphs per batch bucket (needs Triton decode attention,
  which reads lengths on the device; on a CPU the same padded buffers run eagerly).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from polyinfer.candidates.blocks.attention import batched_decode_attention, sequence_attention
from polyinfer.candidates.blocks.graphs import DecodeGraphs
from polyinfer.candidates.blocks.layout import FusedLayer
from polyinfer.candidates.blocks.rope import Rope
from polyinfer.candidates.reference import rms_norm, rotate_half
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import SwapContext

# Triton choices are offered where Triton compiles (CUDA); on a CPU they would only run interpreted,
# far too slowly to win, though tests still ask for them by name.
TRITON = ["triton"] if torch.cuda.is_available() else []
KNOBS: dict[str, list] = {
    "fuse_qkv": [False, True],
    "fuse_gate_up": [False, True],
    "rope": ["compute", "table"],
    "decode_attention": ["loop", "batched", *TRITON],
    "prefill_attention": ["loop", *TRITON],
    "cuda_graphs": [False, *([True] if TRITON else [])],
}
DEFAULTS = {name: choices[0] for name, choices in KNOBS.items()}


class FastForward:
    def __init__(self, ctx: SwapContext) -> None:
        knobs = {**DEFAULTS, **ctx.knobs}
        unknown = {k for k in ctx.knobs if not k.startswith("serve.")} - set(KNOBS) - {"nonce"}
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}; this candidate takes {sorted(KNOBS)}")
        self.ctx, self.spec = ctx, ctx.spec
        self.layers = [FusedLayer.build(w, ctx.spec.q_size, ctx.spec.kv_size, knobs["fuse_qkv"], knobs["fuse_gate_up"])
                       for w in ctx.weights.layers]
        self.rope = Rope(ctx.spec, ctx.device, ctx.dtype, knobs["rope"] == "table")
        self.decode_kind, self.prefill_kind = knobs["decode_attention"], knobs["prefill_attention"]
        if "triton" in (self.decode_kind, self.prefill_kind):
            from polyinfer.kernels import paged_decode_attention, paged_prefill_attention

            self.triton_decode = paged_decode_attention.paged_decode_attention
            self.triton_prefill = paged_prefill_attention.paged_prefill_attention
        self.graphs = None
        if knobs["cuda_graphs"]:
            if self.decode_kind != "triton":
                raise ValueError("cuda_graphs needs decode_attention=triton: a graph cannot read host lengths")
            max_blocks = -(-ctx.spec.max_position_embeddings // ctx.kv.block_size)
            self.graphs = DecodeGraphs(self.forward, ctx.device, max_batch=64, max_blocks=max_blocks)

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch) -> torch.Tensor:
        window = self.spec.sliding_window
        p = batch.num_prefill
        split = int(sum(batch.query_lens_host[:p]))  # rows of the prefill chunks
        out = torch.empty_like(q)
        if p and self.prefill_kind == "triton":
            out[:split] = self.triton_prefill(q[:split], k_cache, v_cache, batch.block_tables[:p], batch.seq_lens[:p],
                                              batch.query_start[: p + 1], max(batch.query_lens_host[:p]),
                                              sliding_window=window)
        else:
            start = 0
            for b in range(p):
                n = batch.query_lens_host[b]
                out[start : start + n] = sequence_attention(q[start : start + n], k_cache, v_cache,
                                                            batch.block_tables[b], batch.seq_lens_host[b], window)
                start += n
        if p == batch.num_seqs:
            return out
        tables, lens = batch.block_tables[p:], batch.seq_lens[p:]
        if self.decode_kind == "triton":
            out[split:] = self.triton_decode(q[split:], k_cache, v_cache, tables, lens, sliding_window=window)
        elif self.decode_kind == "batched":
            out[split:] = batched_decode_attention(q[split:], k_cache, v_cache, tables, lens,
                                                   max(batch.seq_lens_host[p:]), window)
        else:
            for i, b in enumerate(range(p, batch.num_seqs)):
                out[split + i : split + i + 1] = sequence_attention(q[split + i : split + i + 1], k_cache, v_cache,
                                                                    batch.block_tables[b], batch.seq_lens_host[b],
                                                                    window)
        return out

    @torch.inference_mode()
    def __call__(self, batch: Batch) -> torch.Tensor:
        if self.graphs is not None and self.graphs.fits(batch):
            return self.graphs(batch)
        return self.forward(batch)

    def forward(self, batch: Batch) -> torch.Tensor:
        spec, w, kv = self.spec, self.ctx.weights, self.ctx.kv
        eps, d = spec.rms_norm_eps, spec.head_dim
        x = w.embed[batch.input_ids]
        t = x.shape[0]
        cos, sin = self.rope(batch.positions)
        for i, layer in enumerate(self.layers):
            h = rms_norm(x, layer.w.input_norm, eps)
            q, k, v = layer.project_qkv(h)
            q, k, v = q.reshape(t, spec.num_heads, d), k.reshape(t, spec.num_kv_heads, d), v.reshape(t, spec.num_kv_heads, d)
            if layer.w.q_norm is not None and layer.w.k_norm is not None:
                q, k = rms_norm(q, layer.w.q_norm, eps), rms_norm(k, layer.w.k_norm, eps)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k_cache, v_cache = kv.layer(i)
            k_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = k
            v_cache.view(-1, spec.num_kv_heads, d)[batch.slot_mapping] = v
            attn = self.attention(q, k_cache, v_cache, batch)
            x = x + F.linear(attn.reshape(t, -1), layer.w.o_proj)
            x = x + layer.mlp(rms_norm(x, layer.w.post_norm, eps))
        x = rms_norm(x[batch.logits_indices], w.norm, eps)
        return F.linear(x, w.lm_head).float()


def build(ctx: SwapContext) -> FastForward:
    return FastForward(ctx)
