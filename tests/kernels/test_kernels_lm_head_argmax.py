import pytest
import torch

from polyinfer.kernels import lm_head_argmax as kernel

KNOB_SETTINGS = [{}, {"BLOCK_N": 16, "BLOCK_K": 64, "FMA_ROWS": 4, "num_warps": 2, "num_stages": 1}]


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("rows", "vocab", "hidden"), [(1, 1000, 64), (3, 777, 100), (20, 300, 48)])
def test_lm_head_argmax_matches_argmax_of_logits(rows, vocab, hidden, knobs, device, dtype, seed):
    x = torch.randn(rows, hidden, device=device, dtype=dtype)
    w = torch.randn(vocab, hidden, device=device, dtype=dtype)
    got = kernel.lm_head_argmax(x, w, **knobs)
    want = kernel.reference(x, w)
    assert got.dtype == torch.int64 and got.shape == (rows,)
    if not torch.equal(got, want):
        # Accumulation order may differ from the reference GEMM: a near-tie can then flip, but only then.
        logits = torch.nn.functional.linear(x, w).float()
        gap = logits.gather(1, want[:, None]) - logits.gather(1, got[:, None])
        assert gap.abs().max() <= 1e-2 * logits.abs().max(), f"seed={seed}: {got} != {want}"


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
def test_lm_head_argmax_breaks_ties_to_the_lowest_token(knobs, device, dtype, seed):
    w = torch.randn(300, 32, device=device, dtype=dtype)
    best = 37
    w[250] = w[best]  # same logit in a later tile
    w[best + 1] = w[best]  # and in the same tile
    x = w[best : best + 1] * 4
    got = kernel.lm_head_argmax(x, w, **knobs)
    assert got.tolist() == [best], f"seed={seed}"
