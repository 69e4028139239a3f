"""Fixtures shared by the test packages."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path

import pytest

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
