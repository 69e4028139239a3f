"""The per-layer operations of the `fast` family, each in its PyTorch form, its Triton kernel, or (for the
elementwise regions) its PyTorch form under `torch.compile`.

Every form computes what the reference computes, rounding where it rounds: the Triton kernels' contracts
say so and tests/kernels hold them to it. The residual add is folded into the norm that follows it
(`norm(x, w, residual) -> (rms_norm(x + residual), x + residual)`), the shape the fused kernel wants.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F

from polyinfer.candidates.reference import rms_norm, rotate_half

GEMV_MAX_ROWS = 16  # decode-shaped: at most this many rows go to the GEMV kernel, more to cuBLAS
GEMV_MAX_SPLIT = 8


def add_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 residual: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    summed = x if residual is None else x + residual
    return rms_norm(summed, weight, eps), summed


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
               sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def compiled(fn: Callable, on: bool) -> Callable:
    """`fn` itself, or `fn` under torch.compile (one graph, sizes symbolic so batch shapes share it)."""
    return torch.compile(fn, dynamic=True, fullgraph=True) if on else fn


class Norm:
    """RMSNorm with the preceding residual add: PyTorch (optionally compiled) or the fused Triton kernel."""

    def __init__(self, kind: str, eps: float, compile_regions: bool, pdl: bool = False) -> None:
        self.eps = eps
        self.torch_fn = compiled(add_rms_norm, compile_regions)
        self.kernel = None
        if kind == "triton":
            from polyinfer.kernels.rms_norm import rms_norm as kernel

            self.kernel = functools.partial(kernel, pdl=pdl)

    def __call__(self, x: torch.Tensor, weight: torch.Tensor,
                 residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.kernel is None:
            return self.torch_fn(x, weight, self.eps, residual)
        if residual is None:
            out = self.kernel(x, weight, self.eps)
            assert isinstance(out, torch.Tensor)
            return out, x
        out, summed = self.kernel(x, weight, self.eps, residual)
        return out, summed


class Linear:
    """`x @ w.T (+ bias)`: cuBLAS, or for decode-shaped inputs (few rows) the Triton GEMV.

    The GEMV's split over K is chosen per weight shape so that the launch has at least two programs per
    multiprocessor (a 2048-wide projection has too few output tiles alone to fill the GPU).
    """

    def __init__(self, kind: str, block_n: int, block_k: int, device: torch.device, pdl: bool = False) -> None:
        self.block_n, self.block_k, self.pdl = block_n, block_k, pdl
        self.programs = 2 * (torch.cuda.get_device_properties(device).multi_processor_count
                             if device.type == "cuda" else 4)
        self.kernel = None
        if kind == "triton":
            from polyinfer.kernels.gemv import gemv

            self.kernel = gemv

    def split_k(self, n: int, k: int) -> int:
        tiles, split = -(-n // self.block_n), 1
        while tiles * split < self.programs and split < GEMV_MAX_SPLIT and k >= 2 * split * self.block_k:
            split *= 2
        return split

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if self.kernel is None or x.shape[0] > GEMV_MAX_ROWS:
            return F.linear(x, weight, bias)
        n, k = weight.shape
        return self.kernel(x, weight, bias, BLOCK_N=self.block_n, BLOCK_K=self.block_k,
                           SPLIT_K=self.split_k(n, k), pdl=self.pdl)


class Activation:
    """SiLU(gate) * up over a fused `[T, 2 * intermediate]` gate-up output."""

    def __init__(self, kind: str, compile_regions: bool, pdl: bool = False) -> None:
        self.fn = compiled(silu_mul, compile_regions)
        if kind == "triton":
            from polyinfer.kernels.silu_mul import silu_mul as kernel

            self.fn = functools.partial(kernel, pdl=pdl)

    def __call__(self, gate_up: torch.Tensor) -> torch.Tensor:
        return self.fn(gate_up)
