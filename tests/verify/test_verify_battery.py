"""The battery as a whole: exact mode, the canary, speedup claims, replayable seeds, the report and its
cost, perplexity on real weights, and isolation from a candidate that hangs."""

from __future__ import annotations

import dataclasses

import pytest

from polyinfer.engine.candidate import Candidate
from polyinfer.models.load import load_model
from polyinfer.verify import ALL_CHECKS, BatteryConfig, Report, Tolerance, verify_candidate
from polyinfer.verify.integrity import canary


def test_exact_mode_passes_the_reference_and_fails_a_merely_close_candidate(tiny, fast, candidate):
    exact = dataclasses.replace(fast, exact=True)
    assert verify_candidate(Candidate.reference(), tiny, exact, seed=1).passed
    close = verify_candidate(candidate("batched_decode"), tiny, exact, seed=1)
    assert close.failed == ("equivalence.exact",)
    numbers = close.check("equivalence.exact").numbers
    assert 0 < numbers["max_abs_diff"] < 1e-4  # close, but not bit-identical


def test_the_canary_fails_the_battery_and_is_caught_every_run(tiny, fast):
    bird = canary(seed=5, num_layers=tiny.spec.num_layers)
    assert not verify_candidate(bird, tiny, fast, seed=5).passed
    report = verify_candidate(Candidate.reference(), tiny, fast, seed=5)
    assert report.check("integrity.canary").passed
    assert report.check("integrity.canary").numbers["caught_by"] == "equivalence.logits"


def test_a_battery_too_lax_to_catch_the_canary_fails_every_report(tiny, fast):
    lax = dataclasses.replace(fast, tolerance=Tolerance(logits_rel=1e9, agreement=0.0, perplexity_rel=1e9))
    report = verify_candidate(Candidate.reference(), tiny, lax, seed=2)
    assert report.failed == ("integrity.canary",)
    assert "battery is broken" in report.check("integrity.canary").reason


def test_speedup_claims_above_three_are_remeasured_and_reverified(tiny, fast, candidate):
    honest = candidate("fused")
    fast = dataclasses.replace(fast, only=("equivalence.logits", "contamination.needle", "integrity.speedup"))
    modest = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=1.8)
    assert modest.passed and modest.speedup == 1.8

    unconfirmed = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0)
    assert unconfirmed.failed == ("integrity.speedup",) and unconfirmed.speedup is None

    calls = []
    lucky = verify_candidate(
        honest, tiny, fast, seed=4, claimed_speedup=5.0, remeasure=lambda c: calls.append(c.hash) or 2.0
    )
    assert calls == [honest.hash]
    assert (
        lucky.failed == ("integrity.speedup",) and "re-measurement" in lucky.check("integrity.speedup").reason
    )

    # A claim whose own 95% interval is wide is confirmed by a re-measurement inside that interval,
    # and what counts is the lower of the two numbers.
    wide = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0, claimed_low=3.2,
                            remeasure=lambda c: 3.5)
    assert wide.passed and wide.speedup == 3.5
    below = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0, claimed_low=3.2,
                             remeasure=lambda c: 3.1)
    assert below.failed == ("integrity.speedup",) and "at least 3.2x" in below.check("integrity.speedup").reason
    # A narrow interval does not lower the bar below the agreement fraction of the claim.
    narrow = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0, claimed_low=4.9,
                              remeasure=lambda c: 3.2)
    assert narrow.failed == ("integrity.speedup",) and "at least 3.33x" in narrow.check("integrity.speedup").reason
    # Two measurements of one candidate in two worker processes may differ by a quarter: the lower counts.
    drifted = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0, claimed_low=4.9,
                               remeasure=lambda c: 3.85)
    assert drifted.passed and drifted.speedup == 3.85

    confirmed = verify_candidate(honest, tiny, fast, seed=4, claimed_speedup=5.0, remeasure=lambda c: 4.6)
    assert confirmed.passed and confirmed.speedup == 4.6
    assert confirmed.check("integrity.speedup").numbers["reverified"] is True
    # The re-verification ran the battery again: more guarded forward calls than the modest run's.
    assert (
        confirmed.check("integrity.hash").numbers["guarded_calls"]
        > modest.check("integrity.hash").numbers["guarded_calls"]
    )


def test_a_sloppy_candidate_cannot_make_a_big_speedup_count(tiny, fast, candidate):
    fast = dataclasses.replace(fast, only=("equivalence.logits", "integrity.speedup"))
    report = verify_candidate(
        candidate("sloppy"), tiny, fast, seed=4, claimed_speedup=5.0, remeasure=lambda c: 5.0
    )
    assert "integrity.speedup" in report.failed and report.speedup is None


