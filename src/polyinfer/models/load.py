"""load_model: one model reference -> a LoadedModel, whatever the source.

A reference is None (the embedded default), a directory (an HF checkpoint), a path ending in `.gguf`,
or the name of a preset (random weights at a real model's shape) or of the embedded default.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from polyinfer.errors import ModelError
from polyinfer.models.checkpoint import load_checkpoint
from polyinfer.models.default import DEFAULT_NAME, default_checkpoint
from polyinfer.models.loaded_model import LoadedModel
from polyinfer.models.presets import PRESETS, load_preset, preset_spec
from polyinfer.models.spec import ModelSpec

__all__ = ["LoadedModel", "load_model", "model_spec"]


def load_model(
    ref: str | None,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    num_layers: int | None = None,
) -> LoadedModel:
    """Load `ref` into `dtype` on `device`; with `num_layers=k` only the first k layers are read.

    Raises ModelError for any reference that cannot be loaded, saying why.
    """
    device = torch.device(device)
    if ref is None or ref == DEFAULT_NAME:
        loaded = load_checkpoint(default_checkpoint(), dtype=dtype, device=device, num_layers=num_layers)
        return LoadedModel(
            loaded.spec, loaded.weights, loaded.tokenizer, f"default:{DEFAULT_NAME}", loaded.weights_hash
        )
    path = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        # Imported here so that presets and checkpoint directories load where `gguf` is not installed.
        from polyinfer.models.gguf_file import load_gguf

        return load_gguf(path, dtype=dtype, device=device, num_layers=num_layers)
    if path.is_dir():
        return load_checkpoint(path, dtype=dtype, device=device, num_layers=num_layers)
    if ref in PRESETS:
        return load_preset(ref, dtype=dtype, device=device, num_layers=num_layers)
    if os.sep in ref or ref.startswith((".", "~")) or path.exists():
        raise ModelError(
            f"no checkpoint directory at {ref}; give a directory holding config.json and "
            "*.safetensors, or a .gguf file"
        )
    raise ModelError(
        f"unknown model {ref!r}: give a preset name ({', '.join(PRESETS)}), {DEFAULT_NAME!r} (the embedded "
        "default, also used when no model is given), an HF checkpoint directory (config.json + "
        "*.safetensors), or a path to a .gguf file"
    )


def model_spec(ref: str | None) -> ModelSpec:
    """The whole model's spec for `ref`, read from its configuration alone (no weights are loaded)."""
    if ref is None or ref == DEFAULT_NAME:
        return ModelSpec.from_config_file(default_checkpoint() / "config.json", name=DEFAULT_NAME)
    path = Path(ref).expanduser()
    if ref.endswith(".gguf"):
        if not path.is_file():
            raise ModelError(f"no GGUF file at {path}")
        from polyinfer.models.gguf_file import GGUFFile

        return ModelSpec.from_hf_config(GGUFFile(path).hf_config(), name=path.stem)
    if path.is_dir():
        return ModelSpec.from_config_file(path / "config.json", name=path.name)
    if ref in PRESETS:
        return preset_spec(ref)
    return load_model(ref, num_layers=1).spec  # raises the same clear error load_model gives
