"""Causal attention for packed variable-length prefill chunks whose context lives in the paged KV pool.

Contract: `q [T, H, D]` packs the query rows of B sequences (any token and head strides, contiguous last
dimension): sequence b owns rows `query_start[b]:query_start[b+1]` (`query_start [B+1]` int32), which
are the last tokens of a context of `seq_lens[b]` tokens (int32), all of them — this chunk's included —
already written to the layer's `k_cache, v_cache [num_blocks, block_size, Hkv, D]` through
`block_tables [B, max_blocks]` int32. `max_query_len` is the longest chunk (a host int, so the grid
needs no device sync). Returns `[T, H, D]` in q's dtype: each query at position p attends to cached
positions `<= p` (and `> p - sliding_window` when given); query head h reads kv head `h // (H // Hkv)`.

One program per (BLOCK_M query rows, sequence, head) streams BLOCK_N-token K/V tiles, gathered through
the block table (so BLOCK_N need not relate to block_size), with an online softmax in float32 and
`tl.dot` on the tensor cores.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

KNOBS: dict[str, list[int]] = {
    "BLOCK_M": [16, 32, 64, 128],
    "BLOCK_N": [16, 32, 64, 128],
    "num_warps": [2, 4, 8],
    "num_stages": [1, 2, 3, 4],
}

LOG2E = 1.4426950408889634
NEG_BIG = tl.constexpr(-1.0e30)  # finite, so a fully masked tile rescales by exp2(0) instead of exp2(nan)
NO_WINDOW = 1 << 30  # a window longer than any context: attend to everything


@triton.jit
def _prefill_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, sl_ptr, qs_ptr, o_ptr,
    stride_qt, stride_qh, stride_cb, stride_co, stride_ch, stride_bt, stride_ot, stride_oh,
    qk_scale, block_size, window,
    GROUP: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    mblk, b, h = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    q_start = tl.load(qs_ptr + b)
    q_len = tl.load(qs_ptr + b + 1) - q_start
    if mblk * BLOCK_M >= q_len:
        return
    seq_len = tl.load(sl_ptr + b)
    rows = mblk * BLOCK_M + tl.arange(0, BLOCK_M)
    q_pos = seq_len - q_len + rows
    d = tl.arange(0, D_PAD)
    qd_mask = (rows[:, None] < q_len) & (d[None, :] < HEAD_DIM)
    tok_rows = (q_start + rows).to(tl.int64)
    q = tl.load(q_ptr + tok_rows[:, None] * stride_qt + h * stride_qh + d[None, :], mask=qd_mask, other=0.0)
    kvh = h // GROUP

    m = tl.full([BLOCK_M], NEG_BIG, dtype=tl.float32)
    denom = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D_PAD], dtype=tl.float32)
    lo = tl.maximum(seq_len - q_len + mblk * BLOCK_M - window + 1, 0)
    hi = tl.minimum(seq_len - q_len + (mblk + 1) * BLOCK_M, seq_len)
    bt_row = bt_ptr + b.to(tl.int64) * stride_bt
    for tok0 in range(lo, hi, BLOCK_N):
        toks = tok0 + tl.arange(0, BLOCK_N)
        t_mask = toks < hi
        blk = tl.load(bt_row + toks // block_size, mask=t_mask, other=0).to(tl.int64)
        kv_offs = (blk * stride_cb + (toks % block_size) * stride_co + kvh * stride_ch)[:, None] + d[None, :]
        kv_mask = t_mask[:, None] & (d[None, :] < HEAD_DIM)
        k = tl.load(kc_ptr + kv_offs, mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        visible = (
            (toks[None, :] <= q_pos[:, None]) & (toks[None, :] > q_pos[:, None] - window) & t_mask[None, :]
        )
        s = tl.where(visible, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        v = tl.load(vc_ptr + kv_offs, mask=kv_mask, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    out = acc / tl.maximum(denom, 1e-30)[:, None]
    dst = o_ptr + tok_rows[:, None] * stride_ot + h * stride_oh + d[None, :]
    tl.store(dst, out.to(o_ptr.dtype.element_ty), mask=qd_mask)


def paged_prefill_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start: torch.Tensor,
    max_query_len: int,
    sliding_window: int | None = None,
    *,
    BLOCK_M: int = 64,
    BLOCK_N: int = 64,
    num_warps: int = 4,
    num_stages: int = 2,
) -> torch.Tensor:
    t, h, d = q.shape
    out = torch.empty((t, h, d), dtype=q.dtype, device=q.device)
    grid = (triton.cdiv(max_query_len, BLOCK_M), seq_lens.shape[0], h)
    _prefill_kernel[grid](
        q, k_cache, v_cache, block_tables, seq_lens, query_start, out,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        LOG2E / math.sqrt(d), k_cache.shape[1], sliding_window or NO_WINDOW,
        GROUP=h // k_cache.shape[2], HEAD_DIM=d, D_PAD=max(16, triton.next_power_of_2(d)),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    return out


def reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    query_start: torch.Tensor,
    max_query_len: int,
    sliding_window: int | None = None,
) -> torch.Tensor:
    _, bs, hkv, d = k_cache.shape
    group = q.shape[1] // hkv
    out = torch.empty_like(q)
    starts = query_start.tolist()
    for b, seq_len in enumerate(seq_lens.tolist()):
        lo, hi = starts[b], starts[b + 1]
        blocks = block_tables[b, : (seq_len + bs - 1) // bs].long()
        k = k_cache[blocks].reshape(-1, hkv, d)[:seq_len].repeat_interleave(group, dim=1).transpose(0, 1)
        v = v_cache[blocks].reshape(-1, hkv, d)[:seq_len].repeat_interleave(group, dim=1).transpose(0, 1)
        q_pos = torch.arange(seq_len - (hi - lo), seq_len, device=q.device)[:, None]
        k_pos = torch.arange(seq_len, device=q.device)[None, :]
        mask = k_pos <= q_pos
        if sliding_window:
            mask &= k_pos > q_pos - sliding_window
        o = torch.nn.functional.scaled_dot_product_attention(q[lo:hi].transpose(0, 1), k, v, attn_mask=mask)
        out[lo:hi] = o.transpose(0, 1)
    return out
