"""Hugging Face checkpoint directories: config.json + safetensors (one file or shards), read and written.

Reading memory-maps each safetensors file and converts tensor by tensor into the target dtype on the
target device, touching only the tensors the (possibly truncated) spec needs. Writing goes to a hidden
temporary directory beside the target and is renamed into place, so a killed writer never leaves a
directory that looks complete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import safetensors
import torch
from safetensors.torch import save_file

from polyinfer.errors import ModelError
from polyinfer.models.fingerprint import fingerprint
from polyinfer.models.loaded_model import LoadedModel
from polyinfer.models.spec import ModelSpec
from polyinfer.models.tokenizer import Tokenizer
from polyinfer.models.weights import Weights

INDEX_FILE = "model.safetensors.index.json"
DEFAULT_MAX_SHARD_BYTES = 2_000_000_000


def weight_map(directory: Path) -> dict[str, Path]:
    """Tensor name -> the safetensors file holding it, from the shard index or the files' own headers."""
    index = directory / INDEX_FILE
    if index.exists():
        try:
            names = json.loads(index.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ModelError(f"{index} is not a valid shard index: {e}") from None
        files = {f: directory / f for f in set(names.values())}
        missing = sorted(f for f, p in files.items() if not p.is_file())
        if missing:
            raise ModelError(f"{index} names shards that are missing from {directory}: {', '.join(missing)}")
        return {name: files[f] for name, f in names.items()}
    paths = sorted(directory.glob("*.safetensors"))
    if not paths:
        raise ModelError(
            f"no model.safetensors (or shards with {INDEX_FILE}) in {directory}; polyinfer reads safetensors only"
        )
    out: dict[str, Path] = {}
    for path in paths:
        with _open(path) as f:
            for name in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if name in out:
                    raise ModelError(f"tensor {name!r} is in both {out[name].name} and {path.name}")
                out[name] = path
    return out


def _open(path: Path) -> Any:
    try:
        return safetensors.safe_open(str(path), framework="pt")
    except safetensors.SafetensorError as e:
        raise ModelError(f"{path} is not a valid safetensors file (truncated or corrupt?): {e}") from None


def load_checkpoint(
    directory: Path, *, dtype: torch.dtype, device: torch.device, num_layers: int | None
) -> LoadedModel:
    """Load an HF checkpoint directory; a `tokenizer.json` beside it becomes the model's tokenizer."""
    if not directory.is_dir():
        raise ModelError(f"no such checkpoint directory: {directory}")
    config = directory / "config.json"
    if not config.is_file():
        raise ModelError(f"{directory} has no config.json; an HF checkpoint directory needs one")
    spec = ModelSpec.from_config_file(config, name=directory.name)
    if num_layers is not None:
        spec = spec.with_layers(num_layers)
    files = weight_map(directory)
    with ExitStack() as stack:
        handles: dict[Path, Any] = {}

        def get(name: str) -> torch.Tensor | None:
            path = files.get(name)
            if path is None:
                return None
            if path not in handles:
                handles[path] = stack.enter_context(_open(path))
            try:
                t = handles[path].get_tensor(name)
            except safetensors.SafetensorError as e:
                raise ModelError(f"cannot read tensor {name!r} from {path}: {e}") from None
            return t.to(device).to(dtype) if t.is_floating_point() else t.to(device)

        weights = Weights.from_state_dict(spec, get)
    tokenizer = (
        Tokenizer.from_dir(directory, spec.eos_token_ids)
        if (directory / "tokenizer.json").is_file()
        else None
    )
    weights_hash = fingerprint(sorted(set(files.values())))
    return LoadedModel(spec, weights, tokenizer, str(directory), weights_hash)


def save_checkpoint(
    loaded: LoadedModel, path: Path | str, *, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES
) -> Path:
    """Write `loaded` as an HF checkpoint directory at `path` (which must not exist or be empty).

    Files: config.json, model.safetensors (or model-0000i-of-0000n.safetensors shards of at most
    `max_shard_bytes` each, plus the index, when larger), the tokenizer files when there is a tokenizer,
    and polyinfer.json recording the source and weights hash. Tensors keep their dtype; they are copied
    to the CPU one shard at a time. Returns the directory.
    """
    path = Path(path)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ModelError(f"{path} already exists; save a checkpoint to a new directory")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.tmp-", dir=path.parent))
    try:
        _write(loaded, tmp, max_shard_bytes)
        for file in tmp.iterdir():  # mkdtemp and safetensors create owner-only files
            file.chmod(0o644)
        tmp.chmod(0o755)
        if path.exists():
            path.rmdir()
        os.rename(tmp, path)
    except OSError as e:
        raise ModelError(f"cannot write checkpoint to {path}: {e}") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path


def _write(loaded: LoadedModel, directory: Path, max_shard_bytes: int) -> None:
    state = loaded.weights.to_state_dict()
    shards: list[list[str]] = [[]]
    size = 0
    for name, t in state.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    files = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    for file, names in zip(files, shards, strict=True):
        save_file(
            {n: state[n].detach().to("cpu").contiguous() for n in names},
            str(directory / file),
            metadata={"format": "pt"},
        )
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {
            "metadata": {"total_size": total},
            "weight_map": {n: f for f, names in zip(files, shards, strict=True) for n in names},
        }
        (directory / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    config = loaded.spec.to_hf_config() | {
        "torch_dtype": str(loaded.weights.embed.dtype).removeprefix("torch.")
    }
    (directory / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    if loaded.tokenizer is not None:
        loaded.tokenizer.save(directory)
    provenance = {"source": loaded.source, "weights_hash": loaded.weights_hash}
    (directory / "polyinfer.json").write_text(json.dumps(provenance, indent=2) + "\n")
