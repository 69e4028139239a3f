"""Block manager and scheduler bookkeeping, without running a model."""

from __future__ import annotations

import torch

from polyinfer.engine.block_manager import BlockManager
from polyinfer.engine.scheduler import Scheduler, SchedulerConfig
from polyinfer.engine.sequence import SamplingParams, Sequence, SequenceStatus


def seq(n: int, start: int = 0, max_tokens: int = 4) -> Sequence:
    return Sequence(list(range(start, start + n)), SamplingParams(max_tokens=max_tokens, ignore_eos=True))


def test_blocks_are_freed_and_reused():
    bm = BlockManager(num_blocks=4, block_size=4)
    a, b = seq(9), seq(4)
    bm.grow(a, 9)
    assert len(a.block_table) == 3 and bm.num_free == 1
    assert not bm.can_grow(b, 5)
    bm.release(a)
    assert bm.num_free == 4 and a.block_table == []
    bm.grow(b, 4)
    assert len(b.block_table) == 1


def test_prefix_blocks_are_shared_refcounted_and_revived():
    bm = BlockManager(num_blocks=8, block_size=4, prefix_caching=True)
    a = seq(10)
    bm.grow(a, 10)
    a.num_computed = 10
    bm.register_full_blocks(a)  # two full blocks published
    b = seq(10)
    bm.match_prefix(b)
    assert b.block_table == a.block_table[:2] and b.num_computed == 8
    bm.release(a)
    bm.release(b)
    c = seq(9)  # same first 8 tokens: revives the freed-but-cached blocks
    bm.match_prefix(c)
    assert c.num_cached == 8 and bm.num_free == 6
    d = seq(8)  # an exact multiple keeps its last token to compute
    bm.match_prefix(d)
    assert d.num_cached == 4


def test_a_taken_block_forgets_its_hash():
    bm = BlockManager(num_blocks=2, block_size=2, prefix_caching=True)
    a = seq(3)
    bm.grow(a, 3)
    a.num_computed = 3
    bm.register_full_blocks(a)
    bm.release(a)
    other = seq(4, start=100)
    bm.grow(other, 4)  # takes both blocks, overwriting the cached one
    again = seq(3)
    bm.match_prefix(again)
    assert again.num_cached == 0


def run_step(s: Scheduler) -> list:
    schedule = s.schedule()
    s.update(schedule, [7] * sum(c.samples for c in schedule.chunks))
    return schedule


def test_budget_chunking_and_decode_first():
    bm = BlockManager(64, 4)
    s = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=10, max_prefill_chunk=6), bm, (), 512)
    long, short = seq(20), seq(3)
    s.add(long)
    s.add(short)
    first = run_step(s)
    assert [c.num_tokens for c in first.prefills] == [6, 3] and not first.prefills[0].samples
    second = run_step(s)
    assert [c.seq for c in second.decodes] == [short]  # decode first, then the prefill gets the rest
    assert second.prefills[0].num_tokens == 6
    assert second.num_tokens <= 10


def test_max_num_seqs_limits_admission():
    s = Scheduler(SchedulerConfig(max_num_seqs=2), BlockManager(64, 4), (), 512)
    for i in range(3):
        s.add(seq(3, start=10 * i))
    schedule = s.schedule()
    assert len(schedule.prefills) == 2 and len(s.waiting) == 1


def test_preemption_frees_the_latest_and_requeues_it_first():
    bm = BlockManager(num_blocks=3, block_size=2)
    s = Scheduler(SchedulerConfig(), bm, (), 512)
    a, b = seq(2, max_tokens=8), seq(2, start=50, max_tokens=8)
    s.add(a)
    s.add(b)
    run_step(s)  # both prefilled: 2 blocks
    run_step(s)  # a grows into the last block; b cannot and is preempted
    assert b.status is SequenceStatus.WAITING and b.num_preemptions == 1 and s.waiting[0] is b
    assert b.block_table == [] and b.output_ids  # its tokens are kept for recomputation


def test_finish_on_eos_and_length():
    s = Scheduler(SchedulerConfig(), BlockManager(16, 4), (9,), 6)
    eos = Sequence([1, 2], SamplingParams(max_tokens=10))
    capped = Sequence([1, 2, 3], SamplingParams(max_tokens=10, ignore_eos=True))
    s.add(eos)
    s.add(capped)
    schedule = s.schedule()
    finished = s.update(schedule, [9, 9])
    assert finished == [eos] and eos.finish_reason.value == "stop"
    assert s.update(s.schedule(), [9]) == []
    assert s.update(s.schedule(), [9]) == [capped] and len(capped) == 6 and capped.finish_reason.value == "length"


def test_token_slices_span_prompt_and_output():
    seq = Sequence([10, 11, 12], SamplingParams())
    seq.output_ids.extend([20, 21])
    for start in range(6):
        for stop in range(start, 7):
            assert seq.token_slice(start, stop) == seq.tokens[start:stop]


def test_a_packed_batch_has_every_field_where_the_forward_expects_it():
    from polyinfer.engine.batch import Batch

    batch = Batch.build([[5, 6, 7], [8], [9]], [0, 4, 9], [[3, 1], [2, 4], [6, 0, 5]], 4,
                        [False, True, True], 1)
    assert batch.input_ids.tolist() == [5, 6, 7, 8, 9]
    assert batch.positions.tolist() == [0, 1, 2, 4, 9]
    assert batch.slot_mapping.tolist() == [12, 13, 14, 16, 21]  # block * 4 + offset
    assert batch.seq_lens.tolist() == [3, 5, 10] and batch.seq_lens.dtype == torch.int32
    assert batch.query_start.tolist() == [0, 3, 4, 5]
    assert batch.block_tables.tolist() == [[3, 1, 0], [2, 4, 0], [6, 0, 5]]
    assert batch.logits_indices.tolist() == [3, 4]  # the prefill chunk that stops short samples nothing
    assert batch.seq_lens_host == (3, 5, 10) and batch.query_lens_host == (3, 1, 1)
