"""Presets: real shapes, deterministic seeded weights, truncation that keeps the first layers' values."""

from __future__ import annotations

import pytest
import torch

from polyinfer.models.load import load_model
from polyinfer.models.presets import PRESETS, load_preset, preset_spec
from polyinfer.models.spec import ModelSpec
from polyinfer.models.weights import Weights, tensor_shapes

CPU = torch.device("cpu")


def non_embedding_params(spec: ModelSpec) -> int:
    return spec.parameter_count() - spec.vocab_size * spec.hidden_size * (
        1 if spec.tie_word_embeddings else 2
    )


@pytest.mark.parametrize(
    ("name", "total", "non_embedding"),
    [  # published sizes; parameter_count leaves out norm weights, a few hundred thousand at most
        ("llama-3.2-1b", 1.2358e9, None),
        ("llama-3.1-8b", 8.0303e9, None),
        ("qwen3-0.6b", 0.596e9, 0.44e9),
        ("smollm2-135m", 134.5e6, None),
    ],
)
def test_real_shapes_have_published_sizes(name, total, non_embedding):
    spec = preset_spec(name)
    assert spec.parameter_count() == pytest.approx(total, rel=2e-3)
    if non_embedding:
        assert non_embedding_params(spec) == pytest.approx(non_embedding, rel=1e-2)


def test_shape_details():
    llama1b, llama8b, qwen = (
        preset_spec("llama-3.2-1b"),
        preset_spec("llama-3.1-8b"),
        preset_spec("qwen3-0.6b"),
    )
    assert (llama1b.rope.type, llama1b.rope.factor, llama1b.rope.theta) == ("llama3", 32.0, 500000.0)
    assert (llama8b.rope.factor, llama8b.tie_word_embeddings, llama8b.num_kv_heads) == (8.0, False, 8)
    assert (qwen.family, qwen.head_dim, qwen.qk_norm, qwen.hidden_size // qwen.num_heads) == (
        "qwen3",
        128,
        True,
        64,
    )
    assert preset_spec("tiny-qwen2").qkv_bias and preset_spec("tiny-qwen3").head_dim == 32


@pytest.mark.parametrize("name", [n for n in PRESETS if n.startswith("tiny-")])
def test_tiny_presets_are_deterministic_and_seeded(name):
    a = load_model(name)
    b = load_model(name)
    other_seed = load_preset(name, dtype=torch.float32, device=CPU, num_layers=None, seed=1)
    assert a.weights_hash == b.weights_hash != other_seed.weights_hash
    assert a.source == f"preset:{name}" and a.tokenizer is None
    for (key, x), y, z in zip(
        a.weights.to_state_dict().items(),
        b.weights.to_state_dict().values(),
        other_seed.weights.to_state_dict().values(),
        strict=True,
    ):
        assert torch.equal(x, y) and not torch.equal(x, z), key
    assert a.weights.to_state_dict().keys() == tensor_shapes(a.spec).keys()


def test_weight_statistics():
    w = load_model("tiny-qwen2").weights.to_state_dict()
    matrix, norm, bias = (
        w["model.layers.0.mlp.up_proj.weight"],
        w["model.norm.weight"],
        w["model.layers.1.self_attn.q_proj.bias"],
    )
    assert matrix.std().item() == pytest.approx(0.02, rel=0.1) and abs(matrix.mean().item()) < 0.002
    assert norm.mean().item() == pytest.approx(1.0, abs=0.05) and not torch.equal(norm, torch.ones_like(norm))
    assert bias.abs().max().item() > 0  # Qwen2's biases are exercised, not zero


def test_truncated_model_has_the_full_models_first_layers():
    full = load_model("tiny-llama").weights
    head = load_model("tiny-llama", num_layers=2).weights
    assert len(head.layers) == 2
    for name, t in head.to_state_dict().items():
        assert torch.equal(t, full.to_state_dict()[name]), name


def test_generated_directly_in_the_target_dtype():
    loaded = load_model("smollm2-135m", dtype=torch.bfloat16, num_layers=1)
    assert all(t.dtype == torch.bfloat16 for t in loaded.weights.tensors())
    assert loaded.weights.lm_head is loaded.weights.embed  # tied
    assert loaded.weights_hash != load_model("smollm2-135m", num_layers=1).weights_hash  # other values
    assert isinstance(loaded.weights, Weights) and loaded.spec.num_layers == 1
