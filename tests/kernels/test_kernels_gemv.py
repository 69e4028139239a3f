import pytest
import torch

from polyinfer.kernels import gemv as kernel

# rows: one token, 3 (an FMA tile of 4 or a tensor-core tile of 16, by FMA_ROWS), 9 (a 16-row tile),
# 70 (two 64-row tiles); N and K are multiples of no block.
SHAPES = [(1, 100, 300), (3, 70, 257), (9, 45, 130), (70, 24, 96)]
KNOB_SETTINGS = [
    {},
    {"BLOCK_N": 16, "BLOCK_K": 64, "SPLIT_K": 4, "FMA_ROWS": 4, "num_warps": 2, "num_stages": 1},
    {"BLOCK_N": 32, "BLOCK_K": 128, "SPLIT_K": 2, "FMA_ROWS": 8},
]


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("m", "n", "k"), SHAPES)
def test_gemv_matches_linear(m, n, k, knobs, device, dtype, seed, check):
    x = torch.randn(m, k, device=device, dtype=dtype)
    w = torch.randn(n, k, device=device, dtype=dtype) / k**0.5
    check(kernel.gemv(x, w, **knobs), kernel.reference(x, w), scale=5)


@pytest.mark.parametrize("knobs", KNOB_SETTINGS[:2])
def test_gemv_adds_bias_once_whatever_the_split(knobs, device, dtype, seed, check):
    x = torch.randn(2, 200, device=device, dtype=dtype)
    w = torch.randn(50, 200, device=device, dtype=dtype) / 200**0.5
    b = torch.randn(50, device=device, dtype=dtype)
    check(kernel.gemv(x, w, b, **knobs), kernel.reference(x, w, b), scale=5)


def test_gemv_reads_row_strided_views(device, dtype, seed, check):
    # A slice of a wider activation (e.g. the last rows of a packed batch) keeps its row stride.
    wide = torch.randn(4, 300, device=device, dtype=dtype)
    x = wide[:, :200]
    w = torch.randn(40, 200, device=device, dtype=dtype) / 200**0.5
    check(kernel.gemv(x, w, SPLIT_K=2), kernel.reference(x, w), scale=5)
