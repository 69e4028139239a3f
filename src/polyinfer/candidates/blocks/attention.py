"""Attention over the paged KV pool in plain PyTorch: per-sequence (any chunk) and batched decode."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_table: torch.Tensor,
                       seq_len: int, window: int | None) -> torch.Tensor:
    """Causal attention of one sequence's last `q.shape[0]` tokens over its first `seq_len` cached ones.

    q `[n, H, D]`; caches `[num_blocks, block_size, Hkv, D]`. Returns `[n, H, D]`.
    """
    n, heads, d = q.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    blocks = block_table[: (seq_len + bs - 1) // bs].long()
    k = k_cache[blocks].reshape(-1, kv_heads, d)[:seq_len].repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
    v = v_cache[blocks].reshape(-1, kv_heads, d)[:seq_len].repeat_interleave(heads // kv_heads, 1).transpose(0, 1)
    q_pos = torch.arange(seq_len - n, seq_len, device=q.device)[:, None]
    k_pos = torch.arange(seq_len, device=q.device)[None, :]
    mask = k_pos <= q_pos
    if window:
        mask &= k_pos > q_pos - window
    return F.scaled_dot_product_attention(q.transpose(0, 1), k, v, attn_mask=mask).transpose(0, 1)


def batched_decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                             block_tables: torch.Tensor, seq_lens: torch.Tensor, max_seq_len: int,
                             window: int | None) -> torch.Tensor:
    """One query token per sequence, all sequences at once over KV gathered to the longest context.

    q `[B, H, D]`; returns `[B, H, D]`. Reads only blocks the sequences own (padding is masked, and the
    gathered block ids past a sequence's end are the table's 0-padding, whose values are masked too).
    """
    b, heads, d = q.shape
    bs, kv_heads = k_cache.shape[1], k_cache.shape[2]
    nb = (max_seq_len + bs - 1) // bs
    tables = block_tables[:, :nb].long()
    k = k_cache[tables].reshape(b, nb * bs, kv_heads, d)
    v = v_cache[tables].reshape(b, nb * bs, kv_heads, d)
    pos = torch.arange(nb * bs, device=q.device)[None, :]
    lens = seq_lens.long()[:, None]
    valid = pos < lens
    if window:
        valid &= pos >= lens - window
    qg = q.view(b, kv_heads, heads // kv_heads, d)
    scores = torch.einsum("bkgd,bskd->bkgs", qg.float(), k.float()) * d**-0.5
    scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
    # Masked positions may hold NaN from a poisoned pool; zero their values so 0 * NaN cannot leak.
    v = v.masked_fill(~valid[:, :, None, None], 0)
    out = torch.einsum("bkgs,bskd->bkgd", scores.softmax(-1), v.float())
    return out.reshape(b, heads, d).to(q.dtype)
