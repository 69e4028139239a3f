"""Kernel tests run under Triton's interpreter on the CPU (float32), or compiled on a GPU (bfloat16).

The interpreter must be chosen before any kernel module is imported. `TRITON_INTERPRET=0 pytest
tests/kernels` on a CUDA machine runs the same tests compiled, in bfloat16, with bf16 tolerances.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import random
from collections.abc import Callable

import pytest
import torch

ON_GPU = os.environ["TRITON_INTERPRET"] == "0" and torch.cuda.is_available()
TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}

Check = Callable[..., None]
PagedKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@pytest.fixture
def device() -> str:
    return "cuda" if ON_GPU else "cpu"


@pytest.fixture
def dtype() -> torch.dtype:
    # The interpreter computes bfloat16 wrongly, so the CPU tier checks float32; the GPU tier, bfloat16.
    return torch.bfloat16 if ON_GPU else torch.float32


@pytest.fixture
def seed() -> int:
    """A fresh seed per test, applied to torch; assertion messages name it so a failure can be replayed."""
    value = random.randrange(2**31)
    torch.manual_seed(value)
    return value


@pytest.fixture
def check(seed: int) -> Check:
    """`check(actual, expected, scale=1.0)`: close within the expected dtype's tolerance times `scale`."""

    def close(actual: torch.Tensor, expected: torch.Tensor, scale: float = 1.0) -> None:
        tol = TOLERANCE[expected.dtype] * scale
        torch.testing.assert_close(
            actual.float(), expected.float(), atol=tol, rtol=tol, msg=lambda m: f"seed={seed}: {m}"
        )

    return close


@pytest.fixture
def paged_kv(device: str, dtype: torch.dtype) -> Callable[..., PagedKV]:
    """Factory: random caches plus block tables that give each sequence shuffled, non-contiguous blocks."""

    def make(
        seq_lens: list[int], block_size: int, num_kv_heads: int, head_dim: int, spare: int = 3
    ) -> PagedKV:
        need = [(n + block_size - 1) // block_size for n in seq_lens]
        num_blocks = sum(need) + spare
        shape = (num_blocks, block_size, num_kv_heads, head_dim)
        k_cache = torch.randn(shape, dtype=dtype, device=device)
        v_cache = torch.randn(shape, dtype=dtype, device=device)
        ids = torch.randperm(num_blocks).tolist()
        width = max(need)
        tables, at = [], 0
        for n in need:
            tables.append(ids[at : at + n] + [0] * (width - n))
            at += n
        return k_cache, v_cache, torch.tensor(tables, dtype=torch.int32, device=device)

    return make
