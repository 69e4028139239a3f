"""Decode steps replayed from CUDA graphs, one graph per batch-size bucket.

A decode-only batch is copied into static buffers sized for the smallest bucket that holds it; rows past
its size repeat its first row (token, position, slot, length and block table), so they compute and
write exactly what row 0 does and touch no other sequence's memory. Block tables are padded to the
widest a sequence can need. The graphed forward must read lengths from device tensors only: host
copies (`seq_lens_host`) are placeholders here, baked in at capture. On a CPU the same buffers are run
eagerly: the CPU-testable twin of the padding and bucketing.
"""

from __future__ import annotations

from collections.abc import Callable

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
