"""RoPE on queries and keys plus the paged-KV write, in one launch (optionally Qwen3's per-head q/k norm).

Contract: `q [T, H, D]`, `k, v [T, Hkv, D]` (views of a fused QKV output are fine: any token and head
strides, contiguous last dimension), `positions [T]` int64, `slot_mapping [T]` int64 (a negative slot
skips the token's write: CUDA-graph padding), `cos, sin [max_positions, D/2]` float32 from
`rope_tables`, and the layer's `k_cache, v_cache [num_blocks, block_size, Hkv, D]`. Returns the rotated
queries as a new contiguous `[T, H, D]` tensor; writes the rotated keys and the values to slot
`slot_mapping[t]` of the caches; never modifies `q`, `k` or `v`. With `q_norm, k_norm [D]` each head is
RMS-normalised (float32 statistics, `eps`) before the rotation. Rotation is rotate-half (NeoX/HF);
cos and sin are rounded to the activation dtype first, as the reference forward's tables are.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyinfer.kernels.pdl import enabled, launch_options, wait_then_release

KNOBS: dict[str, list] = {"BLOCK_H": [1, 2, 4, 8, 16], "num_warps": [1, 2, 4, 8], "pdl": [False, True]}


def rope_tables(inv_freq: torch.Tensor, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float32 `cos, sin [max_positions, D/2]`: the same products `position * inv_freq` as the reference."""
    freqs = torch.arange(max_positions, device=inv_freq.device).float()[:, None] * inv_freq.float()[None, :]
    return freqs.cos(), freqs.sin()


@triton.jit
def _normed_halves(x1, x2, w_ptr, half, dmask, eps, HALF: tl.constexpr, DTYPE: tl.constexpr):
    inv = tl.rsqrt((tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)) / (2 * HALF) + eps)[:, None]
    w1 = tl.load(w_ptr + half, mask=dmask, other=0.0).to(tl.float32)[None, :]
    w2 = tl.load(w_ptr + HALF + half, mask=dmask, other=0.0).to(tl.float32)[None, :]
    # Round where the unfused norm rounds (after normalising, after the weight) to match it in bf16.
    x1 = ((x1 * inv).to(DTYPE).to(tl.float32) * w1).to(DTYPE).to(tl.float32)
    x2 = ((x2 * inv).to(DTYPE).to(tl.float32) * w2).to(DTYPE).to(tl.float32)
    return x1, x2


@triton.jit
def _rope_kv_write_kernel(
    q_ptr, k_ptr, v_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, kc_ptr, vc_ptr, qn_ptr, kn_ptr, qo_ptr,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_cs,
    stride_cb, stride_co, stride_ch, stride_ot, stride_oh,
    H, HKV, block_size, eps,
    HALF: tl.constexpr, HALF_PAD: tl.constexpr, BLOCK_H: tl.constexpr, HAS_NORM: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    t, hb = tl.program_id(0).to(tl.int64), tl.program_id(1)
    dtype = qo_ptr.dtype.element_ty
    half = tl.arange(0, HALF_PAD)
    dmask = half < HALF
    wait_then_release(PDL)
    pos = tl.load(pos_ptr + t)
    c = tl.load(cos_ptr + pos * stride_cs + half, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    s = tl.load(sin_ptr + pos * stride_cs + half, mask=dmask, other=0.0).to(dtype).to(tl.float32)[None, :]
    num_q_blocks = tl.cdiv(H, BLOCK_H)
    if hb < num_q_blocks:
        heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)
        mask = (heads[:, None] < H) & dmask[None, :]
        src = q_ptr + t * stride_qt + heads[:, None] * stride_qh + half[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        if HAS_NORM:
            x1, x2 = _normed_halves(x1, x2, qn_ptr, half, dmask, eps, HALF, dtype)
        dst = qo_ptr + t * stride_ot + heads[:, None] * stride_oh + half[None, :]
        tl.store(dst, (x1 * c - x2 * s).to(dtype), mask=mask)
        tl.store(dst + HALF, (x2 * c + x1 * s).to(dtype), mask=mask)
    else:
        heads = (hb - num_q_blocks) * BLOCK_H + tl.arange(0, BLOCK_H)
        slot = tl.load(slot_ptr + t)
        mask = (heads[:, None] < HKV) & dmask[None, :] & (slot >= 0)
        src = k_ptr + t * stride_kt + heads[:, None] * stride_kh + half[None, :]
        x1 = tl.load(src, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF, mask=mask, other=0.0).to(tl.float32)
        if HAS_NORM:
            x1, x2 = _normed_halves(x1, x2, kn_ptr, half, dmask, eps, HALF, dtype)
        slot = tl.maximum(slot, 0)
        cache_offs = (slot // block_size) * stride_cb + (slot % block_size) * stride_co
        cache_offs += heads[:, None] * stride_ch + half[None, :]
        tl.store(kc_ptr + cache_offs, (x1 * c - x2 * s).to(kc_ptr.dtype.element_ty), mask=mask)
        tl.store(kc_ptr + cache_offs + HALF, (x2 * c + x1 * s).to(kc_ptr.dtype.element_ty), mask=mask)
        v_src = v_ptr + t * stride_vt + heads[:, None] * stride_vh + half[None, :]
        tl.store(vc_ptr + cache_offs, tl.load(v_src, mask=mask), mask=mask)
        tl.store(vc_ptr + cache_offs + HALF, tl.load(v_src + HALF, mask=mask), mask=mask)


def rope_kv_write(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
    *,
    BLOCK_H: int = 4,
    num_warps: int = 4,
    pdl: bool = False,
) -> torch.Tensor:
    t, h, d = q.shape
    hkv = k.shape[1]
    q_out = torch.empty((t, h, d), dtype=q.dtype, device=q.device)
    has_norm = q_norm is not None and k_norm is not None
    qn = q_norm if q_norm is not None else cos
    kn = k_norm if k_norm is not None else cos
    grid = (t, triton.cdiv(h, BLOCK_H) + triton.cdiv(hkv, BLOCK_H))
    use_pdl = enabled(pdl, q)
    _rope_kv_write_kernel[grid](
        q, k, v, positions, slot_mapping, cos, sin, k_cache, v_cache, qn, kn, q_out,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1), cos.stride(0),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), q_out.stride(0), q_out.stride(1),
        h, hkv, k_cache.shape[1], eps,
        HALF=d // 2, HALF_PAD=triton.next_power_of_2(d // 2), BLOCK_H=BLOCK_H, HAS_NORM=has_norm,
        PDL=use_pdl, num_warps=num_warps, **launch_options(use_pdl),
    )  # fmt: skip
    return q_out


def _head_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    slot_mapping: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    q_norm: torch.Tensor | None = None,
    k_norm: torch.Tensor | None = None,
    eps: float = 1e-6,
) -> torch.Tensor:
    if q_norm is not None and k_norm is not None:
        q, k = _head_rms_norm(q, q_norm, eps), _head_rms_norm(k, k_norm, eps)
    c, s = cos[positions], sin[positions]
    c = torch.cat((c, c), dim=-1)[:, None, :].to(q.dtype)
    s = torch.cat((s, s), dim=-1)[:, None, :].to(q.dtype)
    q, k = _rotate(q, c, s), _rotate(k, c, s)
    keep = slot_mapping >= 0
    hkv, d = k.shape[1], k.shape[2]
    k_cache.view(-1, hkv, d)[slot_mapping[keep]] = k[keep].to(k_cache.dtype)
    v_cache.view(-1, hkv, d)[slot_mapping[keep]] = v[keep].to(v_cache.dtype)
    return q.contiguous()
