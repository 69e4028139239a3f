"""Decode steps replayed from CUDA graphs, one graph per batch-size bucket.

A decode-only batch is copied into static buffers sized for the smallest bucket that holds it; rows past
its size repeat its first row (token, position, slot, length and block table), so they compute and
write exactly what row 0 does and touch no other sequence's memory. Block tables are padded to the
widest a sequence can need. The graphed forward must read lengths from device tensors only: host
copies (`seq_lens_host`) are placeholders here, baked in at capture. On a CPU the same buffers are run
eagerly: the CPU-testable twin of the padding and bucketing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from polyinfer.engine.batch import Batch

Forward = Callable[[Batch], torch.Tensor]


# Batch sizes that get a graph, below the largest: powers of two (few captures; a batch pads by up to
# 2x, and the padded rows repeat row 0's attention), or also the midpoints between them (twice the
# captures, at most 1.5x padding: batch 33 runs as 48, not 64).
BUCKETS = {
    "pow2": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
    "dense": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512),
}


class DecodeGraphs:
    def __init__(self, device: torch.device, max_batch: int, max_blocks: int, buckets: str = "pow2") -> None:
        self.device, self.max_blocks = device, max_blocks
        self.buckets = [b for b in BUCKETS[buckets] if b < max_batch] + [max_batch]
        self.captured: dict[int, tuple[Batch, torch.Tensor | None, torch.cuda.CUDAGraph | None]] = {}

    def fits(self, batch: Batch) -> bool:
        return batch.is_decode_only and batch.num_seqs <= self.buckets[-1] and batch.block_tables.shape[1] <= self.max_blocks

    def __call__(self, batch: Batch, forward: Forward) -> torch.Tensor:
        """`forward(batch)`, replayed from the bucket's graph (captured from `forward` on first use).

        The forward is passed in, not kept: a candidate that owns its graphs and whose forward is a
        bound method would otherwise form a reference cycle, and its weights and graph memory would
        wait for the garbage collector after every swap."""
        n = batch.num_seqs
        bucket = next(b for b in self.buckets if b >= n)
        if bucket not in self.captured:
            self.captured[bucket] = self._capture(bucket, batch, forward)
        static, out, graph = self.captured[bucket]
        self._fill(static, batch)
        if graph is None:
            return forward(static)[:n]
        graph.replay()
        assert out is not None
        return out[:n]

    def _static(self, bucket: int) -> Batch:
        ids = torch.zeros(bucket, dtype=torch.int64, device=self.device)
        return Batch(
            input_ids=ids, positions=ids.clone(), slot_mapping=ids.clone(),
            seq_lens=torch.ones(bucket, dtype=torch.int32, device=self.device),
            query_start=torch.arange(bucket + 1, dtype=torch.int32, device=self.device),
            block_tables=torch.zeros(bucket, self.max_blocks, dtype=torch.int32, device=self.device),
            logits_indices=torch.arange(bucket, device=self.device),
            seq_lens_host=(0,) * bucket, query_lens_host=(1,) * bucket, num_prefill=0,
        )

    @staticmethod
    def _fill(static: Batch, batch: Batch) -> None:
        n, width = batch.num_seqs, batch.block_tables.shape[1]
        for dst, src in ((static.input_ids, batch.input_ids), (static.positions, batch.positions),
                         (static.slot_mapping, batch.slot_mapping), (static.seq_lens, batch.seq_lens)):
            dst[:n].copy_(src)
            dst[n:] = src[0]
        static.block_tables[:n, :width].copy_(batch.block_tables)
        static.block_tables[n:, :width] = batch.block_tables[0]

    def _capture(self, bucket: int, batch: Batch,
                 forward: Forward) -> tuple[Batch, torch.Tensor | None, torch.cuda.CUDAGraph | None]:
        static = self._static(bucket)
        if self.device.type != "cuda":
            return static, None, None
        self._fill(static, batch)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):  # compile kernels and settle allocations outside the capture
                forward(static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = forward(static)
        return static, out, graph


class Segmented(Protocol):
    """A forward cut at its attention calls (`FastForward`): what `MixedGraphs` replays piecewise."""

    @property
    def layers(self) -> Sequence[object]: ...

    def head(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]: ...
    def attend(self, i: int, q: torch.Tensor, batch: Batch) -> torch.Tensor: ...
    def link(self, i: int, attn: torch.Tensor, residual: torch.Tensor, batch: Batch,
             tables: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]: ...
    def post(self, i: int, attn: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...
    def logits(self, x: torch.Tensor, residual: torch.Tensor, batch: Batch) -> torch.Tensor: ...


@dataclass
class _Pieces:
    """One token bucket: its padded batch, and per segment a graph with its static inputs and outputs."""

    static: Batch
    graphs: list[torch.cuda.CUDAGraph] = field(default_factory=list)
    queries: list[torch.Tensor] = field(default_factory=list)  # segment i's output: layer i's query
    attns: list[torch.Tensor] = field(default_factory=list)  # segment i+1's input: layer i's attention
    out: tuple[torch.Tensor, torch.Tensor] | None = None  # the last segment's (x, residual)


class MixedGraphs:
    """Steps replayed piecewise from CUDA graphs per token bucket: those with prefill chunks, and decode
    steps that `DecodeGraphs` does not take (attention that reads host lengths, larger batches).

    Attention needs each step's sequence layout (chunk lengths, which rows decode), which a graph cannot
    take, so it runs eagerly on the real rows, and everything between two attention calls (O projection,
    norms, MLP, the next QKV, rotation and KV write) is one graph: L + 1 replays and L attention calls per
    step instead of ~10 launches per layer from Python. Rows past the step's tokens repeat row 0 (token,
    position, slot), and their attention output is row 0's, so they write exactly what row 0 writes. A
    bucket's segments share one memory pool: they always replay in the order they were captured. On a
    CPU the segments run eagerly on the same padded buffers, the testable twin.
    """

    def __init__(self, device: torch.device, max_tokens: int) -> None:
        self.device = device
        self.buckets = [b for b in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if b < max_tokens] + [max_tokens]
        self.captured: dict[int, _Pieces] = {}

    def fits(self, batch: Batch) -> bool:
        return batch.num_tokens <= self.buckets[-1]

    def __call__(self, batch: Batch, model: Segmented) -> torch.Tensor:
        t = batch.num_tokens
        bucket = next(b for b in self.buckets if b >= t)
        if bucket not in self.captured:
            self.captured[bucket] = self._capture(bucket, batch, model)
        pieces = self.captured[bucket]
        self._fill(pieces.static, batch)
        if not pieces.graphs:  # CPU: the same segments, eagerly
            x, residual = self._eager(pieces.static, batch, model, bucket)
            return model.logits(x[:t], residual[:t], batch)
        for i, graph in enumerate(pieces.graphs):
            graph.replay()
            if i < len(pieces.queries):
                attn = model.attend(i, pieces.queries[i][:t], batch)
                pieces.attns[i][:t].copy_(attn)
                pieces.attns[i][t:] = attn[0]
        assert pieces.out is not None
        x, residual = pieces.out
        return model.logits(x[:t], residual[:t], batch)

    def _eager(self, static: Batch, batch: Batch, model: Segmented, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The segments in order on the padded buffers, attention on the real rows: the last (x, residual)."""
        t, last = batch.num_tokens, len(model.layers) - 1
        q, residual, tables = model.head(static)
        for i in range(last):
            q, residual = model.link(i, self._pad(model.attend(i, q[:t], batch), bucket), residual, static, tables)
        return model.post(last, self._pad(model.attend(last, q[:t], batch), bucket), residual)

    @staticmethod
    def _pad(attn: torch.Tensor, bucket: int) -> torch.Tensor:
        pad = attn[:1].expand(bucket - attn.shape[0], *attn.shape[1:])
        return torch.cat([attn, pad])

    def _static(self, bucket: int) -> Batch:
        ids = torch.zeros(bucket, dtype=torch.int64, device=self.device)
        return Batch(
            input_ids=ids, positions=ids.clone(), slot_mapping=ids.clone(),
            seq_lens=torch.ones(1, dtype=torch.int32, device=self.device),
            query_start=torch.tensor([0, bucket], dtype=torch.int32, device=self.device),
            block_tables=torch.zeros(1, 1, dtype=torch.int32, device=self.device),
            logits_indices=torch.arange(bucket, device=self.device),
            seq_lens_host=(bucket,), query_lens_host=(bucket,), num_prefill=1,
        )

    @staticmethod
    def _fill(static: Batch, batch: Batch) -> None:
        t = batch.num_tokens
        for dst, src in ((static.input_ids, batch.input_ids), (static.positions, batch.positions),
                         (static.slot_mapping, batch.slot_mapping)):
            dst[:t].copy_(src)
            dst[t:] = src[0]

    def _capture(self, bucket: int, batch: Batch, model: Segmented) -> _Pieces:
        pieces = _Pieces(self._static(bucket))
        if self.device.type != "cuda":
            return pieces
        self._fill(pieces.static, batch)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):  # compile kernels and settle allocations outside the capture
            for _ in range(2):
                self._eager(pieces.static, batch, model, bucket)
        torch.cuda.current_stream(self.device).wait_stream(side)
        last = len(model.layers) - 1
        pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            q, residual, tables = model.head(pieces.static)
        pieces.graphs.append(graph)
        for i in range(last + 1):
            pieces.queries.append(q)
            attn = torch.empty_like(q)
            pieces.attns.append(attn)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                if i < last:
                    q, residual = model.link(i, attn, residual, pieces.static, tables)
                else:
                    pieces.out = model.post(i, attn, residual)
            pieces.graphs.append(graph)
        return pieces
