"""Fixtures shared by the test packages."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def hf_checkpoint(tmp_path: Path) -> Callable[..., Path]:
    """`hf_checkpoint("llama", **config_overrides) -> Path`: a tiny random HF checkpoint directory
    (see tests/models/checkpoints.py)."""
    # Imported here, not at the top, so that sessions that never build a checkpoint skip importing
    # transformers; `tests/` is on sys.path for this conftest (pytest's default "prepend" import mode).
    from models.checkpoints import make_hf_checkpoint

    return functools.partial(make_hf_checkpoint, tmp_path)
