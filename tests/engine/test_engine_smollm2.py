"""Greedy generation of the real SmolLM2-135M-Instruct matches transformers token for token."""

from __future__ import annotations

import torch
import transformers

from engine.hf_greedy import hf_greedy
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.models.default import default_checkpoint
from polyinfer.models.load import load_model


def test_smollm2_greedy_matches_transformers():
    path = default_checkpoint()
    model = load_model(None)
    tok = model.tokenizer
    assert tok is not None
    text = tok.apply_chat_template([{"role": "user", "content": "Write a haiku about GPUs."}])
    ids = tok.encode(text, add_special_tokens=False)
    engine = Engine(model, EngineConfig(kv_cache_tokens=256))
    ours = engine.generate([ids], SamplingParams(max_tokens=40, ignore_eos=True))[0].output_ids
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    assert ours == hf_greedy(hf, ids, 40)
    assert len(tok.decode(ours).split()) > 3
