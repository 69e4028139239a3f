"""Bad model references: each is a ModelError that says what is wrong; the CLI exits 2 without a traceback."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from checkpoints import make_hf_model

from polyinfer.errors import ModelError
from polyinfer.models.checkpoint import INDEX_FILE
from polyinfer.models.load import load_model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ckpt") / "llama"
    make_hf_model("llama").save_pretrained(directory)
    return directory


def copy_of(checkpoint, tmp_path, files=("config.json", "model.safetensors")):
    directory = tmp_path / "copy"
    directory.mkdir()
    for name in files:
        (directory / name).write_bytes((checkpoint / name).read_bytes())
    return directory


def edit_config(directory, **changes):
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config | changes))


def test_missing_directory(tmp_path):
    with pytest.raises(ModelError, match="no checkpoint directory at"):
        load_model(str(tmp_path / "absent"))


def test_directory_without_config(checkpoint, tmp_path):
    with pytest.raises(ModelError, match=r"has no config\.json"):
        load_model(str(copy_of(checkpoint, tmp_path, files=["model.safetensors"])))


def test_directory_without_safetensors(checkpoint, tmp_path):
    with pytest.raises(ModelError, match=r"no model\.safetensors"):
        load_model(str(copy_of(checkpoint, tmp_path, files=["config.json"])))


def test_truncated_safetensors_names_the_file(checkpoint, tmp_path):
    directory = copy_of(checkpoint, tmp_path)
    data = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelError, match=r"model\.safetensors is not a valid safetensors file"):
        load_model(str(directory))


def test_index_naming_a_missing_shard(checkpoint, tmp_path):
    directory = copy_of(checkpoint, tmp_path)
    index = {"weight_map": {"model.norm.weight": "model-00002-of-00002.safetensors"}}
    (directory / INDEX_FILE).write_text(json.dumps(index))
    with pytest.raises(ModelError, match=r"model-00002-of-00002\.safetensors"):
        load_model(str(directory))


def test_config_and_weights_disagree(checkpoint, tmp_path):
    directory = copy_of(checkpoint, tmp_path)
    edit_config(directory, intermediate_size=128)
    with pytest.raises(
        ModelError, match=r"mlp.gate_proj.weight' has shape \[96, 64\] but the config implies"
    ):
        load_model(str(directory))


def test_untied_config_without_lm_head(checkpoint, tmp_path):
    directory = copy_of(checkpoint, tmp_path)
    edit_config(directory, tie_word_embeddings=False)
    with pytest.raises(ModelError, match=r"no 'lm_head\.weight'"):
        load_model(str(directory))


def test_unsupported_architecture(checkpoint, tmp_path):
    directory = copy_of(checkpoint, tmp_path)
    edit_config(directory, architectures=["GPT2LMHeadModel"], model_type="gpt2")
    with pytest.raises(ModelError, match="'GPT2LMHeadModel' is not supported"):
        load_model(str(directory))


def test_unknown_preset_lists_presets_and_the_path_forms():
    with pytest.raises(ModelError) as e:
        load_model("llama-9-7b")
    assert all(s in str(e.value) for s in ("tiny-llama", "llama-3.1-8b", "directory", ".gguf"))


@pytest.mark.parametrize("k", [0, 4])
def test_layer_count_out_of_range(k):
    with pytest.raises(ModelError, match=f"first {k} layers of a 3-layer model"):
        load_model("tiny-llama", num_layers=k)


def test_gguf_that_is_missing_or_not_gguf(tmp_path):
    with pytest.raises(ModelError, match="no GGUF file at"):
        load_model(str(tmp_path / "absent.gguf"))
    (tmp_path / "fake.gguf").write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(ModelError, match="is not a readable GGUF file"):
        load_model(str(tmp_path / "fake.gguf"))


def test_cli_reports_one_line_and_exits_2(tmp_path):
    for ref in ("no-such-preset", str(tmp_path / "absent")):
        run = subprocess.run(
            [sys.executable, "-m", "polyinfer.cli", "models", ref, "--layers", "1"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2, run.stderr
        assert "error:" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("flag", ["attention_bias", "mlp_bias"])
def test_llama_biases_are_refused_not_dropped(flag):
    from polyinfer.models.spec import ModelSpec

    config = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16, "intermediate_size": 32,
              "num_hidden_layers": 1, "num_attention_heads": 2, flag: True}
    with pytest.raises(ModelError, match=flag):
        ModelSpec.from_hf_config(config)
