"""Each adversarial candidate is rejected, by the check that exists to catch its bug; honest optimized
candidates pass the whole battery."""

from __future__ import annotations

import pytest

from polyinfer.models.load import load_model
from polyinfer.verify import BatteryConfig, verify_candidate

# candidate file -> (the check that must fail, words its reason must contain, a check that must pass:
# proof that the bug is specific and not just a broken candidate failing everything)
ADVERSARIES = {
    "reads_other_blocks": ("contamination.needle", "needle", None),
    "skips_layer": ("equivalence.logits", "relative logits error", "invariance.determinism"),
    "stale_logits": ("equivalence.logits", "relative logits error", "invariance.determinism"),
    "writes_outside": ("contamination.needle", "outside its blocks", None),
    "wrong_rope_prefix": ("contamination.shared_prefix", "cached prefix", "equivalence.logits"),
    "sloppy": ("equivalence.logits", "relative logits error", "invariance.determinism"),
    "nondeterministic": ("invariance.determinism", "same inputs twice", "equivalence.logits"),
    "self_modifying": ("integrity.hash", "code changed", "equivalence.logits"),
}


@pytest.mark.parametrize("name", ADVERSARIES)
def test_adversarial_candidate_is_rejected_for_the_right_reason(name, tiny, fast, candidate):
    check, words, clean = ADVERSARIES[name]
    report = verify_candidate(candidate(name), tiny, fast, seed=7)
    assert not report.passed
    assert check in report.failed, report.to_markdown()
    assert words in report.check(check).reason
    if clean is not None:
        assert report.check(clean).passed, report.check(clean).reason


def test_measured_code_that_differs_from_the_verified_code_is_rejected(tiny, fast, candidate):
    honest = candidate("fused")
    report = verify_candidate(honest, tiny, fast, seed=7, measured_hash=candidate("sloppy").hash)
    assert report.failed == ("integrity.hash",)
    assert "is not the verified code" in report.check("integrity.hash").reason


def test_a_candidate_that_changes_the_shared_weights_is_rejected(fast, candidate):
    own = load_model("tiny-llama")  # the candidate ruins these weights, so not the shared fixture
    report = verify_candidate(candidate("mutates_weights"), own, fast, seed=7)
    assert report.check("equivalence.logits").passed  # the reference reads the same ruined weights
    assert "integrity.hash" in report.failed
    assert "changed the model's weights" in report.check("integrity.hash").reason


@pytest.mark.parametrize(
    ("name", "preset"),
    [("fused", "tiny-qwen2"), ("batched_decode", "tiny-llama"), ("batched_decode", "tiny-qwen3")],
)
def test_honest_optimized_candidates_pass(name, preset, fast, candidate):
    report = verify_candidate(candidate(name), load_model(preset), fast, seed=11)
    assert report.passed, report.to_markdown()
    assert report.check("contamination.preemption").numbers["preemptions"] > 0
    assert report.check("contamination.shared_prefix").numbers["cached_tokens"] > 0
    assert report.check("contamination.block_reuse").numbers["reused_blocks"] > 0


def test_honest_candidates_pass_in_bfloat16_under_its_looser_tolerance(candidate):
    import torch

    model = load_model("tiny-qwen3", dtype=torch.bfloat16)
    config = BatteryConfig(block_size=8, long_tokens=32, dtype="bfloat16")
    assert verify_candidate(candidate("batched_decode"), model, config, seed=3).passed
    assert not verify_candidate(candidate("skips_layer"), model, config, seed=3).passed
