"""Fixtures shared by the test packages."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from polyinfer.models.load import LoadedModel, load_model

# Triton kernels run on the CPU through Triton's interpreter, which is chosen when a kernel module is
# imported; `TRITON_INTERPRET=0 pytest` on a GPU machine runs them compiled instead.
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture
def hf_checkpoint(tmp_path: Path) -> Callable[..., Path]:
    """`hf_checkpoint("llama", **config_overrides) -> Path`: a tiny random HF checkpoint directory
    (see tests/models/checkpoints.py)."""
    # Imported here, not at the top, so that sessions that never build a checkpoint skip importing
    # transformers; `tests/` is on sys.path for this conftest (pytest's default "prepend" import mode).
    from models.checkpoints import make_hf_checkpoint

    return functools.partial(make_hf_checkpoint, tmp_path)


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Tests run tiny models on a shared two-core runner: one intra-op thread keeps torch's spinning
    workers from making every small op an order of magnitude slower (and timings from wobbling)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def tiny() -> LoadedModel:
    return load_model("tiny-llama")
