"""ModelSpec <-> HF config and Weights <-> HF state dict are inverse pairs."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from polyinfer.models.presets import PRESETS, preset_spec
from polyinfer.models.spec import ModelSpec, RopeSpec
from polyinfer.models.weights import Weights, tensor_shapes

MISTRAL = ModelSpec(
    family="mistral",
    vocab_size=100,
    hidden_size=32,
    intermediate_size=48,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=8,
    sliding_window=16,
    eos_token_ids=(2, 3),
    rope=RopeSpec(type="linear", factor=2.0),
)


@pytest.mark.parametrize("spec", [*(preset_spec(n) for n in PRESETS), MISTRAL], ids=[*PRESETS, "mistral"])
def test_hf_config_round_trip(spec):
    assert ModelSpec.from_hf_config(spec.to_hf_config(), name=spec.name) == spec
    assert ModelSpec.from_hf_config(spec.to_hf_config()) == dataclasses.replace(spec, name="")


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_state_dict_round_trip(name):
    spec = preset_spec(name)
    state = {n: torch.randn(shape) for n, shape in tensor_shapes(spec).items()}
    weights = Weights.from_state_dict(spec, state)
    back = weights.to_state_dict()
    assert back.keys() == state.keys() and all(back[n] is t for n, t in state.items())
    assert (weights.lm_head is weights.embed) == spec.tie_word_embeddings
