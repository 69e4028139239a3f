"""WorkloadProfile numbers on a hand-computable trace, its JSON form, and drift between profiles."""

import dataclasses

import pytest

from polyinfer.traffic.drift import DRIFT_THRESHOLD, drifted
from polyinfer.traffic.formats.native import write_trace
from polyinfer.traffic.profile import WorkloadProfile, load_profile
from polyinfer.traffic.synth import PRESETS, Lognormal, synthesize
from polyinfer.traffic.trace import Request, Trace, TraceError, block_hashes

# Block size 4. Request 1 repeats request 0's first two blocks (8 tokens); request 2 is request 0
# again, partial last block included (10); request 3 repeats request 1's first five blocks (20).
HAND = Trace(
    "hand",
    "polyinfer",
    (
        Request(0.0, 10, 1, prefix_hashes=(1, 2, 3)),
        Request(1.0, 20, 2, prefix_hashes=(1, 2, 4, 5, 6)),
        Request(2.0, 10, 3, prefix_hashes=(1, 2, 3), session="a"),
        Request(4.0, 40, 6, prefix_hashes=(1, 2, 4, 5, 6, 7, 8, 9, 10, 11), session="b"),
    ),
    block_size=4,
)


def test_profile_of_a_hand_computed_trace():
    p = WorkloadProfile.of(HAND)
    assert (p.requests, p.sessions, p.duration_s) == (4, 2, 4.0)
    assert p.rate_rps == 0.75  # three gaps in four seconds
    assert p.interarrival_cv == pytest.approx((2 / 9) ** 0.5 / (4 / 3))  # gaps 1, 1, 2
    assert (p.input_len.mean, p.input_len.p50, p.input_len.max) == (20.0, 15.0, 40)
    assert (p.output_len.mean, p.output_len.p50) == (3.0, 2.5)
    assert p.prefix_reuse == (8 + 10 + 20) / 80
    assert (p.offered_input_tok_s, p.offered_output_tok_s) == (20.0, 3.0)
    assert len(p.input_len.sketch) == 32 and p.input_len.sketch == tuple(sorted(p.input_len.sketch))


def test_a_single_instant_has_no_rate():
    p = WorkloadProfile.of(Trace("one", "polyinfer", (Request(3.0, 5, 5),)))
    assert (p.rate_rps, p.interarrival_cv, p.prefix_reuse, p.offered_input_tok_s) == (0.0, 0.0, 0.0, 0.0)


def test_profile_json_round_trip_and_loading_from_file(tmp_path):
    p = WorkloadProfile.of(HAND)
    assert WorkloadProfile.from_json(p.to_json()) == p
    (tmp_path / "p.json").write_text(p.to_json() + "\n")
    write_trace(HAND, tmp_path / "t.jsonl")
    assert load_profile(tmp_path / "p.json") == p == load_profile(tmp_path / "t.jsonl")
    (tmp_path / "bad.json").write_text('{"polyinfer_profile": 1, "name": "x"}')
    with pytest.raises(TraceError, match=r"bad.json: not a valid workload profile"):
        load_profile(tmp_path / "bad.json")


def test_prompt_tokens_share_exactly_the_shared_blocks():
    a, b, c, d = (HAND.prompt_tokens(r, vocab_size=1000) for r in HAND.requests)
    assert (len(a), len(b), len(d)) == (10, 20, 40)
    assert a == c and a[:8] == b[:8] and a[8:] != b[8:10] and b == d[:20] and b[20:] != d[20:]
    assert HAND.prompt_tokens(Request(0.0, 2, 1, prompt_ids=(5, 6)), 1000) == [5, 6]
    assert block_hashes(a, 4)[:2] == block_hashes(b, 4)[:2] and block_hashes(a, 4)[2] != block_hashes(b, 4)[2]


def test_traces_validate_themselves():
    with pytest.raises(TraceError, match=r"not in arrival order"):
        Trace("t", "x", (Request(2.0, 1, 1), Request(1.0, 1, 1)))
    with pytest.raises(TraceError, match=r"no requests"):
        Trace("t", "x", ())
    with pytest.raises(TraceError, match=r"no block_size"):
        Trace("t", "x", (Request(0.0, 1, 1, prefix_hashes=(1,)),))
    with pytest.raises(TraceError, match=r"lengths must be >= 1"):
        Request(0.0, 0, 1)


CHAT = dataclasses.replace(PRESETS["chat"], requests=1000)


def test_same_distribution_does_not_drift():
    report = drifted(synthesize(CHAT), synthesize(dataclasses.replace(CHAT, seed=7)))
    assert not report.drifted
    # Sketch resolution is 1/32; the rate of 1000 Poisson arrivals is known to within ~3% (1 sigma).
    assert report.components["input_len"] <= 2 / 32 and report.components["output_len"] <= 2 / 32
    assert report.components["arrival_rate"] < 0.15
    assert drifted(synthesize(CHAT), synthesize(CHAT)).score == 0.0


def test_longer_prompts_drift_on_input_length():
    longer = dataclasses.replace(CHAT, input_len=Lognormal(900, 0.9), seed=7)
    report = drifted(WorkloadProfile.of(synthesize(CHAT)), WorkloadProfile.of(synthesize(longer)))
    assert report.drifted and report.threshold == DRIFT_THRESHOLD
    assert max(report.components, key=report.components.__getitem__) == "input_len"
    assert report.components["output_len"] < 0.1


def test_rate_burstiness_and_reuse_changes_are_scored():
    base = synthesize(CHAT)
    assert drifted(base, synthesize(dataclasses.replace(CHAT, rate=4.0))).components["arrival_rate"] == (
        pytest.approx(0.5, abs=0.05)
    )
    assert drifted(base, synthesize(dataclasses.replace(CHAT, cv=3.0))).components["burstiness"] > 0.5
    no_sharing = drifted(base, synthesize(dataclasses.replace(CHAT, shared_fraction=0.0)))
    assert no_sharing.drifted and no_sharing.components["prefix_reuse"] > 0.2
