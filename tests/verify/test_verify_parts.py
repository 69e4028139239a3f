"""The battery's parts on their own: runs and comparisons, poisoning and the stray-write detector, the
code guard, seeds and configuration."""

from __future__ import annotations

import math

import pytest
import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.errors import CandidateError, PolyinferError
from polyinfer.verify import BatteryConfig
from polyinfer.verify.battery import check_seed
from polyinfer.verify.comparison import compare, forced
from polyinfer.verify.contamination import poison, stray_writes
from polyinfer.verify.guard import GuardedForward, GuardLog, code_fingerprint
from polyinfer.verify.integrity import weights_digest
from polyinfer.verify.run import run

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [3] * 13]


@pytest.fixture
def engine(tiny):
    return Engine(tiny, EngineConfig(block_size=4, kv_cache_tokens=128))


def test_run_matches_engine_generate_and_keeps_logits(tiny, engine):
    result = run(engine, engine.forward, PROMPTS, 6)
    expected = Engine(tiny, EngineConfig(block_size=4, kv_cache_tokens=128)).generate(
        PROMPTS,
        __import__("polyinfer.engine.sequence", fromlist=["x"]).SamplingParams(max_tokens=6, ignore_eos=True),
    )
    assert [t.tokens for t in result.traces] == [tuple(s.output_ids) for s in expected]
    assert all(t.logits.shape == (6, tiny.spec.vocab_size) for t in result.traces)
    assert all(int(t.logits[i].argmax()) == t.tokens[i] for t in result.traces for i in range(6))
    assert engine.blocks.num_free == engine.kv.num_blocks  # everything released


def test_teacher_forcing_feeds_the_given_tokens(engine):
    free = run(engine, engine.forward, PROMPTS, 5)
    wanted = [(1, 2, 3, 4, 5), None, (9, 9, 9, 9, 9)]
    pushed = run(engine, engine.forward, PROMPTS, 5, forced=wanted)
    assert pushed.traces[0].tokens == (1, 2, 3, 4, 5) and pushed.traces[2].tokens == (9,) * 5
    assert pushed.traces[1].tokens == free.traces[1].tokens
    c = compare(run(engine, engine.forward, PROMPTS, 5, forced=forced(free), stagger=1).traces, free.traces)
    assert c.rel_err < 1e-5 and c.agreement == 1.0 and c.rows == 15


def test_comparison_measures_error_agreement_and_non_finite(engine):
    control = run(engine, engine.forward, PROMPTS[:1], 4)
    trace = control.traces[0]
    assert compare([trace], [trace]).bitwise
    noisy = type(trace)(trace.prompt, trace.tokens, trace.logits * 1.01, 0, 0)
    c = compare([noisy], [trace])
    assert not c.bitwise and c.rel_err == pytest.approx(0.01, rel=1e-3) and c.agreement == 1.0
    flipped = trace.logits.clone()
    flipped[2] = -flipped[2]
    c = compare([type(trace)(trace.prompt, trace.tokens, flipped, 0, 0)], [trace])
    assert c.agreement == 0.75 and c.prefix == 0.5
    nan = trace.logits.clone()
    nan[1, 0] = math.nan
    assert math.isinf(compare([type(trace)(trace.prompt, trace.tokens, nan, 0, 0)], [trace]).rel_err)


def test_poison_fills_free_uncached_blocks_and_stray_writes_are_found(tiny):
    engine = Engine(tiny, EngineConfig(block_size=4, kv_cache_tokens=64, prefix_caching=True))
    run(engine, engine.forward, [list(range(1, 10))], 2)  # leaves two cached full blocks among the free
    cached = [b for b in engine.blocks.free_blocks() if engine.blocks.block_hash[b] is not None]
    blocks = poison(engine)
    assert len(cached) == 2 and not set(cached) & set(blocks)
    assert engine.kv.k[:, blocks].isnan().all() and not engine.kv.k[:, cached].isnan().any()
    result = run(engine, engine.forward, [[1, 2, 3]], 2)
    assert stray_writes(engine, blocks, result) == 0
    engine.kv.k[0, blocks[-1], 0] = 0.0  # a write no batch asked for
    assert stray_writes(engine, blocks, result) == 1


def test_guard_checks_code_and_output_before_and_after_every_call(tiny, engine):
    log = GuardLog()
    reference = Candidate.reference()
    forward, _ = engine.prepare(reference)
    guarded = GuardedForward(reference, forward, tiny.spec.vocab_size, log)
    run(engine, guarded, PROMPTS[:1], 3)
    assert log.calls == 3 and not log.violations
    before = code_fingerprint(forward)
    type(forward).attention = lambda self, q, k, v, b: q  # rebinding code after build
    try:
        assert code_fingerprint(forward) != before
        with pytest.raises(CandidateError, match="code changed"):
            run(engine, guarded, PROMPTS[:1], 3)
    finally:
        del type(forward).attention
    assert log.violations


def test_guard_rejects_logits_of_the_wrong_shape(tiny, engine):
    bad = Candidate("def build(ctx):\n    import torch\n    return lambda batch: torch.zeros(1, 3)\n")
    guarded = GuardedForward(bad, lambda batch: torch.zeros(1, 3), tiny.spec.vocab_size, GuardLog())
    with pytest.raises(CandidateError, match="returned logits"):
        run(engine, guarded, PROMPTS[:1], 2)


def test_weights_digest_sees_any_change(tiny):
    before = weights_digest(tiny.weights, 1)
    assert weights_digest(tiny.weights, 1) == before
    w = tiny.weights.layers[0].up_proj
    old = float(w[3, 5])
    w[3, 5] += 1e-3
    try:
        assert weights_digest(tiny.weights, 1) != before
    finally:
        w[3, 5] = old
    assert weights_digest(tiny.weights, 1) == before


def test_check_seeds_are_stable_and_distinct():
    assert check_seed(1, "contamination.needle") == check_seed(1, "contamination.needle")
    assert check_seed(1, "contamination.needle") != check_seed(2, "contamination.needle")
    assert check_seed(1, "contamination.needle") != check_seed(1, "invariance.batch")


def test_config_validates_and_picks_tolerances_by_dtype():
    assert BatteryConfig(dtype="bf16").tolerances.logits_rel == 5e-2
    assert BatteryConfig().tolerances.agreement == 1.0
    with pytest.raises(PolyinferError, match="dtype"):
        BatteryConfig(dtype="float8")
    with pytest.raises(PolyinferError, match="power of two"):
        BatteryConfig(block_size=12)
    with pytest.raises(PolyinferError, match="positive"):
        BatteryConfig(num_prompts=0)
