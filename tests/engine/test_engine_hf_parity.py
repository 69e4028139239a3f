"""The reference candidate against Hugging Face transformers on tiny random checkpoints of every family."""

from __future__ import annotations

import pytest
import torch
import transformers

from engine.hf_greedy import hf_greedy
from models.checkpoints import LLAMA3_ROPE
from polyinfer.engine.batch import Batch
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.models.load import load_model

VARIANTS = {
    "llama-llama3-rope-untied": ("llama", {"rope_scaling": LLAMA3_ROPE, "tie_word_embeddings": False}),
    "llama-tied": ("llama", {}),
    "mistral": ("mistral", {}),
    "mistral-sliding-window": ("mistral", {"sliding_window": 8}),
    "qwen2-qkv-bias": ("qwen2", {}),
    "qwen3-qk-norm-head-dim": ("qwen3", {}),
}


@pytest.fixture(params=list(VARIANTS), ids=list(VARIANTS))
def pair(request, hf_checkpoint):
    family, overrides = VARIANTS[request.param]
    path = hf_checkpoint(family, **overrides)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = Engine(load_model(str(path)), EngineConfig(block_size=4, kv_cache_tokens=512, max_prefill_chunk=7))
    return hf, engine


def prompt(n: int, vocab: int) -> list[int]:
    return torch.randint(3, vocab, (n,)).tolist()


def test_prefill_logits_match(pair):
    hf, engine = pair
    ids = prompt(19, engine.spec.vocab_size)
    blocks = list(range(5))
    batch = Batch.build([ids], [0], [blocks], 4, [True], 1)
    every_row = Batch(**{**{f: getattr(batch, f) for f in Batch.__dataclass_fields__},
                         "logits_indices": torch.arange(len(ids))})
    ours = engine.forward(every_row)
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=1e-4)


def test_greedy_generation_matches(pair):
    hf, engine = pair
    prompts = [prompt(n, engine.spec.vocab_size) for n in (3, 11, 17)]
    ours = engine.generate(prompts, SamplingParams(max_tokens=16, ignore_eos=True))
    for p, seq in zip(prompts, ours, strict=True):
        assert seq.output_ids == hf_greedy(hf, p, 16)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_logits_follow_transformers(hf_checkpoint, dtype):
    path = hf_checkpoint("llama", rope_scaling=LLAMA3_ROPE)
    torch_dtype = getattr(torch, dtype)
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype).eval()
    engine = Engine(load_model(str(path), dtype=torch_dtype), EngineConfig(dtype=dtype, block_size=4, kv_cache_tokens=128))
    ids = prompt(13, engine.spec.vocab_size)
    batch = Batch.build([ids], [0], [list(range(4))], 4, [True], 1)
    ours = engine.forward(batch)[0]
    with torch.no_grad():
        theirs = hf(torch.tensor([ids])).logits[0, -1].float()
    assert ours.dtype == torch.float32 and engine.kv.k.dtype == torch_dtype
    assert ((ours - theirs).norm() / theirs.norm()).item() < 2e-2