def test_seeds_replay_and_fresh_seeds_differ(tiny, fast, candidate):
    fast = dataclasses.replace(
        fast, only=("equivalence.greedy", "contamination.needle", "contamination.preemption")
    )
    first = verify_candidate(candidate("batched_decode"), tiny, fast, seed=99)
    again = verify_candidate(candidate("batched_decode"), tiny, fast, seed=99)
    assert [(c.seed, dict(c.numbers)) for c in first.checks] == [
        (c.seed, dict(c.numbers)) for c in again.checks
    ]
    one = verify_candidate(
        candidate("batched_decode"), tiny, dataclasses.replace(fast, only=("contamination.needle",)), seed=99
    )
    needle = first.check("contamination.needle")
    assert [c.name for c in one.checks] == ["contamination.needle", "integrity.hash"]  # the hash always runs
    assert (one.checks[0].seed, dict(one.checks[0].numbers)) == (needle.seed, dict(needle.numbers))
    fresh = verify_candidate(candidate("batched_decode"), tiny, fast)
    assert fresh.seed != 99 and fresh.check("contamination.needle").seed != needle.seed


def test_report_records_cost_numbers_and_round_trips(tiny, fast):
    report = verify_candidate(Candidate.reference(), tiny, fast, seed=3)
    assert report.seconds > 0 and all(c.seconds >= 0 for c in report.checks)
    assert report.seconds >= sum(c.seconds for c in report.checks) * 0.99
    assert [c.name for c in report.checks] == [n for n in ALL_CHECKS if n != "equivalence.exact"]
    assert Report.from_json(report.to_json()) == report
    text = report.to_markdown()
    assert "PASSED" in text and f"{report.seconds:.2f} s" in text and "contamination.preemption" in text
    assert report.check("integrity.hash").numbers["weights_unchanged"] is True
    assert report.check("equivalence.perplexity").skipped  # presets have no tokenizer


def test_perplexity_on_real_weights():
    model = load_model(None, num_layers=1)
    config = BatteryConfig(only=("equivalence.perplexity",))
    ok = verify_candidate(Candidate.reference(), model, config, seed=1).check("equivalence.perplexity")
    assert ok.passed and not ok.skipped and ok.numbers["rel_delta"] == 0
    sloppy = Candidate.from_file(__file__.rsplit("/", 1)[0] + "/candidates/sloppy.py")
    bad = verify_candidate(sloppy, model, config, seed=1).check("equivalence.perplexity")
    assert not bad.passed and bad.numbers["rel_delta"] > config.tolerances.perplexity_rel


def test_a_candidate_that_raises_fails_its_checks_with_the_error():
    broken = Candidate(
        Candidate.reference().source + "\n\ndef build(ctx):\n    raise ValueError('no build')\n"
    )
    report = verify_candidate(broken, load_model("tiny-llama"), BatteryConfig(block_size=8), seed=1)
    assert "no build" in report.check("equivalence.logits").reason
    assert report.check("integrity.canary").passed  # the battery itself is fine


def test_unknown_check_names_are_refused(tiny):
    with pytest.raises(Exception, match="unknown check"):
        verify_candidate(Candidate.reference(), tiny, BatteryConfig(only=("equivalence.nope",)))


@pytest.mark.slow
def test_isolated_battery_survives_a_hanging_candidate(candidate):
    config = BatteryConfig(block_size=8, timeout_s=3)
    report = verify_candidate(candidate("hangs"), "tiny-llama", config, seed=1, isolated=True)
    assert report.failed == ("battery",)
    assert "timeout" in report.check("battery").reason


def test_verdicts_are_recorded_on_the_board(tmp_path, tiny, fast, candidate):
    from polyinfer.board import Board
    from polyinfer.verify.report import record_verdicts

    sloppy = candidate("sloppy")
    report = verify_candidate(sloppy, tiny, dataclasses.replace(fast, only=("equivalence.logits",)), seed=1)
    with Board.open(tmp_path / "board.db") as board:
        study = board.create_study("s")
        board.add_candidate(
            study.id, sloppy.hash, name="sloppy", source=sloppy.source, knobs={}, generator="test"
        )
        record_verdicts(board, study.id, report)
        verdicts = {v.check: v for v in board.verdicts(study.id, sloppy.hash)}
    assert set(verdicts) == {"equivalence.logits", "integrity.hash"}
    logits = verdicts["equivalence.logits"]
    assert not logits.passed and logits.seed == report.check("equivalence.logits").seed
    assert "relative logits error" in logits.details["reason"] and logits.details["max_rel_err"] > 1e-4
