"""Serving knobs (`serve.*`) travel with a candidate: a swap applies them, bad ones are refused."""

from __future__ import annotations

import pytest

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.errors import CandidateError
from polyinfer.models.load import load_model


@pytest.fixture(scope="module")
def engine():
    return Engine(load_model("tiny-llama"), EngineConfig(block_size=4, kv_cache_tokens=512))


def test_swap_applies_serving_knobs_and_outputs_stay_the_same(engine):
    prompts = [[5] * 13 + [7], [5] * 13 + [9]]  # share three full blocks
    greedy = SamplingParams(max_tokens=6, ignore_eos=True)
    plain = [s.output_ids for s in engine.generate(prompts, greedy)]
    engine.swap(Candidate.reference().with_knobs({"serve.prefix_caching": True, "serve.max_prefill_chunk": 4}))
    assert engine.blocks.prefix_caching and engine.scheduler.config.max_prefill_chunk == 4
    first = engine.generate(prompts[:1], greedy)
    second = engine.generate(prompts[1:], greedy)
    assert [s.output_ids for s in first + second] == plain
    assert second[0].num_cached == 12
    engine.swap(Candidate.reference())
    assert not engine.blocks.prefix_caching and engine.scheduler.config.max_prefill_chunk == 512


@pytest.mark.parametrize("knobs", [{"serve.prefix_caching": "yes"}, {"serve.max_prefill_chunk": 0},
                                   {"serve.batch_everything": True}])
def test_bad_serving_knobs_are_refused_before_any_work(engine, knobs):
    before = engine.candidate
    with pytest.raises(CandidateError):
        engine.swap(Candidate.reference().with_knobs(knobs))
    assert engine.candidate is before
