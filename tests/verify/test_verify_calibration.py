"""The half-precision logits tolerance follows the reference's own rounding error against float32."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.models.load import load_model
from polyinfer.verify import verify_candidate
from polyinfer.verify.calibration import NOISE_FACTOR, NoiseFloor, _float32
from polyinfer.verify.config import TOLERANCES, Tolerance


def test_the_tolerance_is_the_larger_of_the_dtypes_and_a_multiple_of_the_floor():
    base = TOLERANCES["bfloat16"]
    assert NoiseFloor(None).tolerance(base) == base
    assert NoiseFloor(0.001).tolerance(base) == base  # a small floor never tightens the fixed bound
    deep = NoiseFloor(0.03).tolerance(base)
    assert deep.logits_rel == pytest.approx(NOISE_FACTOR * 0.03) and deep.logits_rel > base.logits_rel
    assert (deep.agreement, deep.perplexity_rel) == (base.agreement, base.perplexity_rel)


def test_the_float32_copy_keeps_a_tied_head_tied_and_the_original_untouched():
    model = load_model("tiny-qwen2", dtype=torch.bfloat16)  # tied embeddings, q/k/v biases
    assert model.spec.tie_word_embeddings and model.weights.lm_head is model.weights.embed
    wide = _float32(model.weights)
    assert wide.lm_head is wide.embed and wide.embed.dtype == torch.float32
    assert all(t.dtype == torch.float32 for t in wide.tensors())
    assert all(t.dtype == torch.bfloat16 for t in model.weights.tensors())
    assert torch.equal(wide.layers[0].q_proj, model.weights.layers[0].q_proj.float())
    assert wide.layers[0].q_bias is not None and wide.layers[0].q_norm is None


def test_a_bfloat16_battery_measures_its_floor_and_still_catches_the_canary(fast, candidate):
    model = load_model("tiny-llama", dtype=torch.bfloat16)
    config = dataclasses.replace(fast, dtype="bfloat16", only=("equivalence.logits", "contamination.needle", "integrity.canary"))
    report = verify_candidate(candidate("fused"), model, config, seed=3)
    assert report.passed, report.to_markdown()
    # bf16 rounding is real (the floor is not zero) and the tolerance the checks used is reported.
    assert report.noise_floor is not None and 0 < report.noise_floor < 0.1
    assert report.logits_tolerance == max(TOLERANCES["bfloat16"].logits_rel, NOISE_FACTOR * report.noise_floor)
    assert report.check("equivalence.logits").numbers["tolerance"] == report.logits_tolerance
    assert report.check("integrity.canary").passed
    assert "logits tolerance" in report.to_markdown()


def test_float32_and_explicit_tolerances_are_not_calibrated(tiny, fast):
    plain = verify_candidate(Candidate.reference(), tiny, dataclasses.replace(fast, only=("equivalence.logits",)),
                             seed=3)
    assert plain.noise_floor is None and plain.logits_tolerance == TOLERANCES["float32"].logits_rel
    model = load_model("tiny-llama", dtype=torch.bfloat16)
    given = Tolerance(logits_rel=0.2, agreement=0.5, perplexity_rel=0.1)
    config = dataclasses.replace(fast, dtype="bfloat16", tolerance=given, only=("equivalence.logits",))
    report = verify_candidate(Candidate.reference(), model, config, seed=3)
    assert report.noise_floor is None and report.logits_tolerance == 0.2
