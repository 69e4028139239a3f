"""EngineConfig: device, precision, KV pool and scheduler limits, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyinfer.engine.scheduler import SchedulerConfig
from polyinfer.errors import PolyinferError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise PolyinferError(f"unknown dtype {name!r}; use one of float32, bfloat16, float16") from None


@dataclass(frozen=True, slots=True)
class EngineConfig:
    device: str = "cpu"
    dtype: str = "float32"
    block_size: int = 16
    kv_cache_tokens: int | None = None  # pool capacity; default: what the memory budget allows
    kv_cache_gb: float | None = None  # memory budget for the pool; default 0.5 GiB on CPU, 90% of free on CUDA
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_prefill_chunk: int = 512
    prefix_caching: bool = False
    async_steps: bool = False  # schedule and launch step n+1 before reading step n's tokens (engine.py)
    seed: int = 0

    def __post_init__(self) -> None:
        parse_dtype(self.dtype)
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise PolyinferError(f"block_size must be a power of two, got {self.block_size}")
        for name in ("max_num_seqs", "max_num_batched_tokens", "max_prefill_chunk", "kv_cache_tokens",
                     "max_model_len"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise PolyinferError(f"{name} must be >= 1, got {value}")
        if self.kv_cache_gb is not None and self.kv_cache_gb <= 0:
            raise PolyinferError(f"kv_cache_gb must be > 0, got {self.kv_cache_gb}")
        if not (self.device == "cpu" or self.device.startswith("cuda")):
            raise PolyinferError(f"device must be 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.device.startswith("cuda") and not torch.cuda.is_available():
            raise PolyinferError("device 'cuda' was asked for but torch sees no CUDA GPU")

    @property
    def torch_dtype(self) -> torch.dtype:
        return parse_dtype(self.dtype)

    @property
    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(self.max_num_seqs, self.max_num_batched_tokens, self.max_prefill_chunk)

    def pool_blocks(self, bytes_per_block: int, max_model_len: int) -> int:
        """How many KV blocks to allocate: what the work can use, capped by the memory budget."""
        if self.kv_cache_tokens is not None:
            return -(-self.kv_cache_tokens // self.block_size)
        wanted = self.max_num_seqs * -(-max_model_len // self.block_size)
        if self.kv_cache_gb is not None:
            budget = int(self.kv_cache_gb * 2**30)
        elif self.device.startswith("cuda"):
            free, _ = torch.cuda.mem_get_info(torch.device(self.device))
            budget = int(0.9 * free)
        else:
            budget = 2**29
        return max(1, min(wanted, budget // bytes_per_block))
