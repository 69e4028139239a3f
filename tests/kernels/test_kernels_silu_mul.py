import pytest
import torch

from polyinfer.kernels import silu_mul as kernel


@pytest.mark.parametrize("knobs", [{}, {"BLOCK_N": 256, "num_warps": 2}])
@pytest.mark.parametrize(("rows", "inter"), [(1, 64), (5, 300), (2, 1100)])
def test_silu_mul_matches_reference(rows, inter, knobs, device, dtype, seed, check):
    gate_up = torch.randn(rows, 2 * inter, device=device, dtype=dtype) * 4
    check(kernel.silu_mul(gate_up, **knobs), kernel.reference(gate_up))


def test_silu_mul_rounds_like_the_unfused_product_in_half_precision(device, seed, check):
    gate_up = torch.randn(3, 2 * 500, device=device, dtype=torch.float16) * 4
    check(kernel.silu_mul(gate_up, BLOCK_N=256), kernel.reference(gate_up))
