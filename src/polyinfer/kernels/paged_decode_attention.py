"""Flash-decoding over the paged KV pool: one query token per sequence, GQA-aware, split along the context.

Contract: `q [B, H, D]` (any batch and head strides, contiguous last dimension), the layer's
`k_cache, v_cache [num_blocks, block_size, Hkv, D]`, `block_tables [B, max_blocks]` int32 and
`seq_lens [B]` int32 (context length including this step's token, which must already be in the cache).
Returns `[B, H, D]` in q's dtype: softmax(q k^T * scale) v over the sequence's first `seq_len` cached
tokens (the last `sliding_window` of them when given), query head h reading kv head `h // (H // Hkv)`.

One program per (sequence, kv head, split) loads each K/V tile once for all H/Hkv query heads of its
group. NUM_SPLITS programs (by default `auto_splits`) share a long context (flash-decoding) and a
second kernel merges their partial results by log-sum-exp in a fixed order. BLOCK tokens are gathered
per step through the block table, so it need not relate to block_size. USE_DOT pads the query group to
16 rows to use tensor cores instead of CUDA-core FMAs.
"""

from __future__ import annotations

import functools
import math

import torch
import triton
import triton.language as tl

from polyinfer.kernels.pdl import enabled, launch_options, wait_then_release

KNOBS: dict[str, list] = {
    "BLOCK": [16, 32, 64, 128],
    "NUM_SPLITS": [1, 2, 4, 8, 16, 32],
    "USE_DOT": [0, 1],
    "num_warps": [2, 4, 8],
    "num_stages": [1, 2, 3],
    "pdl": [False, True],
}

LOG2E = 1.4426950408889634
# A finite "minus infinity": a fully masked tile then rescales by exp2(0) instead of exp2(nan).
NEG_BIG = tl.constexpr(-1.0e30)
NO_WINDOW = 1 << 30  # a window longer than any context: attend to everything


