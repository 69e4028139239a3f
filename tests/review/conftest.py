"""Fixtures for the review tests: a tiny model, candidates, and verification reports made to order."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from polyinfer.engine.candidate import Candidate
from polyinfer.models.load import LoadedModel
from polyinfer.verify import CheckResult, Report


@pytest.fixture
def tweaked() -> Candidate:
    """A candidate that differs from the reference by a comment (so its diff is not empty)."""
    source = Candidate.reference().source.replace("def build(", "# built for review tests\ndef build(")
    return Candidate(source, {"tile": 64}, "tweaked")


@pytest.fixture
def report_for() -> Callable[..., Report]:
    """`report_for(candidate, model, passed=True, speedup=1.5)`: a report as the battery would write it."""

    def make(
        candidate: Candidate, model: LoadedModel, passed: bool = True, speedup: float | None = 1.5
    ) -> Report:
        checks = (
            CheckResult(
                "equivalence.logits",
                passed,
                {"max_rel_err": 0.0 if passed else 0.3},
                11,
                0.2,
                "" if passed else "relative logits error 0.3 against the reference exceeds 0.0001",
            ),
            CheckResult("integrity.canary", True, {"caught_by": "equivalence.logits"}, 12, 0.1),
        )
        return Report(
            candidate.hash,
            candidate.name,
            model.source,
            model.weights_hash,
            model.spec.num_layers,
            "cpu",
            "float32",
            16,
            5,
            False,
            checks,
            0.3,
            speedup,
            time.time(),
        )

    return make


@pytest.fixture(scope="session")
def candidate_file() -> Callable[[str], Candidate]:
    """`candidate_file("fused")`: one of the verification tests' candidates."""
    root = Path(__file__).parent.parent / "verify" / "candidates"
    return lambda name: Candidate.from_file(root / f"{name}.py")
