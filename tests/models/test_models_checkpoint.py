"""HF checkpoint directories: every tensor transformers saved comes back, in any dtype, for any k layers."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import safetensors
import torch
from checkpoints import LLAMA3_ROPE, SPECIAL_TOKENS, make_bpe_tokenizer, make_hf_model

from polyinfer.errors import ModelError
from polyinfer.models.checkpoint import INDEX_FILE, save_checkpoint
from polyinfer.models.load import load_model

CASES = {
    "llama-tied": ("llama", {}),
    "llama-untied-llama3-rope": (
        "llama",
        {"tie_word_embeddings": False, "rope_scaling": LLAMA3_ROPE, "rope_theta": 500000.0},
    ),
    "mistral": ("mistral", {"tie_word_embeddings": False}),
    "qwen2": ("qwen2", {}),
    "qwen3": ("qwen3", {}),
}


def saved(tmp_path, family, max_shard_size=None, **overrides):
    model = make_hf_model(family, **overrides)
    directory = tmp_path / family
    model.save_pretrained(directory, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    return model, directory


def assert_same_tensors(loaded, hf_state, dtype=torch.float32):
    ours = loaded.weights.to_state_dict()
    expected = {
        k: v for k, v in hf_state.items() if not (k == "lm_head.weight" and loaded.spec.tie_word_embeddings)
    }
    assert ours.keys() == expected.keys()
    for name, t in ours.items():
        assert t.dtype == dtype, name
        assert torch.equal(t, expected[name].to(dtype)), name


@pytest.mark.parametrize("case", CASES)
def test_every_tensor_equals_the_hf_state_dict(tmp_path, case):
    family, overrides = CASES[case]
    model, directory = saved(tmp_path, family, **overrides)
    loaded = load_model(str(directory))
    assert_same_tensors(loaded, model.state_dict())
    spec, config = loaded.spec, model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert (spec.family, spec.num_layers, spec.head_dim) == (family, 3, head_dim)
    assert spec.tie_word_embeddings == config.tie_word_embeddings
    assert spec.rope.theta == config.rope_parameters["rope_theta"]
    assert spec.rope.type == config.rope_parameters["rope_type"]
    assert loaded.source == str(directory) and loaded.tokenizer is None


def test_sharded_checkpoint_in_bfloat16(tmp_path):
    model, directory = saved(tmp_path, "qwen2", max_shard_size="20KB")
    assert (directory / INDEX_FILE).exists() and len(list(directory.glob("*.safetensors"))) > 3
    loaded = load_model(str(directory), dtype=torch.bfloat16)
    assert_same_tensors(loaded, model.state_dict(), torch.bfloat16)


def test_num_layers_reads_only_the_first_layers(tmp_path):
    _, directory = saved(tmp_path, "llama", max_shard_size="20KB")
    weight_map = json.loads((directory / INDEX_FILE).read_text())["weight_map"]
    last_layer_files = {f for n, f in weight_map.items() if n.startswith("model.layers.2.")}
    other_files = {f for n, f in weight_map.items() if not n.startswith("model.layers.2.")}
    for file in last_layer_files - other_files:  # corrupt the shards only layer 2 lives in
        (directory / file).write_bytes(b"\0" * 100)
    loaded = load_model(str(directory), num_layers=2)
    assert loaded.spec.num_layers == len(loaded.weights.layers) == 2
    with pytest.raises(ModelError, match=r"not a valid safetensors file"):
        load_model(str(directory))


def test_tokenizer_files_beside_the_weights(tmp_path):
    _, directory = saved(tmp_path, "llama")
    make_bpe_tokenizer().save(str(directory / "tokenizer.json"))
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    )
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "<|im_end|>", "special": True}, "bos_token": "<|im_start|>"})
    )
    (directory / "chat_template.jinja").write_text(template)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    tok = load_model(str(directory)).tokenizer
    assert tok is not None
    assert tok.eos_token_ids == (2, 0)  # eos_token, then generation_config's, then config.json's (2)
    text = tok.apply_chat_template([{"role": "user", "content": "Hello, world!"}])
    assert text == "<|im_start|>user\nHello, world!<|im_end|>\n"
    ids = tok.encode(text, add_special_tokens=False)
    assert ids[0] == SPECIAL_TOKENS.index("<|im_start|>") and tok.decode(ids) == "user\nHello, world!\n"


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_saved_presets_load_back_here_and_in_transformers(tmp_path, preset):
    import transformers

    original = load_model(preset)
    path = save_checkpoint(original, tmp_path / "ckpt", max_shard_bytes=40_000)
    assert (path / INDEX_FILE).exists()
    again = load_model(str(path))
    assert again.spec == dataclasses.replace(original.spec, name="ckpt")
    for name, t in original.weights.to_state_dict().items():
        assert torch.equal(again.weights.to_state_dict()[name], t), name
    hf = transformers.AutoModelForCausalLM.from_pretrained(path)
    assert_same_tensors(again, hf.state_dict())
    assert json.loads((path / "polyinfer.json").read_text())["source"] == f"preset:{preset}"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary directory left


def test_save_refuses_an_existing_directory_and_keeps_dtype(tmp_path):
    loaded = load_model("tiny-qwen3", dtype=torch.bfloat16)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    with pytest.raises(ModelError, match="already exists"):
        save_checkpoint(loaded, tmp_path / "taken")
    path = save_checkpoint(loaded, tmp_path / "new")
    with safetensors.safe_open(str(path / "model.safetensors"), framework="pt") as f:
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16


def test_weights_hash_identifies_the_files_not_the_load(tmp_path):
    _, directory = saved(tmp_path, "llama")
    full = load_model(str(directory))
    assert load_model(str(directory), dtype=torch.bfloat16, num_layers=1).weights_hash == full.weights_hash
    copy = tmp_path / "copy"
    shutil.copytree(directory, copy)
    assert load_model(str(copy)).weights_hash == full.weights_hash
    make_hf_model("llama", seed=1).save_pretrained(tmp_path / "other")
    assert load_model(str(tmp_path / "other")).weights_hash != full.weights_hash
