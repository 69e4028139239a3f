import pytest
import torch

from polyinfer.kernels import paged_decode_attention as kernel

HEADS = [(9, 3, 32), (4, 4, 48), (8, 2, 64)]  # GQA ratios 3, 1, 4; head_dim 48 pads to a 64 tile
KNOB_SETTINGS = [
    {},
    {"BLOCK": 16, "NUM_SPLITS": 1, "num_warps": 2},
    # more splits than a 1-token context can fill: empty splits must weigh nothing in the merge
    {"BLOCK": 32, "NUM_SPLITS": 8, "USE_DOT": 1},
]
SEQ_LENS = [1, 37, 100]  # a single token; lengths that end mid-block


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
@pytest.mark.parametrize(("heads", "kv_heads", "head_dim"), HEADS)
def test_paged_decode_attention_matches_reference(
    heads, kv_heads, head_dim, knobs, paged_kv, device, dtype, seed, check
):
    k_cache, v_cache, tables = paged_kv(SEQ_LENS, 16, kv_heads, head_dim)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32, device=device)
    q = torch.randn(len(SEQ_LENS), heads, head_dim, device=device, dtype=dtype)
    got = kernel.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, **knobs)
    check(got, kernel.reference(q, k_cache, v_cache, tables, seq_lens))


@pytest.mark.parametrize("knobs", KNOB_SETTINGS)
def test_paged_decode_attention_with_sliding_window(knobs, paged_kv, device, dtype, seed, check):
    k_cache, v_cache, tables = paged_kv(SEQ_LENS, 8, 3, 32)
    seq_lens = torch.tensor(SEQ_LENS, dtype=torch.int32, device=device)
    q = torch.randn(len(SEQ_LENS), 9, 32, device=device, dtype=dtype)
    got = kernel.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, 20, **knobs)
    check(got, kernel.reference(q, k_cache, v_cache, tables, seq_lens, 20))


def test_paged_decode_attention_reads_a_strided_query_view(paged_kv, device, dtype, seed, check):
    # The decode rows of a packed batch: a slice of q after the prefill rows.
    k_cache, v_cache, tables = paged_kv([5, 70], 16, 2, 32)
    seq_lens = torch.tensor([5, 70], dtype=torch.int32, device=device)
    q = torch.randn(6, 8, 32, device=device, dtype=dtype)[4:]
    got = kernel.paged_decode_attention(q, k_cache, v_cache, tables, seq_lens, NUM_SPLITS=2)
    check(got, kernel.reference(q, k_cache, v_cache, tables, seq_lens))


def test_auto_splits_fill_the_multiprocessors_and_stop_at_large_batches():
    cpu = torch.device("cpu")  # counted as 8 multiprocessors
    assert kernel.auto_splits(1, cpu) == 16  # one program would want 16: capped
    assert kernel.auto_splits(4, cpu) == 4
    assert kernel.auto_splits(5, cpu) == 4  # ceil(16 / 5) = 4
    assert kernel.auto_splits(64, cpu) == 1
    assert kernel.auto_splits(1, cpu, max_splits=8) == 8
