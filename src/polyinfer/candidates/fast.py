"""A tunable forward pass: the reference's math, with the choices the knob searcher explores.

Knobs (the first choice of each reproduces the reference's structure):
- fuse_qkv / fuse_gate_up: concatenate projection weights at swap time, one matmul instead of 3 / 2;
- rope: recompute cos/sin every step, or look them up from a table built at swap time;
- decode_attention: per-sequence loop, one batched PyTorch attention for all decoding sequences, or the
  Triton flash-decoding kernel;
- prefill_attention: per-sequence loop, or the Triton paged prefill kernel;
- norm: PyTorch RMSNorm, or the Triton kernel that fuses the residual add into the norm;
- rope_kv: rotation and paged-KV write as PyTorch ops, or one Triton launch;
- activation: PyTorch SiLU-and-multiply, or the Triton kernel (needs the fused gate-up layout);
- linear: cuBLAS for every projection, or the Triton GEMV for decode-shaped inputs (up to 16 rows),
  with its tile sizes `gemv_block_n` and `gemv_block_k` (the split over K is sized to fill the GPU);
- compile: torch.compile of the elementwise regions left in PyTorch (norm, rotation, activation);
- cuda_graphs: replay decode steps from CUDA graphs per batch bucket (needs Triton decode attention,
  which reads lengths on the device; on a CPU the same padded buffers run eagerly), with
  `graph_buckets` the batch sizes that get a graph: powers of two, or also the midpoints between them;
- pdl: launch the Triton kernels with programmatic dependent launch (Hopper and later), so each starts
  while the kernel before it finishes (and the GEMV reads its first weight tile meanwhile);
- mixed_graphs: steps that the decode graphs do not take (prefill chunks, or any step without
  cuda_graphs) replayed piecewise, a graph between every two attention calls per token bucket
  (attention itself runs eagerly; on a CPU the whole path does).

Triton, compile and graph choices are offered where they compile (CUDA with Triton installed); on a CPU
the kernels would only run interpreted, far too slowly to win, though tests still ask for them by name.
"""

from __future__ import annotations

import functools

import torch

from polyinfer.candidates.blocks.attention import batched_decode_attention, sequence_attention
from polyinfer.candidates.blocks.graphs import DecodeGraphs, MixedGraphs
from polyinfer.candidates.blocks.layout import FusedLayer
from polyinfer.candidates.blocks.ops import Activation, Linear, Norm
from polyinfer.candidates.blocks.rope import RopeKVWrite
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import SwapContext


def _compiles_kernels() -> bool:
    if not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401  (the `kernels` extra)
    except ImportError:
        return False
    return True


ON_GPU = _compiles_kernels()
TRITON = ["triton"] if ON_GPU else []
KNOBS: dict[str, list] = {
    "fuse_qkv": [False, True],
    "fuse_gate_up": [False, True],
    "rope": ["compute", "table"],
    "decode_attention": ["loop", "batched", *TRITON],
    "prefill_attention": ["loop", *TRITON],
    "norm": ["torch", *TRITON],
    "rope_kv": ["torch", *TRITON],
    "activation": ["torch", *TRITON],
    "linear": ["torch", *TRITON],
    "gemv_block_n": [32, *([16] if ON_GPU else [])],
    "gemv_block_k": [256, *([128] if ON_GPU else [])],
    "compile": ["none", *(["regions"] if ON_GPU else [])],
    "cuda_graphs": [False, *([True] if ON_GPU else [])],
    "graph_buckets": ["pow2", *(["dense"] if ON_GPU else [])],
    "mixed_graphs": [False, *([True] if ON_GPU else [])],
    "pdl": [False, *([True] if ON_GPU else [])],
}
DEFAULTS = {name: choices[0] for name, choices in KNOBS.items()}
# Where the knob searcher starts after the defaults: every kernel of the library, replayed from graphs,
# then the same with asynchronous engine steps, which hide the engine's host work behind the device's
# (the searcher drops a seed whose choices, or serving knobs, its space does not offer).
_EVERY_KERNEL = {"fuse_qkv": True, "fuse_gate_up": True, "rope": "table", "decode_attention": "triton",
                 "prefill_attention": "triton", "norm": "triton", "rope_kv": "triton", "activation": "triton",
                 "cuda_graphs": True}
SEEDS: list[dict] = [_EVERY_KERNEL, {**_EVERY_KERNEL, "serve.async_steps": True}]


def invalid(knobs: dict) -> str | None:
    """Why these knobs cannot build, or None; the knob searcher skips such settings unmeasured."""
    k = {**DEFAULTS, **knobs}
    if k["activation"] == "triton" and not k["fuse_gate_up"]:
        return "activation=triton needs fuse_gate_up: the kernel reads the fused gate-up output"
    if k["cuda_graphs"] and k["decode_attention"] != "triton":
        return "cuda_graphs needs decode_attention=triton: a graph cannot read host lengths"
    kernels = ("norm", "rope_kv", "activation", "linear", "decode_attention")
    if k["pdl"] and all(k[name] != "triton" for name in kernels):
        return "pdl changes how Triton kernels launch, and these knobs choose none"
    return None


