"""Presets: real model shapes with seeded random weights, for measuring speed without downloading weights.

Each preset is the HF `config.json` of the model it is named after (the `tiny-*` ones are small shapes
for tests). Weights are generated directly on the target device in the target dtype, each tensor from
its own generator seeded by (preset, seed, tensor name): the first k layers of a truncated model equal
those of the whole model, and nothing is built on the CPU first. Matrices are N(0, 0.02); norm weights
are 1 + N(0, 0.1) rather than exactly one, so that a kernel which drops a norm's weight shows up as wrong
against the reference instead of passing by coincidence.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from polyinfer.errors import ModelError
from polyinfer.models.loaded_model import LoadedModel
from polyinfer.models.spec import ModelSpec
from polyinfer.models.weights import Weights, tensor_shapes

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}

PRESETS: dict[str, dict[str, Any]] = {
    "llama-3.2-1b": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "vocab_size": 128256,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
        "max_position_embeddings": 131072,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
    },
    "llama-3.1-8b": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
        "max_position_embeddings": 131072,
        "bos_token_id": 128000,
        "eos_token_id": 128001,
    },
    "qwen3-0.6b": {
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 40960,
        "bos_token_id": 151643,
        "eos_token_id": 151645,
    },
    "smollm2-135m": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 576,
        "intermediate_size": 1536,
        "num_hidden_layers": 30,
        "num_attention_heads": 9,
        "num_key_value_heads": 3,
        "head_dim": 64,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-5,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "tiny-llama": {
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 512,
        "tie_word_embeddings": False,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "tiny-qwen2": {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 160,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 512,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
    "tiny-qwen3": {
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 512,
        "tie_word_embeddings": True,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    },
}


def preset_spec(name: str) -> ModelSpec:
    if name not in PRESETS:
        raise ModelError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
    return ModelSpec.from_hf_config(PRESETS[name], name=name)


def _tensor_seed(preset: str, seed: int, tensor: str) -> int:
    digest = hashlib.sha256(f"{preset}\0{seed}\0{tensor}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1  # manual_seed takes a non-negative int64


def random_tensor(
    preset: str, seed: int, name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    generator = torch.Generator(device=device)
    generator.manual_seed(_tensor_seed(preset, seed, name))
    t = torch.randn(shape, generator=generator, dtype=dtype, device=device)
    if name.endswith("norm.weight"):
        return t.mul_(0.1).add_(1.0)
    return t.mul_(0.02)


def load_preset(
    name: str, *, dtype: torch.dtype, device: torch.device, num_layers: int | None, seed: int = 0
) -> LoadedModel:
    """A preset with seeded random weights (see the module docstring); presets have no tokenizer."""
    spec = preset_spec(name)
    if num_layers is not None:
        spec = spec.with_layers(num_layers)
    shapes = tensor_shapes(spec)

    def get(tensor: str) -> torch.Tensor | None:
        shape = shapes.get(tensor)
        return None if shape is None else random_tensor(name, seed, tensor, shape, dtype, device)

    identity = {
        "preset": name,
        "seed": seed,
        "config": PRESETS[name],
        "dtype": str(dtype),
        "generator": device.type,
    }
    weights_hash = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    return LoadedModel(spec, Weights.from_state_dict(spec, get), None, f"preset:{name}", weights_hash)
