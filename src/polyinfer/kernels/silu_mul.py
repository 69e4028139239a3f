"""Fused SwiGLU activation: `silu(gate) * up` from the fused gate-up projection's output.

Contract: `gate_up [M, 2 * I]` with the gate in columns `[0, I)` and up in `[I, 2I)` (the layout of
`torch.cat((gate_proj, up_proj))` as one weight), last dimension contiguous; returns `[M, I]` in the
same dtype. `silu(gate)` is rounded to the dtype before the product, as the unfused `F.silu(g) * u`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from polyinfer.kernels.pdl import enabled, launch_options, wait_then_release

KNOBS: dict[str, list] = {"BLOCK_N": [256, 512, 1024, 2048, 4096], "num_warps": [1, 2, 4, 8], "pdl": [False, True]}


@triton.jit
def _silu_mul_kernel(gu_ptr, out_ptr, inter, stride_gu, stride_out, BLOCK_N: tl.constexpr, PDL: tl.constexpr):
    row, pid = tl.program_id(0).to(tl.int64), tl.program_id(1)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < inter
    wait_then_release(PDL)
    gate = tl.load(gu_ptr + row * stride_gu + cols, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gu_ptr + row * stride_gu + inter + cols, mask=mask, other=0.0).to(tl.float32)
    act = (gate * tl.sigmoid(gate)).to(out_ptr.dtype.element_ty).to(tl.float32)
    tl.store(out_ptr + row * stride_out + cols, (act * up).to(out_ptr.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor, *, BLOCK_N: int = 1024, num_warps: int = 4, pdl: bool = False) -> torch.Tensor:
    m, two_i = gate_up.shape
    inter = two_i // 2
    out = torch.empty((m, inter), dtype=gate_up.dtype, device=gate_up.device)
    grid = (m, triton.cdiv(inter, BLOCK_N))
    use_pdl = enabled(pdl, gate_up)
    _silu_mul_kernel[grid](
        gate_up, out, inter, gate_up.stride(0), out.stride(0), BLOCK_N=BLOCK_N, PDL=use_pdl,
        num_warps=num_warps, **launch_options(use_pdl),
    )
    return out


def reference(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return torch.nn.functional.silu(gate) * up
