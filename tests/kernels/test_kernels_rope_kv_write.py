import pytest
import torch

from polyinfer.kernels import rope_kv_write as kernel
from polyinfer.models.spec import RopeSpec

# (heads, kv heads, head_dim): GQA ratios 3 (SmolLM2's 9/3), 1 and 4; head_dim 48 has a half of 24,
# which no power-of-two tile covers exactly.
HEADS = [(9, 3, 32), (4, 4, 48), (8, 2, 64)]
KNOB_SETTINGS = [{}, {"BLOCK_H": 1, "num_warps": 1}, {"BLOCK_H": 16}]


def run_both(num_tokens, heads, kv_heads, head_dim, device, dtype, qk_norm=False, pad_slots=0, **knobs):
    """Run kernel and reference on the same fused-QKV views and fresh caches; return both results."""
    block_size, num_blocks, max_pos = 16, 8, 200
    qkv = torch.randn(num_tokens, (heads + 2 * kv_heads) * head_dim, device=device, dtype=dtype)
    q, k, v = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=1)
    q, k, v = (t.view(num_tokens, -1, head_dim) for t in (q, k, v))
    positions = torch.randint(0, max_pos, (num_tokens,), device=device)
    slots = torch.randperm(num_blocks * block_size, device=device)[:num_tokens]
    slots[:pad_slots] = -1
    inv_freq = RopeSpec(theta=10000.0).inv_freq(head_dim).to(device)
    cos, sin = kernel.rope_tables(inv_freq, max_pos)
    norms = [torch.randn(head_dim, device=device, dtype=dtype) for _ in range(2)] if qk_norm else [None, None]
    caches = [
        torch.randn(num_blocks, block_size, kv_heads, head_dim, device=device, dtype=dtype) for _ in range(2)
    ]
    ref_caches = [c.clone() for c in caches]
    qkv0 = qkv.clone()
    out = kernel.rope_kv_write(q, k, v, positions, slots, cos, sin, *caches, *norms, 1e-6, **knobs)
    want = kernel.reference(q, k, v, positions, slots, cos, sin, *ref_caches, *norms, 1e-6)
    assert torch.equal(qkv, qkv0), "inputs modified"
    return (out, *caches), (want, *ref_caches)


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEADS)
@pytest.mark.parametrize("num_tokens", [1, 7])
def test_rope_kv_write_matches_reference(
    num_tokens, heads, kv_heads, head_dim, knobs, device, dtype, seed, check
):
    got, want = run_both(num_tokens, heads, kv_heads, head_dim, device, dtype, **knobs)
    for g, w in zip(got, want, strict=True):
        check(g, w)


@pytest.mark.parametrize("knobs", KNOB_SETTINGS[:2])
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEADS[::2])
def test_rope_kv_write_with_qk_norm_matches_reference(
    heads, kv_heads, head_dim, knobs, device, dtype, seed, check
):
    got, want = run_both(5, heads, kv_heads, head_dim, device, dtype, qk_norm=True, **knobs)
    for g, w in zip(got, want, strict=True):
        check(g, w)


def test_rope_kv_write_skips_negative_slots(device, dtype, seed, check):
    got, want = run_both(6, 9, 3, 32, device, dtype, pad_slots=2)
    for g, w in zip(got, want, strict=True):
        check(g, w)


def test_rope_tables_match_the_reference_forward_products(device, seed):
    inv_freq = RopeSpec(theta=500000.0, type="llama3", factor=32.0).inv_freq(64).to(device)
    positions = torch.randint(0, 4096, (10,), device=device)
    cos, sin = kernel.rope_tables(inv_freq, 4096)
    freqs = positions.float()[:, None] * inv_freq[None, :]
    assert torch.equal(cos[positions], freqs.cos()), f"seed={seed}"
    assert torch.equal(sin[positions], freqs.sin()), f"seed={seed}"
