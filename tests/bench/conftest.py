"""Fixtures for the measurement tests: one torch thread and a tiny in-process engine."""

from __future__ import annotations

import pytest

from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.models.load import load_model


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=2048, max_num_seqs=4))
