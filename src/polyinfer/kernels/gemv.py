"""Decode-shaped projection `y = x @ weight.T (+ bias)` for few rows: the QKV, O, gate-up and down GEMVs.

Contract: `x [M, K]` (M small, 1..64), `weight [N, K]` row-major (an nn.Linear weight), optional
`bias [N]`, all of one float dtype with the last dimension contiguous; returns `y [M, N]` in that dtype,
accumulated in float32 and rounded once. Decode is bound by reading `weight`, so each program streams a
`[BLOCK_N, BLOCK_K]` tile along K (coalesced: K is contiguous) and SPLIT_K programs share a row of
tiles when N alone gives too few programs to fill the GPU; their float32 partials are summed in a fixed
order by a second kernel, so results do not depend on scheduling. Up to FMA_ROWS rows are multiplied
with CUDA-core FMAs; more rows are padded to a tile of 16 to 64 and use `tl.dot` (tensor cores need 16).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyinfer.kernels.pdl import enabled, launch_options, wait_then_release

KNOBS: dict[str, list] = {
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [64, 128, 256, 512],
    "SPLIT_K": [1, 2, 4, 8],
    "FMA_ROWS": [1, 2, 4, 8],
    "num_warps": [2, 4, 8],
    "num_stages": [1, 2, 3, 4],
    "pdl": [False, True],
}

REDUCE_BLOCK = 1024


@triton.jit
def gemv_tile(x_ptr, w_ptr, stride_xm, stride_wn, rm, rn, M, N, K, k_start, k_end,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              PDL: tl.constexpr):  # fmt: skip
    """float32 `[BLOCK_M, BLOCK_N]` tile of `x[rm] @ w[rn].T` over columns `k_start:k_end` (BLOCK_K-aligned).

    With PDL, the first weight tile (weights: no kernel writes them) is read before waiting for the
    kernel that writes `x`."""
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm[:, None].to(tl.int64) * stride_xm + rk[None, :]
    w_ptrs = w_ptr + rn[:, None].to(tl.int64) * stride_wn + rk[None, :]
    m_mask, n_mask = rm[:, None] < M, rn[:, None] < N
    if BLOCK_M >= 16:
        wait_then_release(PDL)
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k in range(k_start, k_end, BLOCK_K):
            k_mask = k + rk[None, :] < K
            x = tl.load(x_ptrs + k, mask=m_mask & k_mask, other=0.0)
            w = tl.load(w_ptrs + k, mask=n_mask & k_mask, other=0.0)
            acc = tl.dot(x, tl.trans(w), acc)
        return acc
    else:
        # Accumulate products elementwise and reduce over K once at the end, not every step. The first
        # step is peeled so that its weight tile can be in flight while a PDL launch waits.
        k_mask = k_start + rk[None, :] < K
        w = tl.load(w_ptrs + k_start, mask=n_mask & k_mask, other=0.0).to(tl.float32)
        wait_then_release(PDL)
        x = tl.load(x_ptrs + k_start, mask=m_mask & k_mask, other=0.0).to(tl.float32)
        acc3 = x[:, None, :] * w[None, :, :]
        for k in range(k_start + BLOCK_K, k_end, BLOCK_K):
            k_mask = k + rk[None, :] < K
            x = tl.load(x_ptrs + k, mask=m_mask & k_mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptrs + k, mask=n_mask & k_mask, other=0.0).to(tl.float32)
            acc3 += x[:, None, :] * w[None, :, :]
        return tl.sum(acc3, axis=2)


@triton.jit
def _gemv_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr,
    M, N, K, stride_xm, stride_wn, stride_ym, stride_ys, k_per_split,
    HAS_BIAS: tl.constexpr, PARTIAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    pid_n, pid_k, pid_m = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    acc = gemv_tile(
        x_ptr, w_ptr, stride_xm, stride_wn, rm, rn, M, N, K, k_start, k_end, BLOCK_M, BLOCK_N, BLOCK_K, PDL
    )
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    offs = rm[:, None].to(tl.int64) * stride_ym + rn[None, :]
    if PARTIAL:
        tl.store(y_ptr + pid_k * stride_ys + offs, acc, mask=mask)
    else:
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _split_k_reduce_kernel(p_ptr, b_ptr, y_ptr, N, stride_ps, stride_pm, stride_ym,
                           SPLIT_K: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK: tl.constexpr,
                           PDL: tl.constexpr):  # fmt: skip
    row, pid = tl.program_id(0).to(tl.int64), tl.program_id(1)
    cols = pid * BLOCK + tl.arange(0, BLOCK)
    mask = cols < N
    wait_then_release(PDL)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(p_ptr + s * stride_ps + row * stride_pm + cols, mask=mask, other=0.0)
    if HAS_BIAS:
        acc += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * stride_ym + cols, acc.to(y_ptr.dtype.element_ty), mask=mask)


def rows_tile(m: int, fma_rows: int) -> int:
    """Rows per tile: M padded to a power of two, for FMAs up to `fma_rows` rows, else 16 to 64 for `tl.dot`."""
    block = triton.next_power_of_2(m)
    return block if m <= fma_rows else min(64, max(16, block))


def gemv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    BLOCK_N: int = 32,
    BLOCK_K: int = 256,
    SPLIT_K: int = 1,
    FMA_ROWS: int = 1,
    num_warps: int = 4,
    num_stages: int = 3,
    pdl: bool = False,
) -> torch.Tensor:
    m, k = x.shape
    n = weight.shape[0]
    block_m = rows_tile(m, FMA_ROWS)
    k_per_split = triton.cdiv(triton.cdiv(k, SPLIT_K), BLOCK_K) * BLOCK_K
    splits = triton.cdiv(k, k_per_split)
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    partial = torch.empty((splits, m, n), dtype=torch.float32, device=x.device) if splits > 1 else y
    b = bias if bias is not None else weight
    grid = (triton.cdiv(n, BLOCK_N), splits, triton.cdiv(m, block_m))
    use_pdl = enabled(pdl, x)
    _gemv_kernel[grid](
        x, weight, b, partial,
        m, n, k, x.stride(0), weight.stride(0), partial.stride(-2), partial.stride(0), k_per_split,
        HAS_BIAS=bias is not None, PARTIAL=splits > 1,
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, PDL=use_pdl,
        num_warps=num_warps, num_stages=num_stages, **launch_options(use_pdl),
    )  # fmt: skip
    if splits > 1:
        _split_k_reduce_kernel[(m, triton.cdiv(n, REDUCE_BLOCK))](
            partial, b, y, n, partial.stride(0), partial.stride(1), y.stride(0),
            SPLIT_K=splits, HAS_BIAS=bias is not None, BLOCK=REDUCE_BLOCK, PDL=use_pdl, **launch_options(use_pdl),
        )  # fmt: skip
    return y


def reference(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)
