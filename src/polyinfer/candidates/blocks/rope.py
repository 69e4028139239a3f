"""Rotary embedding: tables computed per step or looked up from a table built once at swap time, and the
rotation plus the paged-KV write either as PyTorch ops or as one Triton launch."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from polyinfer.candidates.blocks.ops import apply_rope, compiled
from polyinfer.candidates.reference import rms_norm
from polyinfer.engine.batch import Batch
from polyinfer.models.spec import ModelSpec


class Rope:
    """cos/sin `[T, 1, head_dim]` for positions, bit-identical either way (same float32 arithmetic)."""

    def __init__(self, spec: ModelSpec, device: torch.device, dtype: torch.dtype, table: bool) -> None:
        self.inv_freq = spec.rope.inv_freq(spec.head_dim).to(device)
        self.dtype = dtype
        self.cos = self.sin = None
        if table:
            self.cos, self.sin = self._compute(torch.arange(spec.max_position_embeddings, device=device))

    def _compute(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None, :]
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def __call__(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cos is None or self.sin is None:
            return self._compute(positions)
        return self.cos[positions], self.sin[positions]


class RopeKVWrite:
    """Rotate q and k, write k and v to the layer's paged caches, return the rotated q `[T, H, D]`.

    PyTorch: `Rope` tables, the rotation (optionally compiled) and two indexed writes. Triton: the
    `rope_kv_write` kernel, one launch with its own float32 tables (the same products, so the same values).
    """

    def __init__(self, kind: str, spec: ModelSpec, device: torch.device, dtype: torch.dtype, table: bool,
                 compile_regions: bool, pdl: bool = False) -> None:
        self.spec = spec
        self.rotate = compiled(apply_rope, compile_regions)
        self.kernel: Callable[..., torch.Tensor] | None = None
        self.rope: Rope | None = None
        if kind == "triton":
            from polyinfer.kernels.rope_kv_write import rope_kv_write, rope_tables

            self.kernel = functools.partial(rope_kv_write, pdl=pdl)
            inv_freq = spec.rope.inv_freq(spec.head_dim).to(device)
            self.cos, self.sin = rope_tables(inv_freq, spec.max_position_embeddings)
        else:
            self.rope = Rope(spec, device, dtype, table)

    def tables(self, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's cos/sin for the PyTorch path; the kernel's whole float32 tables for the kernel."""
        return self.rope(batch.positions) if self.rope is not None else (self.cos, self.sin)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, batch: Batch,
                 tables: tuple[torch.Tensor, torch.Tensor], k_cache: torch.Tensor, v_cache: torch.Tensor,
                 q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float) -> torch.Tensor:
        if self.kernel is not None:
            return self.kernel(q, k, v, batch.positions, batch.slot_mapping, *tables, k_cache, v_cache,
                               q_norm, k_norm, eps)
        if q_norm is not None and k_norm is not None:
            q, k = rms_norm(q, q_norm, eps), rms_norm(k, k_norm, eps)
        q, k = self.rotate(q, k, *tables)
        hkv, d = self.spec.num_kv_heads, self.spec.head_dim
        k_cache.view(-1, hkv, d)[batch.slot_mapping] = k
        v_cache.view(-1, hkv, d)[batch.slot_mapping] = v
        return q
