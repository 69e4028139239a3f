import pytest
import torch

from polyinfer.kernels import rms_norm as kernel

SHAPES = [(1, 64), (5, 300), (3, 1000)]  # one row; hidden not a multiple of any block
KNOB_SETTINGS = [{}, {"BLOCK_N": 128, "num_warps": 2}]  # whole row in one tile; several chunks


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("rows", "hidden"), SHAPES)
def test_rms_norm_matches_reference(rows, hidden, knobs, device, dtype, seed, check):
    x = torch.randn(rows, hidden, device=device, dtype=dtype) * 3
    w = torch.randn(hidden, device=device, dtype=dtype)
    check(kernel.rms_norm(x, w, 1e-5, **knobs), kernel.reference(x, w, 1e-5))


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("rows", "hidden"), SHAPES)
def test_rms_norm_with_residual_returns_the_sum_and_leaves_inputs(
    rows, hidden, knobs, device, dtype, seed, check
):
    x = torch.randn(rows, hidden, device=device, dtype=dtype)
    res = torch.randn(rows, hidden, device=device, dtype=dtype)
    w = torch.randn(hidden, device=device, dtype=dtype)
    x0, res0 = x.clone(), res.clone()
    normed, summed = kernel.rms_norm(x, w, 1e-6, res, **knobs)
    want_normed, want_summed = kernel.reference(x, w, 1e-6, res)
    check(normed, want_normed)
    check(summed, want_summed)
    assert torch.equal(x, x0) and torch.equal(res, res0), f"seed={seed}: inputs modified"


def test_rms_norm_rounds_like_the_unfused_norm_in_half_precision(device, seed, check):
    x = torch.randn(4, 200, device=device, dtype=torch.float16)
    res = torch.randn(4, 200, device=device, dtype=torch.float16)
    w = torch.randn(200, device=device, dtype=torch.float16)
    for knobs in KNOB_SETTINGS:
        normed, summed = kernel.rms_norm(x, w, 1e-6, res, **knobs)
        want_normed, want_summed = kernel.reference(x, w, 1e-6, res)
        assert torch.equal(summed, want_summed), f"seed={seed}"
        check(normed, want_normed)
