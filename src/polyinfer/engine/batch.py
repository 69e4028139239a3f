"""Batch: what one engine step hands the candidate's forward pass.

Tokens of all scheduled sequences are packed into one flat row dimension T (varlen layout). Prefill
chunks come first, then decodes (one token each); `num_prefill` says where the split is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True, slots=True)
class Batch:
    input_ids: torch.Tensor  # [T] int64
    positions: torch.Tensor  # [T] int64: position of each token in its sequence
    slot_mapping: torch.Tensor  # [T] int64: KV pool slot (block * block_size + offset) to write each token's K/V
    seq_lens: torch.Tensor  # [B] int32: context length of each sequence including this step's tokens
    query_start: torch.Tensor  # [B+1] int32: sequence b's tokens are rows query_start[b]:query_start[b+1]
    block_tables: torch.Tensor  # [B, max_blocks] int32; entries past a sequence's last block are 0
    logits_indices: torch.Tensor  # [S] int64: rows whose logits the forward returns, in this order
    seq_lens_host: tuple[int, ...]  # host copies, so candidates need no device sync to read them
    query_lens_host: tuple[int, ...]
    num_prefill: int  # sequences [0, num_prefill) are prefill chunks; the rest decode one token

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens_host)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def is_decode_only(self) -> bool:
        return self.num_prefill == 0

    @property
    def max_seq_len(self) -> int:
        return max(self.seq_lens_host, default=0)

    @classmethod
    def build(
        cls,
        token_ids: list[list[int]],
        start_positions: list[int],
        block_tables: list[list[int]],
        block_size: int,
        sample: list[bool],
        num_prefill: int,
        device: torch.device | str = "cpu",
    ) -> Batch:
        """Pack per-sequence chunks: sequence b feeds `token_ids[b]` at positions from `start_positions[b]`.

        Rows are returned for the last token of every sequence whose `sample[b]` is true (a prefill chunk
        that does not reach the prompt's end samples nothing).
        """
        ids: list[int] = []
        pos: list[int] = []
        slots: list[int] = []
        starts = [0]
        logits_rows: list[int] = []
        seq_lens: list[int] = []
        for toks, start, table, want in zip(token_ids, start_positions, block_tables, sample, strict=True):
            n = len(toks)
            ids.extend(toks)
            positions = range(start, start + n)
            pos.extend(positions)
            slots.extend(table[p // block_size] * block_size + p % block_size for p in positions)
            starts.append(starts[-1] + n)
            seq_lens.append(start + n)
            if want:
                logits_rows.append(starts[-1] - 1)
        width = max((len(t) for t in block_tables), default=1) or 1
        flat_tables = [b for t in block_tables for b in t + [0] * (width - len(t))]
        # Two host-to-device copies per step, not seven: the int64 and the int32 fields each travel packed.
        t, n = len(ids), len(seq_lens)
        longs = torch.tensor(ids + pos + slots + logits_rows, dtype=torch.int64).to(device, non_blocking=True)
        ints = torch.tensor(seq_lens + starts + flat_tables, dtype=torch.int32).to(device, non_blocking=True)
        return cls(
            input_ids=longs[:t],
            positions=longs[t : 2 * t],
            slot_mapping=longs[2 * t : 3 * t],
            seq_lens=ints[:n],
            query_start=ints[n : 2 * n + 1],
            block_tables=ints[2 * n + 1 :].view(n, width),
            logits_indices=longs[3 * t :],
            seq_lens_host=tuple(seq_lens),
            query_lens_host=tuple(len(t) for t in token_ids),
            num_prefill=num_prefill,
        )
