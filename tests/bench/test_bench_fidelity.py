"""Tier fidelity: Spearman between fast-tier predictions and full-tier measurements, on hand-made rows
and end to end through engine worker processes on candidates of very different speeds."""

from __future__ import annotations

import math

import pytest

from bench.workloads import sleepy, small_trace
from polyinfer.bench.fidelity import FidelityReport, FidelityRow
from polyinfer.bench.replay import ReplayOptions
from polyinfer.bench.session import BenchSession, model_depth
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.errors import PolyinferError


def rows(predicted, measured):
    return [FidelityRow(f"c{i}", p, m) for i, (p, m) in enumerate(zip(predicted, measured, strict=True))]


def test_spearman_of_hand_made_rankings():
    assert FidelityReport.of(rows([10, 20, 30, 40], [1, 5, 6, 100])).spearman == pytest.approx(1.0)
    assert FidelityReport.of(rows([10, 20, 30], [3, 2, 1])).spearman == pytest.approx(-1.0)
    assert FidelityReport.of(rows([10, 20, 30, 40], [1, 3, 2, 4])).spearman == pytest.approx(0.8)
    flat = FidelityReport.of(rows([10, 10, 10], [1, 2, 3]))
    assert math.isnan(flat.spearman) and flat.to_json()["spearman"] is None
    with pytest.raises(PolyinferError, match="at least 3"):
        FidelityReport.of(rows([1, 2], [1, 2]))


def test_model_depth_reads_the_full_layer_count():
    assert model_depth("tiny-llama") == 3
    assert model_depth("llama-3.1-8b") == 32


def test_fidelity_ranks_slowed_candidates_right(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the engine workers time on a shared machine
    session = BenchSession(
        "tiny-llama",
        EngineConfig(kv_cache_tokens=2048, max_num_seqs=4),
        layers=2,
        reps=3,
        warmup=1,
        rounds=1,
        timeout_s=120,
    )
    candidates = [sleepy(40), Candidate.reference(), sleepy(12)]
    report = session.fidelity(small_trace(4, output_len=4), ReplayOptions(warmup_requests=1), candidates)
    assert [r.candidate for r in report.rows] == [c.label for c in candidates]
    assert report.spearman == pytest.approx(1.0)
    fastest = max(report.rows, key=lambda r: r.measured_tok_s)
    assert fastest.candidate == Candidate.reference().label
