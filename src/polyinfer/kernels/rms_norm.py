"""Fused RMSNorm over rows, optionally adding a residual first.

Contract: `x [M, N]` and `weight [N]` of one float dtype, rows contiguous in the last dimension.
`rms_norm(x, weight, eps)` returns `weight * (x / rms(x)).to(x.dtype)` with the statistics in float32,
exactly as the reference forward's `rms_norm`. With `residual [M, N]` it returns `(normed, summed)`
where `summed = x + residual` (rounded to the dtype, as the unfused add would be) is what gets
normalised and what the caller carries as the next residual. Inputs are never modified.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyinfer.kernels.pdl import enabled, launch_options, wait_then_release

KNOBS: dict[str, list] = {"BLOCK_N": [512, 1024, 2048, 4096, 8192], "num_warps": [1, 2, 4, 8, 16],
                          "pdl": [False, True]}


@triton.jit
def _load_row_chunk(x_row, r_row, s_row, cols, mask, HAS_RESIDUAL: tl.constexpr):
    x = tl.load(x_row + cols, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        # Round the sum to the storage dtype first so the statistics match the unfused add.
        x = x + tl.load(r_row + cols, mask=mask, other=0.0)
        tl.store(s_row + cols, x, mask=mask)
    return x.to(tl.float32)


@triton.jit
def _rms_norm_kernel(
    x_ptr, r_ptr, w_ptr, out_ptr, sum_ptr,
    stride_x, stride_r, stride_out, stride_sum,
    N, eps,
    HAS_RESIDUAL: tl.constexpr, BLOCK_N: tl.constexpr, NUM_CHUNKS: tl.constexpr, PDL: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)
    x_row, r_row = x_ptr + row * stride_x, r_ptr + row * stride_r
    out_row, s_row = out_ptr + row * stride_out, sum_ptr + row * stride_sum
    cols = tl.arange(0, BLOCK_N)
    if NUM_CHUNKS == 1:
        # The whole row fits one tile: keep it in registers between the two passes.
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)  # weights: no kernel writes them
        wait_then_release(PDL)
        x = _load_row_chunk(x_row, r_row, s_row, cols, mask, HAS_RESIDUAL)
        inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        normed = (x * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
        tl.store(out_row + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)
    else:
        wait_then_release(PDL)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for c in range(NUM_CHUNKS):
            mask = c * BLOCK_N + cols < N
            x = _load_row_chunk(x_row, r_row, s_row, c * BLOCK_N + cols, mask, HAS_RESIDUAL)
            acc += x * x
        inv = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        for c in range(NUM_CHUNKS):
            offs = c * BLOCK_N + cols
            mask = offs < N
            # Re-read the inputs (not the sum just stored: other threads may own those addresses).
            x = tl.load(x_row + offs, mask=mask, other=0.0)
            if HAS_RESIDUAL:
                x = x + tl.load(r_row + offs, mask=mask, other=0.0)
            w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            normed = (x.to(tl.float32) * inv).to(out_ptr.dtype.element_ty).to(tl.float32)
            tl.store(out_row + offs, (normed * w).to(out_ptr.dtype.element_ty), mask=mask)


def rms_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float,
    residual: torch.Tensor | None = None,
    *,
    BLOCK_N: int | None = None,
    num_warps: int = 4,
    pdl: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """RMSNorm of `x` (plus `residual` first, when given). BLOCK_N=None takes the whole row in one tile."""
    m, n = x.shape
    block = BLOCK_N or triton.next_power_of_2(n)
    out = torch.empty_like(x)
    summed = torch.empty_like(x) if residual is not None else out
    res = residual if residual is not None else x
    use_pdl = enabled(pdl, x)
    _rms_norm_kernel[(m,)](
        x, res, weight, out, summed,
        x.stride(0), res.stride(0), out.stride(0), summed.stride(0),
        n, eps,
        HAS_RESIDUAL=residual is not None, BLOCK_N=block, NUM_CHUNKS=triton.cdiv(n, block), PDL=use_pdl,
        num_warps=num_warps, **launch_options(use_pdl),
    )  # fmt: skip
    return out if residual is None else (out, summed)


def reference(
    x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    summed = x if residual is None else x + residual
    xf = summed.float()
    normed = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return normed if residual is None else (normed, summed)
