"""Rotary embedding tables: computed per step, or looked up from a table built once at swap time."""

from __future__ import annotations

import torch

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
