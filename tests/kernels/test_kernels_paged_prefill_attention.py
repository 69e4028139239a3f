import pytest
import torch

from polyinfer.kernels import paged_prefill_attention as kernel

HEADS = [(9, 3, 32), (4, 4, 48), (8, 2, 64)]  # GQA ratios 3, 1, 4; head_dim 48 pads to a 64 tile
KNOB_SETTINGS = [{}, {"BLOCK_M": 16, "BLOCK_N": 32, "num_warps": 2, "num_stages": 1}]
# (context length, chunk length): a whole prompt, a later chunk after cached context, a one-token chunk
SEQS = [(37, 37), (60, 21), (19, 1)]


def packed(seqs, heads, head_dim, device, dtype):
    starts = [0]
    for _, n in seqs:
        starts.append(starts[-1] + n)
    q = torch.randn(starts[-1], heads, head_dim, device=device, dtype=dtype)
    seq_lens = torch.tensor([s for s, _ in seqs], dtype=torch.int32, device=device)
    return q, seq_lens, torch.tensor(starts, dtype=torch.int32, device=device), max(n for _, n in seqs)


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEADS)
def test_paged_prefill_attention_matches_reference(
    heads, kv_heads, head_dim, knobs, paged_kv, device, dtype, seed, check
):
    k_cache, v_cache, tables = paged_kv([s for s, _ in SEQS], 16, kv_heads, head_dim)
    q, seq_lens, starts, max_len = packed(SEQS, heads, head_dim, device, dtype)
    got = kernel.paged_prefill_attention(q, k_cache, v_cache, tables, seq_lens, starts, max_len, **knobs)
    check(got, kernel.reference(q, k_cache, v_cache, tables, seq_lens, starts, max_len))


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
def test_paged_prefill_attention_with_sliding_window(knobs, paged_kv, device, dtype, seed, check):
    k_cache, v_cache, tables = paged_kv([s for s, _ in SEQS], 8, 3, 32)
    q, seq_lens, starts, max_len = packed(SEQS, 9, 32, device, dtype)
    got = kernel.paged_prefill_attention(q, k_cache, v_cache, tables, seq_lens, starts, max_len, 10, **knobs)
    check(got, kernel.reference(q, k_cache, v_cache, tables, seq_lens, starts, max_len, 10))
