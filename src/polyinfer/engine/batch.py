"""Batch: what one engine step hands the candidate's forward pass.

Tokens of all scheduled sequences are packed into one flat row dimension T (varlen layout). Prefill
chunks come first, then decodes (one token each); `num_prefill` says where the split is.
"""

from __future__ import annotations

import array
import itertools
from dataclasses import dataclass

import torch


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor's copy on `device`, queued without waiting. From pageable memory a CUDA copy may
    wait for the stream's earlier work, which would stall asynchronous steps; pinned memory never does
    (the caching host allocator keeps the staging buffer until the copy has run)."""
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


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
        # The fields are packed into two flat buffers (int64 and int32) that travel to the device in one
        # copy each; `array` appends at C speed, which matters at large batches (block tables dominate).
        t = sum(len(toks) for toks in token_ids)
        n = len(token_ids)
        longs = array.array("q", itertools.chain.from_iterable(token_ids))  # input ids, then positions...
        slots = array.array("q")
        starts = array.array("i", [0])
        seq_lens = array.array("i")
        logits_rows = array.array("q")
        for toks, start, table, want in zip(token_ids, start_positions, block_tables, sample, strict=True):
            end = start + len(toks)
            longs.extend(range(start, end))
            if len(toks) == 1:
                slots.append(table[start // block_size] * block_size + start % block_size)
            else:
                slots.extend(table[p // block_size] * block_size + p % block_size for p in range(start, end))
            starts.append(starts[-1] + len(toks))
            seq_lens.append(end)
            if want:
                logits_rows.append(starts[-1] - 1)
        longs.extend(slots)
        longs.extend(logits_rows)
        width = max((len(table) for table in block_tables), default=1) or 1
        ints = array.array("i", seq_lens)
        ints.extend(starts)
        for table in block_tables:
            ints.extend(table)
            if len(table) < width:
                ints.extend(itertools.repeat(0, width - len(table)))
        device = torch.device(device)
        long_t = to_device(torch.frombuffer(longs, dtype=torch.int64) if longs else torch.empty(0, dtype=torch.int64),
                           device)
        int_t = to_device(torch.frombuffer(ints, dtype=torch.int32), device)
        return cls(
            input_ids=long_t[:t],
            positions=long_t[t : 2 * t],
            slot_mapping=long_t[2 * t : 3 * t],
            seq_lens=int_t[:n],
            query_start=int_t[n : 2 * n + 1],
            block_tables=int_t[2 * n + 1 :].view(n, width),
            logits_indices=long_t[3 * t :],
            seq_lens_host=tuple(seq_lens),
            query_lens_host=tuple(len(t) for t in token_ids),
            num_prefill=num_prefill,
        )
