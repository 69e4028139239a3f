"""Fixtures for the verification tests: the tiny model, a fast battery, and the candidates under test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from polyinfer.engine.candidate import Candidate
from polyinfer.models.load import LoadedModel, load_model
from polyinfer.verify import BatteryConfig

CANDIDATES = Path(__file__).parent / "candidates"


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    # Tiny models gain nothing from threads, and on a busy two-core runner torch's spinning worker
    # threads make every small op an order of magnitude slower.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    return load_model("tiny-llama")


@pytest.fixture(scope="session")
def fast() -> BatteryConfig:
    """Small enough for CI; block size 8 so that prompts span several blocks."""
    return BatteryConfig(block_size=8, long_tokens=32)


@pytest.fixture(scope="session")
def candidate() -> Callable[[str], Candidate]:
    """`candidate("sloppy")`: a candidate module from tests/verify/candidates/."""
    return lambda name: Candidate.from_file(CANDIDATES / f"{name}.py")
