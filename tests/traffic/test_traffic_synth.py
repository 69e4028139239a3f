"""Synthetic workloads: reproducible, and statistically what the spec asks for."""

import dataclasses
import itertools

import numpy as np
import pytest

from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import PRESETS, Empirical, Lognormal, SynthSpec, synthesize
from polyinfer.traffic.trace import TraceError

SHORT = Lognormal(20, 0.5)  # short messages keep large statistical samples fast


def test_same_seed_same_trace_other_seed_other_trace():
    spec = dataclasses.replace(PRESETS["chat"], requests=200, turns=2)
    assert synthesize(spec) == synthesize(spec)
    assert synthesize(dataclasses.replace(spec, seed=1)) != synthesize(spec)


def test_changing_lengths_keeps_arrival_times():
    spec = SynthSpec(requests=300, input_len=SHORT, turns=3)
    longer = dataclasses.replace(spec, input_len=Lognormal(200, 0.5))
    assert [r.arrival_s for r in synthesize(spec).requests] == [
        r.arrival_s for r in synthesize(longer).requests
    ]


def test_poisson_arrivals_have_the_requested_rate_and_cv_one():
    profile = WorkloadProfile.of(
        synthesize(SynthSpec(rate=5.0, requests=20_000, input_len=SHORT, output_len=SHORT))
    )
    assert profile.rate_rps == pytest.approx(5.0, rel=0.03)
    assert profile.interarrival_cv == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("cv", [0.0, 0.5, 2.0])
def test_gamma_arrivals_have_the_requested_burstiness(cv):
    spec = SynthSpec(rate=3.0, cv=cv, requests=20_000, input_len=SHORT, output_len=SHORT)
    profile = WorkloadProfile.of(synthesize(spec))
    assert profile.rate_rps == pytest.approx(3.0, rel=0.05)
    assert profile.interarrival_cv == pytest.approx(cv, abs=0.1 * cv + 1e-9)


def test_lengths_follow_the_lognormal_median():
    profile = WorkloadProfile.of(synthesize(SynthSpec(requests=4000, input_len=Lognormal(300, 0.6))))
    assert profile.input_len.p50 == pytest.approx(300, rel=0.05)
    assert profile.output_len.p50 == pytest.approx(200, rel=0.05)


def test_shared_system_prompts_give_the_expected_prefix_reuse():
    spec = SynthSpec(
        requests=3000,
        input_len=Lognormal(200, 0.3),
        output_len=SHORT,
        shared_prefix_len=64,
        shared_prefixes=3,
        shared_fraction=0.5,
    )
    trace = synthesize(spec)
    profile = WorkloadProfile.of(trace)
    mean_prompt = 200 * np.exp(0.3**2 / 2)  # the system prompt is part of the prompt length
    assert profile.input_len.mean == pytest.approx(mean_prompt, rel=0.03)
    assert profile.prefix_reuse == pytest.approx(0.5 * 64 / mean_prompt, abs=0.02)
    # The four 16-token blocks of each system prompt are shared; nothing past them is.
    openings = {r.prefix_hashes[:4] for r in trace.requests if r.input_len > 64}
    assert 3 < len(openings) < len(trace)
    assert len({r.prefix_hashes[4] for r in trace.requests if len(r.prefix_hashes) > 4}) == sum(
        len(r.prefix_hashes) > 4 for r in trace.requests
    )


def test_each_turn_resends_the_conversation_so_far():
    trace = synthesize(SynthSpec(requests=300, input_len=SHORT, output_len=SHORT, turns=3, think_s=2.0))
    by_session: dict[str, list] = {}
    for r in trace.requests:
        by_session.setdefault(r.session, []).append(r)
    assert len(by_session) >= 100
    for turns in by_session.values():
        for before, after in itertools.pairwise(turns):
            assert after.input_len > before.input_len + before.output_len
            full_blocks = before.input_len // trace.block_size
            assert after.prefix_hashes[:full_blocks] == before.prefix_hashes[:full_blocks]
    assert WorkloadProfile.of(trace).prefix_reuse > 0.3


def test_scale_and_max_len_shrink_a_preset_for_a_small_model():
    spec = dataclasses.replace(PRESETS["chat"], requests=500, turns=4, scale=0.1, max_len=128)
    trace = synthesize(spec)
    assert len(trace) == 500
    totals = [r.input_len + r.output_len for r in trace.requests]
    assert max(totals) == 128  # long conversations run into the cap, and none past it


def test_duration_bounds_the_trace():
    trace = synthesize(
        SynthSpec(rate=10.0, requests=None, duration_s=60.0, input_len=SHORT, output_len=SHORT)
    )
    assert max(r.arrival_s for r in trace.requests) < 60.0
    assert len(trace) == pytest.approx(600, rel=0.15)


def test_empirical_lengths_are_resampled_from_the_given_values():
    trace = synthesize(SynthSpec(requests=200, input_len=Empirical((5, 50)), output_len=Empirical((7,))))
    assert {r.input_len for r in trace.requests} == {5, 50}
    assert {r.output_len for r in trace.requests} == {7}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"duration_s": 10.0}, "exactly one of"),
        ({"rate": 0.0}, "rate > 0"),
        ({"shared_fraction": 1.5, "turns": 0}, "0 <= shared_fraction <= 1; turns >= 1"),
        ({"shared_prefix_len": 100, "max_len": 64}, "max_len leaves room"),
    ],
)
def test_invalid_specs_say_what_is_wrong(changes, message):
    with pytest.raises(TraceError, match=message):
        SynthSpec(**changes)


def test_invalid_length_distributions_are_refused():
    with pytest.raises(TraceError):
        Lognormal(0, 1)
    with pytest.raises(TraceError):
        Empirical(())


def test_each_preset_has_the_shape_its_name_promises():
    profiles = {name: WorkloadProfile.of(synthesize(spec)) for name, spec in PRESETS.items()}
    rag, agent, code, batch, chat = (profiles[n] for n in ("rag", "agent", "code", "batch", "chat"))
    # rag and code: long prompts, short replies; code arrives fastest.
    assert rag.input_len.p50 > 10 * rag.output_len.p50 and code.input_len.p50 > 10 * code.output_len.p50
    assert code.rate_rps > max(rag.rate_rps, chat.rate_rps, agent.rate_rps)
    # agent: multi-turn sessions that resend their history, so most prompt tokens are cached prefixes.
    assert agent.sessions < agent.requests / 3 and agent.prefix_reuse > max(0.7, 2 * chat.prefix_reuse)
    # batch: everything queued at once, long replies.
    assert batch.duration_s < 1 and batch.output_len.p50 > 2 * chat.output_len.p50
