"""The compiled baseline (benchmarks/compiled_baseline.py) decodes the tokens the reference engine decodes."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import benchmark_scripts
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.models.load import LoadedModel, load_model
from polyinfer.verify.run import run

PROMPT_LEN, STEPS = 12, 8


cb = benchmark_scripts.load("compiled_baseline")


def engine_greedy(loaded: LoadedModel, prompt: torch.Tensor, n: int) -> list[list[int]]:
    engine = Engine(loaded, EngineConfig(block_size=4, kv_cache_tokens=256))
    params = SamplingParams(max_tokens=n, ignore_eos=True)
    return [s.output_ids for s in engine.generate(prompt.tolist(), params)]


def baseline_greedy(loaded: LoadedModel, prompt: torch.Tensor, n: int,
                    decode: cb.DecodeFn | None = None) -> list[list[int]]:
    model = cb.StaticModel(loaded, prompt.shape[0], prompt.shape[1] + n)
    first = cb.prefill(model, prompt)
    input_pos = torch.tensor([prompt.shape[1]])
    rest = cb.decode_n_tokens(decode or cb.decode_one_token, model, first, input_pos, n - 1)
    return torch.cat([first, *rest], dim=1).tolist()


@torch.no_grad()
def baseline_logits(loaded: LoadedModel, prompt: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Logits [batch, n, vocab] for the prompt and then each of `tokens` ([batch, n]) fed in turn."""
    n = tokens.shape[1]
    model = cb.StaticModel(loaded, prompt.shape[0], prompt.shape[1] + n)
    out = [model(prompt, torch.arange(prompt.shape[1]))]
    out += [model(tokens[:, i : i + 1], torch.tensor([prompt.shape[1] + i])) for i in range(n - 1)]
    return torch.stack(out, dim=1)


def sharpened(loaded: LoadedModel, sliding_window: int | None = None) -> LoadedModel:
    """Random weights this small give near-uniform attention, under which RoPE and mask mistakes barely
    move a greedy token; larger query and key weights make attention peaked."""
    w = loaded.weights
    layers = tuple(dataclasses.replace(lw, q_proj=8 * lw.q_proj, k_proj=8 * lw.k_proj) for lw in w.layers)
    return dataclasses.replace(loaded, spec=dataclasses.replace(loaded.spec, sliding_window=sliding_window),
                               weights=dataclasses.replace(w, layers=layers))


def test_measure_decodes_the_reference_engines_greedy_tokens(tiny):
    result = cb.measure("tiny-llama", 3, PROMPT_LEN, STEPS, "cpu", torch.float32, compile=False)
    prompt = cb.random_prompt(tiny.spec.vocab_size, 3, PROMPT_LEN)
    assert result["tokens"] == engine_greedy(tiny, prompt, cb.WARMUP_STEPS + STEPS + 1)
    read = tiny.weights.tensors()[1:]  # all but the embedding, with the LM head even when tied
    assert result["weights_bytes"] == sum(t.numel() * t.element_size() for t in read)
    assert result["tok_s"] > 0


@pytest.mark.parametrize("sliding_window", [None, 5])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def test_tokens_and_logits_match_the_reference_engine(name, sliding_window):
    loaded = sharpened(load_model(name), sliding_window)
    prompt = cb.random_prompt(loaded.spec.vocab_size, 2, PROMPT_LEN, seed=1)
    engine = Engine(loaded, EngineConfig(block_size=4, kv_cache_tokens=256))
    reference = run(engine, engine.forward, prompt.tolist(), STEPS).traces
    tokens = baseline_greedy(loaded, prompt, STEPS)
    assert tokens == [list(t.tokens) for t in reference]
    torch.testing.assert_close(baseline_logits(loaded, prompt, torch.tensor(tokens)),
                               torch.stack([t.logits for t in reference]))


def test_rows_of_a_batch_decode_as_they_would_alone(tiny):
    prompt = cb.random_prompt(tiny.spec.vocab_size, 4, PROMPT_LEN, seed=2)
    together = baseline_greedy(sharpened(tiny), prompt, STEPS)
    assert together == [baseline_greedy(sharpened(tiny), row[None], STEPS)[0] for row in prompt]


def test_decode_step_compiles_as_one_graph(tiny):
    # aot_eager traces (fullgraph) and functionalises the cache writes as Inductor would, in a second
    # instead of the half minute Inductor's C++ build takes; reduce-overhead itself needs CUDA.
    torch._dynamo.reset()
    prompt = cb.random_prompt(tiny.spec.vocab_size, 2, PROMPT_LEN, seed=3)
    compiled = torch.compile(cb.decode_one_token, fullgraph=True, dynamic=False, backend="aot_eager")
    assert baseline_greedy(tiny, prompt, STEPS, compiled) == baseline_greedy(tiny, prompt, STEPS)