@triton.jit
def _decode_split_kernel(
    q_ptr, kc_ptr, vc_ptr, bt_ptr, sl_ptr, o_ptr, part_ptr, lse_ptr,
    stride_qb, stride_qh, stride_cb, stride_co, stride_ch, stride_bt, stride_ob, stride_oh,
    qk_scale, block_size, window,
    GROUP: tl.constexpr, GROUP_PAD: tl.constexpr, HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
    BLOCK: tl.constexpr, NUM_SPLITS: tl.constexpr, USE_DOT: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    b, kvh, split = tl.program_id(0).to(tl.int64), tl.program_id(1), tl.program_id(2)
    wait_then_release(PDL)
    seq_len = tl.load(sl_ptr + b)
    start = tl.maximum(seq_len - window, 0)
    per_split = tl.cdiv(tl.cdiv(seq_len - start, NUM_SPLITS), BLOCK) * BLOCK
    lo = start + split * per_split
    hi = tl.minimum(lo + per_split, seq_len)

    g, d = tl.arange(0, GROUP_PAD), tl.arange(0, D_PAD)
    heads = kvh * GROUP + g
    qd_mask = (g[:, None] < GROUP) & (d[None, :] < HEAD_DIM)
    q = tl.load(q_ptr + b * stride_qb + heads[:, None] * stride_qh + d[None, :], mask=qd_mask, other=0.0)
    if not USE_DOT:
        q = q.to(tl.float32)
    m = tl.full([GROUP_PAD], NEG_BIG, dtype=tl.float32)
    denom = tl.zeros([GROUP_PAD], dtype=tl.float32)
    acc = tl.zeros([GROUP_PAD, D_PAD], dtype=tl.float32)
    for tok0 in range(lo, hi, BLOCK):
        toks = tok0 + tl.arange(0, BLOCK)
        t_mask = toks < hi
        blk = tl.load(bt_ptr + b * stride_bt + toks // block_size, mask=t_mask, other=0).to(tl.int64)
        offs = blk * stride_cb + (toks % block_size) * stride_co + kvh * stride_ch
        kv_offs = offs[:, None] + d[None, :]
        kv_mask = t_mask[:, None] & (d[None, :] < HEAD_DIM)
        k = tl.load(kc_ptr + kv_offs, mask=kv_mask, other=0.0)
        if USE_DOT:
            s = tl.dot(q, tl.trans(k))
        else:
            s = tl.sum(q[:, None, :] * k.to(tl.float32)[None, :, :], axis=2)
        s = tl.where(t_mask[None, :], s * qk_scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp2(m - m_new)
        p = tl.exp2(s - m_new[:, None])
        denom = denom * alpha + tl.sum(p, axis=1)
        v = tl.load(vc_ptr + kv_offs, mask=kv_mask, other=0.0)
        if USE_DOT:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        else:
            acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v.to(tl.float32)[None, :, :], axis=1)
        m = m_new

    out = acc / tl.maximum(denom, 1e-30)[:, None]
    if NUM_SPLITS == 1:
        dst = o_ptr + b * stride_ob + heads[:, None] * stride_oh + d[None, :]
        tl.store(dst, out.to(o_ptr.dtype.element_ty), mask=qd_mask)
    else:
        # Partials are [B, H, NUM_SPLITS, HEAD_DIM] float32; an empty split has lse -inf and weighs 0.
        num_heads = tl.num_programs(1) * GROUP
        row = (b * num_heads + heads) * NUM_SPLITS + split
        tl.store(part_ptr + row[:, None] * HEAD_DIM + d[None, :], out, mask=qd_mask)
        lse = tl.where(denom > 0, m + tl.log2(tl.maximum(denom, 1e-30)), float("-inf"))
        tl.store(lse_ptr + row, lse, mask=g < GROUP)


@triton.jit
def _merge_splits_kernel(part_ptr, lse_ptr, o_ptr, stride_ob, stride_oh, H,
                         HEAD_DIM: tl.constexpr, D_PAD: tl.constexpr,
                         NUM_SPLITS: tl.constexpr, S_PAD: tl.constexpr, PDL: tl.constexpr):  # fmt: skip
    b, h = tl.program_id(0).to(tl.int64), tl.program_id(1)
    wait_then_release(PDL)
    s, d = tl.arange(0, S_PAD), tl.arange(0, D_PAD)
    rows = (b * H + h) * NUM_SPLITS + s
    lse = tl.load(lse_ptr + rows, mask=s < NUM_SPLITS, other=float("-inf"))
    w = tl.exp2(lse - tl.max(lse, axis=0))
    mask = (s[:, None] < NUM_SPLITS) & (d[None, :] < HEAD_DIM)
    part = tl.load(part_ptr + rows[:, None] * HEAD_DIM + d[None, :], mask=mask, other=0.0)
    out = tl.sum(w[:, None] * part, axis=0) / tl.sum(w, axis=0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + d, out.to(o_ptr.dtype.element_ty), mask=d < HEAD_DIM)


@functools.cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 8


def auto_splits(programs: int, device: torch.device, max_splits: int = 16) -> int:
    """Splits per (sequence, kv head) that give every multiprocessor about two programs: many at
    batch 1, where 8 kv heads alone would leave most of an H200 idle, none at large batches, where they
    only add partials to write and merge."""
    want = -(-2 * _multiprocessors(device) // programs)
    return min(max_splits, triton.next_power_of_2(want))


def paged_decode_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    sliding_window: int | None = None,
    *,
    BLOCK: int = 64,
    NUM_SPLITS: int | None = None,
    USE_DOT: int = 1,
    num_warps: int = 4,
    num_stages: int = 2,
    pdl: bool = False,
) -> torch.Tensor:
    b, h, d = q.shape
    hkv = k_cache.shape[2]
    group = h // hkv
    if NUM_SPLITS is None:
        NUM_SPLITS = auto_splits(b * hkv, q.device)
    out = torch.empty((b, h, d), dtype=q.dtype, device=q.device)
    part = torch.empty((b, h, NUM_SPLITS, d), dtype=torch.float32, device=q.device) if NUM_SPLITS > 1 else out
    lse = torch.empty((b, h, NUM_SPLITS), dtype=torch.float32, device=q.device) if NUM_SPLITS > 1 else out
    group_pad = triton.next_power_of_2(group)
    d_pad = triton.next_power_of_2(d)
    use_pdl = enabled(pdl, q)
    _decode_split_kernel[(b, hkv, NUM_SPLITS)](
        q, k_cache, v_cache, block_tables, seq_lens, out, part, lse,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        LOG2E / math.sqrt(d), k_cache.shape[1], sliding_window or NO_WINDOW,
        GROUP=group, GROUP_PAD=max(16, group_pad) if USE_DOT else group_pad, HEAD_DIM=d,
        D_PAD=max(16, d_pad) if USE_DOT else d_pad, BLOCK=BLOCK, NUM_SPLITS=NUM_SPLITS, USE_DOT=bool(USE_DOT),
        PDL=use_pdl, num_warps=num_warps, num_stages=num_stages, **launch_options(use_pdl),
    )  # fmt: skip
    if NUM_SPLITS > 1:
        _merge_splits_kernel[(b, h)](
            part, lse, out, out.stride(0), out.stride(1), h,
            HEAD_DIM=d, D_PAD=d_pad, NUM_SPLITS=NUM_SPLITS, S_PAD=triton.next_power_of_2(NUM_SPLITS),
            PDL=use_pdl, **launch_options(use_pdl),
        )  # fmt: skip
    return out


def reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    sliding_window: int | None = None,
) -> torch.Tensor:
    _, bs, hkv, d = k_cache.shape
    group = q.shape[1] // hkv
    out = torch.empty_like(q)
    for i, seq_len in enumerate(seq_lens.tolist()):
        blocks = block_tables[i, : (seq_len + bs - 1) // bs].long()
        start = max(0, seq_len - sliding_window) if sliding_window else 0
        k = k_cache[blocks].reshape(-1, hkv, d)[start:seq_len].repeat_interleave(group, dim=1)
        v = v_cache[blocks].reshape(-1, hkv, d)[start:seq_len].repeat_interleave(group, dim=1)
        o = torch.nn.functional.scaled_dot_product_attention(
            q[i][:, None], k.transpose(0, 1), v.transpose(0, 1)
        )
        out[i] = o[:, 0]
    return out
