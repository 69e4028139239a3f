"""Adversarial: every sequence reads the first sequence's KV blocks (a mixed-up block table row).

Alone, a sequence is row 0 and the output is right; batched behind another, it attends over someone
else's keys and values.
"""

import dataclasses

from polyinfer.candidates.reference import ReferenceForward


class ReadsRowZero(ReferenceForward):
    def attention(self, q, k_cache, v_cache, batch):
        tables = batch.block_tables[:1].expand_as(batch.block_tables)
        return super().attention(q, k_cache, v_cache, dataclasses.replace(batch, block_tables=tables))


def build(ctx):
    return ReadsRowZero(ctx)
