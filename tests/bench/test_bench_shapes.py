"""Fast-tier modelling without timing: step shapes from a profile, layer extrapolation, the score."""

from __future__ import annotations

import dataclasses

import pytest

from polyinfer.bench.fast_tier import LayerFit, result
from polyinfer.bench.score import predict
from polyinfer.bench.shapes import Limits, Phase, ShapeMix, StepShape, decode_occupancy
from polyinfer.engine.candidate import Candidate
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import PRESETS, synthesize
from polyinfer.traffic.trace import Request, Trace

LIMITS = Limits(max_num_seqs=16, max_prefill_chunk=512, max_model_len=4096, kv_tokens=1 << 20, block_size=16)


def uniform_profile(n: int, input_len: int, output_len: int) -> WorkloadProfile:
    return WorkloadProfile.of(
        Trace("u", "test", tuple(Request(float(i), input_len, output_len) for i in range(n)))
    )


def test_decode_occupancy_simulates_slots_filling_and_draining():
    # Two slots; outputs 3, 2, 2: after each prefill, 2, 1 and 1 decode tokens remain.
    # Steps: [2, 1] -> batch 2; [1, 1] (third admitted) -> batch 2; [0 ... ] done.
    assert decode_occupancy([3, 2, 2], slots=2) == {2: 4}
    assert decode_occupancy([4, 1], slots=2) == {1: 3}  # a one-token reply never decodes
    assert decode_occupancy([5] * 10, slots=4) == {4: 32, 2: 8}


def test_uniform_workload_gives_one_shape_per_phase():
    mix = ShapeMix.of(uniform_profile(64, 100, 50), LIMITS)
    (decode,) = mix.of_phase(Phase.DECODE)
    (prefill,) = mix.of_phase(Phase.PREFILL)
    assert (decode.batch_size, decode.context_len, decode.query_len, decode.weight) == (16, 125, 1, 1.0)
    assert (prefill.batch_size, prefill.query_len, prefill.context_len) == (1, 100, 100)
    assert (mix.prefill_tokens, mix.decode_tokens, mix.output_tokens) == (100, 49, 50)


def test_chat_workload_shapes_respect_engine_limits():
    limits = dataclasses.replace(LIMITS, max_prefill_chunk=256)
    mix = ShapeMix.of(WorkloadProfile.of(synthesize(PRESETS["chat"])), limits)
    for phase in Phase:
        shapes = mix.of_phase(phase)
        assert shapes and sum(s.weight for s in shapes) == pytest.approx(1.0)
        assert all(s.weight >= 0.05 for s in shapes)
    decodes = mix.of_phase(Phase.DECODE)
    assert max(s.batch_size for s in decodes) == 16  # the queue keeps every slot busy most of the time
    assert max(decodes, key=lambda s: s.weight).batch_size == 16
    assert all(s.query_len <= 256 and s.context_len == s.query_len for s in mix.of_phase(Phase.PREFILL))
    # Prompts of ~600 tokens cut at 256 put most prefill tokens in (nearly) full chunks.
    assert max(mix.of_phase(Phase.PREFILL), key=lambda s: s.weight).query_len > 200


def test_kv_pool_and_request_count_cap_the_decode_batch():
    tight = dataclasses.replace(LIMITS, kv_tokens=4 * 128)  # room for 4 sequences of 125 (128 in blocks)
    assert max(s.batch_size for s in ShapeMix.of(uniform_profile(64, 100, 50), tight).shapes) == 4
    assert ShapeMix.of(uniform_profile(3, 100, 50), LIMITS).of_phase(Phase.DECODE)[0].batch_size == 3


def test_prefix_caching_discounts_reused_prompt_tokens():
    profile = WorkloadProfile.of(synthesize(PRESETS["chat"]))
    cached = ShapeMix.of(profile, dataclasses.replace(LIMITS, prefix_caching=True))
    assert cached.prefill_tokens == pytest.approx(profile.input_len.mean * (1 - profile.prefix_reuse))
    assert cached.prefill_tokens < ShapeMix.of(profile, LIMITS).prefill_tokens


def test_layer_fit_recovers_a_linear_model():
    def truth(n):
        return 0.004 + 0.0015 * n  # 4 ms of embedding and LM head, 1.5 ms per layer

    fit = LayerFit.fit({1: truth(1), 4: truth(4)})
    assert fit.fixed_s == pytest.approx(0.004) and fit.per_layer_s == pytest.approx(0.0015)
    assert fit.at(32) == pytest.approx(truth(32))
    assert LayerFit.fit({1: truth(1), 2: truth(2), 3: truth(3)}).at(16) == pytest.approx(truth(16))
    assert LayerFit.fit({1: 0.010, 2: 0.009}).per_layer_s == 0.0  # noise cannot make layers free-er than free
    with pytest.raises(ValueError, match="two or more"):
        LayerFit.fit({2: 0.01})


def test_fast_tier_result_extrapolates_each_shape():
    mix = ShapeMix.of(uniform_profile(8, 100, 50), dataclasses.replace(LIMITS, max_num_seqs=4))
    decode, prefill = mix.of_phase(Phase.DECODE)[0], mix.of_phase(Phase.PREFILL)[0]
    # Fake timer: decode steps cost 1 ms + 0.5 ms per layer, prefill steps 2 ms + 3 ms per layer.
    timings = {(decode, n): [0.001 + 0.0005 * n] * 3 for n in (1, 4)}
    timings |= {(prefill, n): [0.002 + 0.003 * n] * 3 for n in (1, 4)}
    r = result(Candidate.reference(), mix, timings, full_layers=30)
    by_phase = {s.shape.phase: s for s in r.shapes}
    assert by_phase[Phase.DECODE].predicted_s == pytest.approx(0.016)
    assert by_phase[Phase.PREFILL].predicted_s == pytest.approx(0.092)
    assert by_phase[Phase.DECODE].cv == 0.0
    assert r.prediction.decode_tok_s == pytest.approx(4 / 0.016)
    assert r.score == r.prediction.output_tok_s


def test_score_formula():
    d1 = StepShape(Phase.DECODE, 8, 100, 1, 0.75)
    d2 = StepShape(Phase.DECODE, 2, 100, 1, 0.25)
    p = StepShape(Phase.PREFILL, 1, 200, 200, 1.0)
    mix = ShapeMix((d1, d2, p), prefill_tokens=400, decode_tokens=99, output_tokens=100)
    pred = predict(mix, {d1: 0.016, d2: 0.010, p: 0.020})
    decode_s = 0.75 * 0.016 / 8 + 0.25 * 0.010 / 2  # 2.75 ms per decode token
    prefill_s = 0.020 / 200  # 0.1 ms per prompt token
    assert pred.decode_tok_s == pytest.approx(1 / decode_s)
    assert pred.prefill_tok_s == pytest.approx(1 / prefill_s)
    assert pred.output_tok_s == pytest.approx(100 / (400 * prefill_s + 99 * decode_s))
    assert pred.tpot_ms == pytest.approx(0.75 * 16 + 0.25 * 10)
    only_prefill = ShapeMix((p,), prefill_tokens=400, decode_tokens=0, output_tokens=1)
    assert predict(only_prefill, {p: 0.020}).decode_tok_s == 0.0
