"""Fixtures for the measurement tests: one torch thread and a tiny in-process engine."""

from __future__ import annotations

import pytest
import torch

from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.models.load import load_model


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Timing on a shared 2-core machine: one intra-op thread keeps torch from stalling on a busy core."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine(load_model("tiny-llama"), EngineConfig(kv_cache_tokens=2048, max_num_seqs=4))
