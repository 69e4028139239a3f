"""Fixtures for the verification tests: the tiny model, a fast battery, and the candidates under test."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from polyinfer.engine.candidate import Candidate
from polyinfer.verify import BatteryConfig

CANDIDATES = Path(__file__).parent / "candidates"




@pytest.fixture(scope="session")
def fast() -> BatteryConfig:
    """Small enough for CI; block size 8 so that prompts span several blocks."""
    return BatteryConfig(block_size=8, long_tokens=32)


@pytest.fixture(scope="session")
def candidate() -> Callable[[str], Candidate]:
    """`candidate("sloppy")`: a candidate module from tests/verify/candidates/."""
    return lambda name: Candidate.from_file(CANDIDATES / f"{name}.py")