class FastForward:
    def __init__(self, ctx: SwapContext) -> None:
        knobs = {**DEFAULTS, **ctx.knobs}
        unknown = {k for k in ctx.knobs if not k.startswith("serve.")} - set(KNOBS) - {"nonce"}
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}; this candidate takes {sorted(KNOBS)}")
        reason = invalid(knobs)
        if reason is not None:
            raise ValueError(reason)
        self.ctx, self.spec = ctx, ctx.spec
        self.layers = [FusedLayer.build(w, ctx.spec.q_size, ctx.spec.kv_size, knobs["fuse_qkv"], knobs["fuse_gate_up"])
                       for w in ctx.weights.layers]
        regions = knobs["compile"] == "regions"
        pdl = knobs["pdl"]
        self.norm = Norm(knobs["norm"], ctx.spec.rms_norm_eps, regions, pdl)
        self.linear = Linear(knobs["linear"], knobs["gemv_block_n"], knobs["gemv_block_k"], ctx.device, pdl)
        self.act = Activation(knobs["activation"], regions, pdl) if knobs["fuse_gate_up"] else None
        self.rope_kv = RopeKVWrite(knobs["rope_kv"], ctx.spec, ctx.device, ctx.dtype, knobs["rope"] == "table",
                                   regions, pdl)
        self.decode_kind, self.prefill_kind = knobs["decode_attention"], knobs["prefill_attention"]
        if "triton" in (self.decode_kind, self.prefill_kind):
            from polyinfer.kernels import paged_decode_attention, paged_prefill_attention

            self.triton_decode = functools.partial(paged_decode_attention.paged_decode_attention, pdl=pdl)
            self.triton_prefill = paged_prefill_attention.paged_prefill_attention
        self.graphs = None
        if knobs["cuda_graphs"]:
            # Buckets are captured when a batch first needs them, so a large cap costs nothing until an
            # engine runs that many sequences (--max-num-seqs above the default 64).
            max_blocks = -(-ctx.spec.max_position_embeddings // ctx.kv.block_size)
            self.graphs = DecodeGraphs(ctx.device, max_batch=512, max_blocks=max_blocks,
                                       buckets=knobs["graph_buckets"])
        # Up to the scheduler's default token budget per step; longer steps run eagerly.
        self.mixed = MixedGraphs(ctx.device, max_tokens=2048) if knobs["mixed_graphs"] else None

    def attention(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, batch: Batch) -> torch.Tensor:
        window = self.spec.sliding_window
        p = batch.num_prefill
        if p == 0 and self.decode_kind == "triton":  # the kernel's output is the whole result: no copy
            return self.triton_decode(q, k_cache, v_cache, batch.block_tables, batch.seq_lens, sliding_window=window)
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
            return self.graphs(batch, self.forward)
        if self.mixed is not None and self.mixed.fits(batch):
            return self.mixed(batch, self)
        return self.forward(batch)

    def forward(self, batch: Batch) -> torch.Tensor:
        """The step as segments between attention calls, the cut `MixedGraphs` replays piecewise."""
        q, residual, tables = self.head(batch)
        last = len(self.layers) - 1
        for i in range(last):
            q, residual = self.link(i, self.attend(i, q, batch), residual, batch, tables)
        x, residual = self.post(last, self.attend(last, q, batch), residual)
        return self.logits(x, residual, batch)

    def head(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Embedding and layer 0 up to its attention: (q, residual, this step's RoPE tables)."""
        tables = self.rope_kv.tables(batch)
        q, residual = self.pre(0, self.ctx.weights.embed[batch.input_ids], None, batch, tables)
        return q, residual, tables

    def pre(self, i: int, x: torch.Tensor, residual: torch.Tensor | None, batch: Batch,
            tables: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i's norm, QKV projection, rotation and KV write: its query `[T, H, D]` and the residual."""
        spec, layer, t, d = self.spec, self.layers[i], x.shape[0], self.spec.head_dim
        h, residual = self.norm(x, layer.w.input_norm, residual)
        q, k, v = layer.project_qkv(h, self.linear)
        q, k, v = q.reshape(t, spec.num_heads, d), k.reshape(t, spec.num_kv_heads, d), v.reshape(t, spec.num_kv_heads, d)
        k_cache, v_cache = self.ctx.kv.layer(i)
        q = self.rope_kv(q, k, v, batch, tables, k_cache, v_cache, layer.w.q_norm, layer.w.k_norm, spec.rms_norm_eps)
        return q, residual

    def attend(self, i: int, q: torch.Tensor, batch: Batch) -> torch.Tensor:
        return self.attention(q, *self.ctx.kv.layer(i), batch)

    def post(self, i: int, attn: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i after its attention: O projection, norm with the residual add, MLP."""
        layer = self.layers[i]
        h, residual = self.norm(self.linear(attn.reshape(attn.shape[0], -1), layer.w.o_proj), layer.w.post_norm,
                                residual)
        return layer.mlp(h, self.linear, self.act), residual

    def link(self, i: int, attn: torch.Tensor, residual: torch.Tensor, batch: Batch,
             tables: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """From layer i's attention to layer i+1's: what runs between two attention calls."""
        x, residual = self.post(i, attn, residual)
        return self.pre(i + 1, x, residual, batch, tables)

    def logits(self, x: torch.Tensor, residual: torch.Tensor, batch: Batch) -> torch.Tensor:
        rows, w = batch.logits_indices, self.ctx.weights
        x, _ = self.norm(x[rows], w.norm, residual[rows])
        return self.linear(x, w.lm_head).float()


def build(ctx: SwapContext) -> FastForward:
    return FastForward(ctx)
