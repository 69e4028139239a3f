"""Tiny random Hugging Face checkpoints, written by transformers itself, for any test that loads a model.

    path = make_hf_checkpoint(tmp_path, "qwen3")                  # a directory load_model accepts
    path = make_hf_checkpoint(tmp_path, "llama", rope_scaling=LLAMA3_ROPE, tie_word_embeddings=False)
    path = make_hf_checkpoint(tmp_path, "llama", max_shard_size="20KB")   # sharded, with an index

Every parameter is random (norm weights around 1, biases non-zero), unlike transformers' own init, so
that a loader mixing up two tensors of one shape, or dropping a bias, cannot go unnoticed.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import tokenizers
import torch
import transformers

FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 24}),  # != hidden / heads = 16
}
BASE = {
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 512,
    "tie_word_embeddings": True,
    "rms_norm_eps": 1e-6,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def make_hf_model(family: str, seed: int = 0, **overrides: Any) -> transformers.PreTrainedModel:
    config_cls, model_cls, extra = FAMILIES[family]
    config = getattr(transformers, config_cls)(**{**BASE, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(
                torch.randn_like(p) * (0.1 if "norm" in name else 0.05) + (1.0 if "norm" in name else 0.0)
            )
    return model


def make_hf_checkpoint(
    tmp_path: Path, family: str, *, max_shard_size: str | None = None, seed: int = 0, **overrides: Any
) -> Path:
    """Save a tiny random `family` model (llama, mistral, qwen2, qwen3) to a new directory under tmp_path.

    `overrides` are config fields (e.g. tie_word_embeddings=False, rope_scaling=LLAMA3_ROPE).
    """
    directory = Path(tempfile.mkdtemp(prefix=f"{family}-", dir=tmp_path))
    model = make_hf_model(family, seed, **overrides)
    model.save_pretrained(directory, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    return directory


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "Hello, world! How are you today?",
    "héllo wörld 12345 tokens and merges, it's   spaced\n\nlines",
]


def make_bpe_tokenizer() -> tokenizers.Tokenizer:
    """A small byte-level BPE tokenizer (GPT-2 pre-tokenizer) trained on a fixed corpus, with ChatML
    special tokens at ids 0-2."""
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS * 20, trainer)
    return tok
