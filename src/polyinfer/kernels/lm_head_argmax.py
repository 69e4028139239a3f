"""Greedy sampling fused into the LM head: argmax over `x @ weight.T` without materialising the logits.

Contract: `x [M, K]` (final-normed hidden rows, M small), `weight [V, K]` row-major, one float dtype,
last dimension contiguous. Returns int64 token ids `[M]`, equal to
`F.linear(x, weight).float().argmax(-1)`: each logit is accumulated in float32 and rounded to x's dtype
before comparing, as the unfused logits are, and ties go to the lowest token id.

The first kernel computes a `[BLOCK_M, BLOCK_N]` logit tile per program over the full K (the vocabulary
alone gives thousands of programs, so there is no split-K) with gemv's tile (FMA_ROWS as there) and
keeps only each row's best value and index; a second kernel reduces the `[M, V / BLOCK_N]` candidates.
Only those candidates reach memory.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyinfer.kernels.gemv import gemv_tile, rows_tile

KNOBS: dict[str, list[int]] = {
    "BLOCK_N": [16, 32, 64, 128],
    "BLOCK_K": [64, 128, 256, 512],
    "FMA_ROWS": [1, 2, 4, 8],
    "num_warps": [2, 4, 8],
    "num_stages": [1, 2, 3, 4],
}

REDUCE_BLOCK = 1024


@triton.jit
def _tile_argmax_kernel(x_ptr, w_ptr, val_ptr, idx_ptr, M, V, K, stride_xm, stride_wn, num_tiles,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    pid_n, pid_m = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    logits = gemv_tile(x_ptr, w_ptr, stride_xm, stride_wn, rm, rn, M, V, K, 0, K, BLOCK_M, BLOCK_N, BLOCK_K, False)
    logits = logits.to(x_ptr.dtype.element_ty).to(tl.float32)
    logits = tl.where(rn[None, :] < V, logits, float("-inf"))
    best, arg = tl.max(logits, axis=1, return_indices=True, return_indices_tie_break_left=True)
    dst = rm.to(tl.int64) * num_tiles + pid_n
    tl.store(val_ptr + dst, best, mask=rm < M)
    tl.store(idx_ptr + dst, pid_n * BLOCK_N + arg, mask=rm < M)


@triton.jit
def _reduce_kernel(val_ptr, idx_ptr, out_ptr, num_tiles, V, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    best = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    best_idx = tl.full([BLOCK], V, dtype=tl.int32)
    for c in range(0, num_tiles, BLOCK):
        offs = c + tl.arange(0, BLOCK)
        mask = offs < num_tiles
        v = tl.load(val_ptr + row * num_tiles + offs, mask=mask, other=float("-inf"))
        i = tl.load(idx_ptr + row * num_tiles + offs, mask=mask, other=V)
        # Each lane sees its tiles in increasing token order, so a strict '>' keeps the lowest id on ties.
        take = v > best
        best = tl.where(take, v, best)
        best_idx = tl.where(take, i, best_idx)
    top = tl.max(best, axis=0)
    token = tl.min(tl.where(best == top, best_idx, V), axis=0)
    tl.store(out_ptr + row, token.to(tl.int64))


def lm_head_argmax(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    BLOCK_N: int = 32,
    BLOCK_K: int = 256,
    FMA_ROWS: int = 1,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    m, k = x.shape
    vocab = weight.shape[0]
    block_m = rows_tile(m, FMA_ROWS)
    num_tiles = triton.cdiv(vocab, BLOCK_N)
    vals = torch.empty((m, num_tiles), dtype=torch.float32, device=x.device)
    idx = torch.empty((m, num_tiles), dtype=torch.int32, device=x.device)
    _tile_argmax_kernel[(num_tiles, triton.cdiv(m, block_m))](
        x, weight, vals, idx, m, vocab, k, x.stride(0), weight.stride(0), num_tiles,
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    out = torch.empty((m,), dtype=torch.int64, device=x.device)
    _reduce_kernel[(m,)](
        vals, idx, out, num_tiles, vocab, BLOCK=min(REDUCE_BLOCK, triton.next_power_of_2(num_tiles))
    )
    return out


def reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight).float().argmax(-1)
