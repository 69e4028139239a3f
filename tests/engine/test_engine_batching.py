"""Batched, continuous-batched, chunked, preempted and prefix-cached generation all give the tokens that
one request at a time gives (greedy), on the real SmolLM2 weights; with synchronous steps and with
asynchronous ones (step n+1 launched before step n's tokens are read)."""

from __future__ import annotations

import pytest
import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams, SequenceStatus
from polyinfer.models.load import load_model

GREEDY = SamplingParams(max_tokens=12, ignore_eos=True)


@pytest.fixture(scope="module")
def model():
    return load_model(None, num_layers=6)  # the embedded default's first layers keep this quick


@pytest.fixture(scope="module")
def prompts(model):
    gen = torch.Generator().manual_seed(1234)
    system = torch.randint(100, 40000, (21,), generator=gen).tolist()
    own = [torch.randint(100, 40000, (n,), generator=gen).tolist() for n in (1, 5, 9, 16, 17, 30, 33, 40)]
    return [system + p if i % 2 else p for i, p in enumerate(own)]  # half share a 21-token prefix


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def async_steps(request) -> bool:
    return request.param


@pytest.fixture(scope="module")
def alone(model, prompts):
    engine = Engine(model, EngineConfig(block_size=8, kv_cache_tokens=512))
    return [engine.generate([p], GREEDY)[0].output_ids for p in prompts]


def test_one_batch(model, prompts, alone, async_steps):
    engine = Engine(model, EngineConfig(block_size=8, kv_cache_tokens=1024, async_steps=async_steps))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == alone


def test_continuous_batching_with_chunked_prefill(model, prompts, alone, async_steps):
    engine = Engine(model, EngineConfig(block_size=4, kv_cache_tokens=1024, max_num_batched_tokens=24,
                                        max_prefill_chunk=10, max_num_seqs=5,
                                        async_steps=async_steps))
    seqs = []
    for p in prompts:  # a new request arrives every other step while others decode
        seqs.append(engine.add_request(p, GREEDY))
        engine.step()
        engine.step()
    while engine.has_work():
        engine.step()
    assert [s.output_ids for s in seqs] == alone


def test_preemption_under_a_full_pool(model, prompts, alone, async_steps):
    engine = Engine(model, EngineConfig(block_size=4, kv_cache_tokens=112, max_num_batched_tokens=64,
                                        async_steps=async_steps))
    seqs = engine.generate(prompts, GREEDY)
    assert sum(s.num_preemptions for s in seqs) > 0
    assert [s.output_ids for s in seqs] == alone
    assert engine.blocks.num_free == engine.kv.num_blocks  # every block came back


def test_prefix_caching_reuses_blocks(model, prompts, alone, async_steps):
    engine = Engine(model, EngineConfig(block_size=4, kv_cache_tokens=1024, prefix_caching=True,
                                        async_steps=async_steps))
    first = engine.generate(prompts[:2], GREEDY)
    rest = engine.generate(prompts[2:], GREEDY)
    seqs = first + rest
    assert [s.output_ids for s in seqs] == alone
    assert all(s.num_cached == 20 for s in rest[1::2])  # 21 shared tokens -> 5 full blocks of 4


def test_finished_sequences_release_everything(model, prompts, async_steps):
    engine = Engine(model, EngineConfig(block_size=8, kv_cache_tokens=512, async_steps=async_steps))
    seqs = engine.generate(prompts[:3], SamplingParams(max_tokens=3, ignore_eos=True))
    assert all(s.status is SequenceStatus.FINISHED and len(s.output_ids) == 3 for s in seqs)
    assert engine.blocks.num_free == engine.kv.num_blocks


def test_asynchronous_steps_stop_sample_and_swap_like_synchronous_ones(model, prompts, alone):
    """Stop tokens met mid-batch, seeded sampling, and a swap while a step is in flight."""
    stop = SamplingParams(max_tokens=12, stop_token_ids=(alone[2][4], alone[5][2]))
    seeded = [SamplingParams(max_tokens=10, temperature=0.8, top_k=50, seed=s) for s in range(len(prompts))]

    def run(async_steps: bool) -> list[list[int]]:
        engine = Engine(model, EngineConfig(block_size=8, kv_cache_tokens=2048, async_steps=async_steps))
        out = [s.output_ids for s in engine.generate(prompts, stop)]
        out += [s.output_ids for s in engine.generate(prompts, seeded)]
        seqs = [engine.add_request(p, GREEDY) for p in prompts]
        for _ in range(4):
            engine.step()
        engine.swap(Candidate.builtin("fast", {"fuse_qkv": True}))
        assert engine.in_flight is None  # the swap waited for the step in flight
        while engine.has_work():
            engine.step()
        return out + [s.output_ids for s in seqs]

    sync = run(False)
    assert run(True) == sync
    assert sync[-len(prompts):] == alone
    stopped = [out for out in sync[: len(prompts)] if len(out) < 12]
    assert len(stopped) >= 2 and all(out[-1] in stop.stop_token_ids for out in stopped)  # mid-batch stops


def test_the_serving_knob_turns_asynchronous_steps_on(model):
    engine = Engine(model, EngineConfig(block_size=8, kv_cache_tokens=256))
    assert not engine.async_steps
    engine.swap(Candidate.reference().with_knobs({"serve.async_steps": True}))
    assert engine.async_steps
    engine.generate([[5, 6, 7]], SamplingParams(max_tokens=3, ignore_eos=True))
    assert engine.in_flight is not None  # the last step's successor was launched before the end was known
    assert engine.has_work()
    engine.step()
    assert not engine.has_work()
