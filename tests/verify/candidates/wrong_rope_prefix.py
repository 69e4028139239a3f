"""Adversarial: rotates prefill tokens by their position within the chunk, not within the sequence.

A whole prompt prefilled at once starts at position 0, so plain generation is right; a chunk that starts
after cached prefix blocks (or after an earlier chunk) gets the wrong rotary positions.
"""

import dataclasses

from polyinfer.candidates.reference import ReferenceForward


class ChunkRelativeRope(ReferenceForward):
    def __call__(self, batch):
        positions = batch.positions.clone()
        starts = batch.query_start.tolist()
        for b in range(batch.num_prefill):
            positions[starts[b] : starts[b + 1]] -= positions[starts[b]].item()
        return super().__call__(dataclasses.replace(batch, positions=positions))


def build(ctx):
    return ChunkRelativeRope(ctx)
