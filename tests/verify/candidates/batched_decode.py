"""Honest: decode attention for all decoding sequences at once, over their KV gathered into a padded
tensor; prefill chunks keep the reference's per-sequence attention.

Padding slots (past a sequence's length, or from the zero entries of short block tables) hold whatever
the pool holds there, NaN included, so they are masked out of the scores and zeroed in the values.
"""

import dataclasses

import torch

from polyinfer.candidates.reference import ReferenceForward


class BatchedDecode(ReferenceForward):
    def attention(self, q, k_cache, v_cache, batch):
        if batch.num_prefill == batch.num_seqs:
            return super().attention(q, k_cache, v_cache, batch)
        first = int(batch.query_start[batch.num_prefill])
        out = torch.empty_like(q)
        if batch.num_prefill:
            out[:first] = self._prefill(q, k_cache, v_cache, batch)
        out[first:] = self._decode(q[first:], k_cache, v_cache, batch)
        return out

    def _prefill(self, q, k_cache, v_cache, batch):
        # The reference loop sees only the prefill rows: the decode rows are appended after them.
        rows = int(batch.query_start[batch.num_prefill])
        return super().attention(q[:rows], k_cache, v_cache, _first_sequences(batch, batch.num_prefill))

    def _decode(self, q, k_cache, v_cache, batch):
        spec, bs = self.ctx.spec, self.ctx.kv.block_size
        p = batch.num_prefill
        tables = batch.block_tables[p:].long()  # [D, W]
        seq_lens = batch.seq_lens[p:].long()  # [D]
        num, width = tables.shape
        k = k_cache[tables].reshape(num, width * bs, spec.num_kv_heads, spec.head_dim)
        v = v_cache[tables].reshape(num, width * bs, spec.num_kv_heads, spec.head_dim)
        pos = torch.arange(width * bs, device=q.device)
        valid = pos[None, :] < seq_lens[:, None]
        if spec.sliding_window:
            valid &= pos[None, :] > seq_lens[:, None] - 1 - spec.sliding_window
        keep = valid[:, :, None, None]
        k = torch.where(keep, k, 0.0).repeat_interleave(spec.num_heads // spec.num_kv_heads, dim=2)
        v = torch.where(keep, v, 0.0).repeat_interleave(spec.num_heads // spec.num_kv_heads, dim=2)
        scores = torch.einsum("nhd,nlhd->nhl", q, k) * spec.head_dim**-0.5
        scores = scores.masked_fill(~valid[:, None, :], float("-inf"))
        return torch.einsum("nhl,nlhd->nhd", scores.softmax(dim=-1), v)


def _first_sequences(batch, n):
    rows = int(batch.query_start[n])
    return dataclasses.replace(
        batch,
        seq_lens=batch.seq_lens[:n],
        query_start=batch.query_start[: n + 1],
        block_tables=batch.block_tables[:n],
        seq_lens_host=batch.seq_lens_host[:n],
        query_lens_host=batch.query_lens_host[:n],
        input_ids=batch.input_ids[:rows],
        positions=batch.positions[:rows],
        slot_mapping=batch.slot_mapping[:rows],
    )


def build(ctx):
    return BatchedDecode(ctx)
