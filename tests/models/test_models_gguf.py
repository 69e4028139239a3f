"""GGUF loading against files written the way llama.cpp's converter writes them (gguf.GGUFWriter)."""

from __future__ import annotations

import json
import logging
import math

import gguf
import numpy as np
import pytest
import torch
from checkpoints import CORPUS, LLAMA3_ROPE, SPECIAL_TOKENS, make_bpe_tokenizer, make_hf_model

from polyinfer.errors import ModelError
from polyinfer.models.gguf_file import unpermute
from polyinfer.models.load import load_model

GLOBAL = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
LAYER = {
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf.py's LlamaModel.permute (HF rotate-half rows -> llama.cpp interleaved rows)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_rope_divisors(theta, head_dim, factor, low, high, original):
    """The rope_freqs tensor convert_hf_to_gguf.py writes for Llama 3 RoPE scaling."""
    out = []
    for i in range(0, head_dim, 2):
        wavelen = 2 * math.pi * theta ** (i / head_dim)
        if wavelen < original / high:
            out.append(1.0)
        elif wavelen > original / low:
            out.append(factor)
        else:
            smooth = (original / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def gguf_name(hf: str) -> str:
    if hf in GLOBAL:
        return GLOBAL[hf]
    _, _, layer, rest = hf.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{LAYER[module]}.{kind}"


def write_gguf(path, model, arch, *, dtype=np.float32, tokenizer=None, pre="gpt-2", add_bos=False):
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(c.num_hidden_layers)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(head_dim)
    w.add_key_length(head_dim)
    if tokenizer is not None:
        spec = json.loads(tokenizer.to_str())
        tokens = [t for t, _ in sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])]
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre(pre)
        w.add_token_list(tokens)
        w.add_token_types([3 if t in SPECIAL_TOKENS else 1 for t in tokens])
        w.add_token_merges([" ".join(m) for m in spec["model"]["merges"]])
        w.add_bos_token_id(SPECIAL_TOKENS.index("<|im_start|>"))
        w.add_eos_token_id(SPECIAL_TOKENS.index("<|im_end|>"))
        w.add_add_bos_token(add_bos)
        w.add_chat_template("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    for name, t in model.state_dict().items():
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        values = t.numpy()
        if arch == "llama" and "q_proj" in name:
            values = llama_cpp_permute(values, c.num_attention_heads)
        elif arch == "llama" and "k_proj" in name:
            values = llama_cpp_permute(values, c.num_key_value_heads)
        w.add_tensor(gguf_name(name), values.astype(np.float32 if "norm" in name else dtype))
    if c.rope_parameters["rope_type"] == "llama3":
        p = c.rope_parameters
        w.add_tensor(
            "rope_freqs.weight",
            llama3_rope_divisors(
                p["rope_theta"],
                head_dim,
                p["factor"],
                p["low_freq_factor"],
                p["high_freq_factor"],
                p["original_max_position_embeddings"],
            ),
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.mark.parametrize(("n_head", "head_dim", "cols"), [(4, 16, 8), (3, 64, 1), (1, 2, 5), (8, 128, 3)])
def test_unpermute_inverts_llama_cpp_permute(n_head, head_dim, cols):
    w = np.random.default_rng(0).standard_normal((n_head * head_dim, cols)).astype(np.float32)
    assert np.array_equal(unpermute(llama_cpp_permute(w, n_head), n_head), w)
    assert np.array_equal(unpermute(llama_cpp_permute(w[:, 0], n_head), n_head), w[:, 0])  # biases
    if head_dim > 2:  # the permutation is not the identity, so skipping it would be caught
        assert not np.array_equal(llama_cpp_permute(w, n_head), w)


@pytest.mark.parametrize(
    ("family", "overrides", "dtype"),
    [
        (
            "llama",
            {"tie_word_embeddings": False, "rope_scaling": LLAMA3_ROPE, "rope_theta": 500000.0},
            np.float32,
        ),
        ("llama", {}, np.float16),
        ("qwen2", {}, np.float32),
        ("qwen3", {}, np.float32),
    ],
)
def test_loader_recovers_the_hf_tensors(tmp_path, family, overrides, dtype):
    model = make_hf_model(family, **overrides)
    path = write_gguf(tmp_path / "m.gguf", model, family, dtype=dtype)
    loaded = load_model(str(path))
    hf = {
        k: v.to(torch.float16).float() if dtype == np.float16 and "norm" not in k else v
        for k, v in model.state_dict().items()
    }
    ours = loaded.weights.to_state_dict()
    assert set(ours) == set(hf) - ({"lm_head.weight"} if model.config.tie_word_embeddings else set())
    for name, t in ours.items():
        assert torch.equal(t, hf[name]), name
    spec, c = loaded.spec, model.config
    assert (spec.family, spec.num_layers, spec.tie_word_embeddings) == (family, 3, c.tie_word_embeddings)
    assert spec.head_dim == (getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads)
    assert spec.rope.type == c.rope_parameters["rope_type"]
    if spec.rope.type == "llama3":
        assert spec.rope.factor == pytest.approx(8.0) and spec.rope.original_max_position_embeddings == 64
    assert load_model(str(path), num_layers=1).spec.num_layers == 1


def test_tokenizer_from_metadata_matches_the_original(tmp_path):
    original = make_bpe_tokenizer()
    model = make_hf_model("llama", vocab_size=original.get_vocab_size())
    tok = load_model(
        str(write_gguf(tmp_path / "m.gguf", model, "llama", tokenizer=original, add_bos=True))
    ).tokenizer
    assert tok is not None
    for text in [*CORPUS, "Hello, world! <|im_start|>user\nhi<|im_end|>", "  x  \n\n 999 ünïcode"]:
        ids = tok.encode(text, add_special_tokens=False)
        assert ids == original.encode(text).ids, text
        assert tok.decode(ids, skip_special_tokens=False) == text
    assert tok.encode("hi")[0] == SPECIAL_TOKENS.index("<|im_start|>")  # add_bos_token
    assert tok.eos_token_ids == (2,) and tok.bos_token == "<|im_start|>"
    assert (
        tok.apply_chat_template([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]) == "ab"
    )


def test_unknown_pre_tokenizer_loads_without_tokenizer(tmp_path, caplog):
    model = make_hf_model("llama", vocab_size=make_bpe_tokenizer().get_vocab_size())
    path = write_gguf(tmp_path / "m.gguf", model, "llama", tokenizer=make_bpe_tokenizer(), pre="made-up")
    with caplog.at_level(logging.WARNING):
        assert load_model(str(path)).tokenizer is None
    assert "made-up" in caplog.text


def test_unsupported_gguf_architecture(tmp_path):
    path = write_gguf(tmp_path / "m.gguf", make_hf_model("llama"), "gpt2")
    with pytest.raises(ModelError, match="GGUF architecture 'gpt2'"):
        load_model(str(path))
