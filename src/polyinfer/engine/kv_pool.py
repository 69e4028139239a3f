"""The paged KV pool: one allocation for every layer's keys and values, addressed by block."""

from __future__ import annotations

import torch

from polyinfer.models.spec import ModelSpec


class KVPool:
    """Keys and values as `[num_layers, num_blocks, block_size, num_kv_heads, head_dim]` tensors.

    Slot `s` of a layer is `k[layer].view(-1, num_kv_heads, head_dim)[s]`, with
    `s = block * block_size + offset`. Candidates read and write it but never allocate their own.
    """

    def __init__(
        self,
        spec: ModelSpec,
        num_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (spec.num_layers, num_blocks, block_size, spec.num_kv_heads, spec.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.num_blocks = num_blocks
        self.block_size = block_size

    @property
    def num_layers(self) -> int:
        return int(self.k.shape[0])

    @property
    def nbytes(self) -> int:
        return 2 * self.k.numel() * self.k.element_size()

    def layer(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Layer i's caches, `[num_blocks, block_size, num_kv_heads, head_dim]` each (views)."""
        return self.k[i], self.v[i]

    def fill_blocks(self, blocks: list[int], value: float) -> None:
        """Overwrite whole blocks in every layer (verification poisons free blocks with NaN)."""
        if blocks:
            idx = torch.tensor(blocks, device=self.k.device)
            self.k[:, idx] = value
            self.v[:, idx] = value

    @staticmethod
    def bytes_per_block(spec: ModelSpec, block_size: int, dtype: torch.dtype) -> int:
        itemsize = torch.empty((), dtype=dtype).element_size()
        return 2 * spec.num_layers * block_size * spec.kv_size * itemsize
