"""The built-in tunable candidate and the documented example agree with the reference for every knob."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch

from polyinfer.bench.steps import step_batch
from polyinfer.engine.candidate import Candidate, declared_knobs
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams
from polyinfer.errors import CandidateError
from polyinfer.models.load import load_model

GREEDY = SamplingParams(max_tokens=8, ignore_eos=True)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fused_mlp_candidate.py"


@pytest.fixture(scope="module", params=["tiny-llama", "tiny-qwen2", "tiny-qwen3"])
def setup(request):
    model = load_model(request.param)
    engine = Engine(model, EngineConfig(block_size=4, kv_cache_tokens=512, max_prefill_chunk=6))
    gen = torch.Generator().manual_seed(7)
    prompts = [torch.randint(3, model.spec.vocab_size, (n,), generator=gen).tolist() for n in (1, 4, 9, 14)]
    ref = [s.output_ids for s in engine.generate(prompts, GREEDY)]
    return engine, prompts, ref


TORCH_COMBOS = [dict(zip(("fuse_qkv", "fuse_gate_up", "rope", "decode_attention"), values, strict=True))
                for values in itertools.product([False, True], [False, True], ["compute", "table"], ["loop", "batched"])]


@pytest.mark.parametrize("knobs", TORCH_COMBOS, ids=lambda k: "-".join(str(v) for v in k.values()))
def test_torch_knobs_match_the_reference(setup, knobs):
    engine, prompts, ref = setup
    engine.swap(Candidate.builtin("fast", knobs))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == ref


# Small GEMV tiles, so that the tiny models' projections take the split-K path too.
TRITON_ALL = {"fuse_qkv": True, "fuse_gate_up": True, "decode_attention": "triton", "prefill_attention": "triton",
              "norm": "triton", "rope_kv": "triton", "activation": "triton", "linear": "triton",
              "gemv_block_n": 16, "gemv_block_k": 16}


def test_every_triton_kernel_together_matches_the_reference(setup):
    engine, prompts, ref = setup
    engine.swap(Candidate.builtin("fast", TRITON_ALL))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == ref


def test_every_triton_kernel_launched_with_pdl_matches_the_reference(setup):
    # On a CPU the kernels run interpreted and PDL stays off (its PTX cannot run there), so this holds
    # the plumbing; on an sm90 GPU the same test runs the dependent launches.
    engine, prompts, ref = setup
    engine.swap(Candidate.builtin("fast", {**TRITON_ALL, "pdl": True}))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == ref


def test_compiled_regions_match_the_reference(tiny):
    engine = Engine(tiny, EngineConfig(block_size=4, kv_cache_tokens=512, max_prefill_chunk=6))
    prompts = [[5, 9, 3, 17], [8, 2, 11, 4, 6, 30, 1]]
    ref = [s.output_ids for s in engine.generate(prompts, GREEDY)]
    engine.swap(Candidate.builtin("fast", {"compile": "regions", "fuse_gate_up": True}))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == ref


def test_split_k_fills_the_gpu_but_never_splits_below_a_tile():
    from polyinfer.candidates.blocks.ops import Linear

    linear = Linear("torch", block_n=32, block_k=256, device=torch.device("cpu"))  # 8 programs wanted
    assert linear.split_k(n=32, k=4096) == 8  # one tile of rows: split K eight ways
    assert linear.split_k(n=128, k=4096) == 2  # four tiles: twice
    assert linear.split_k(n=32, k=512) == 2  # K holds two 256-wide steps only
    assert linear.split_k(n=4096, k=4096) == 1


def test_the_documented_example_matches_the_reference(setup):
    engine, prompts, ref = setup
    engine.swap(Candidate.from_file(EXAMPLE))
    assert [s.output_ids for s in engine.generate(prompts, GREEDY)] == ref


def test_knob_space_is_declared_and_unknown_knobs_are_refused(setup):
    engine, _, _ = setup
    space = declared_knobs(Candidate.builtin("fast"))
    assert space["decode_attention"][:2] == ["loop", "batched"]
    assert ("triton" in space["decode_attention"]) == torch.cuda.is_available()
    with pytest.raises(CandidateError, match="unknown knobs"):
        engine.swap(Candidate.builtin("fast", {"fuse_everything": True}))


def test_graphed_decode_twin_pads_buckets_and_matches_the_reference():
    """On a CPU the CUDA-graph path runs its padded static buffers eagerly: the twin of the GPU path."""
    engine = Engine(load_model("tiny-qwen3"), EngineConfig(block_size=4, kv_cache_tokens=512))
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(3, engine.spec.vocab_size, (n,), generator=gen).tolist() for n in (2, 7, 5)]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in (3, 9, 6)]  # batches of 3, 2 and 1
    ref = [s.output_ids for s in engine.generate(prompts, params)]
    engine.swap(Candidate.builtin("fast", {"decode_attention": "triton", "cuda_graphs": True}))
    assert [s.output_ids for s in engine.generate(prompts, params)] == ref
    graphs = engine.forward.graphs
    assert sorted(graphs.captured) == [1, 2, 4]  # 3 sequences ran padded to the bucket of 4
    engine.swap(Candidate.builtin("fast", {"decode_attention": "triton", "cuda_graphs": True,
                                           "graph_buckets": "dense"}))
    assert [s.output_ids for s in engine.generate(prompts, params)] == ref
    assert sorted(engine.forward.graphs.captured) == [1, 2, 3]  # a bucket of 3: no padding
    with pytest.raises(CandidateError, match="cuda_graphs needs"):
        engine.swap(Candidate.builtin("fast", {"cuda_graphs": True}))
    with pytest.raises(CandidateError, match="activation=triton needs fuse_gate_up"):
        engine.swap(Candidate.builtin("fast", {"activation": "triton"}))


@pytest.mark.parametrize("attention", ["loop", "batched"])
def test_piecewise_twin_of_mixed_steps_pads_token_buckets_and_matches_the_reference(attention):
    """Steps with prefill chunks run piecewise on padded buffers (eagerly on a CPU, the GPU path's twin):
    chunked prefill beside decodes, prefix caching and preemption-free continuous batching."""
    engine = Engine(load_model("tiny-llama"), EngineConfig(block_size=4, kv_cache_tokens=1024, max_prefill_chunk=8,
                                                           prefix_caching=True))
    gen = torch.Generator().manual_seed(5)
    shared = torch.randint(3, engine.spec.vocab_size, (9,), generator=gen).tolist()
    prompts = [shared + torch.randint(3, engine.spec.vocab_size, (n,), generator=gen).tolist() for n in (3, 14, 1)]
    prompts.append(torch.randint(3, engine.spec.vocab_size, (21,), generator=gen).tolist())
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in (5, 3, 9, 4)]
    ref = [s.output_ids for s in engine.generate(prompts, params)]
    engine.swap(Candidate.builtin("fast", {"decode_attention": attention, "mixed_graphs": True}))
    assert [s.output_ids for s in engine.generate(prompts, params)] == ref
    mixed = engine.forward.mixed
    assert mixed is not None and mixed.captured and set(mixed.captured) <= {16, 32}  # 8-token chunks, padded
    # a decode-only step too (this candidate has no decode graphs), with the reference's logits
    mixed.captured.clear()
    batch, _ = step_batch(engine, 3, 12, 1)
    reference, _ = engine.prepare(Candidate.reference())
    torch.testing.assert_close(engine.forward(batch), reference(batch), rtol=1e-4, atol=1e-4)
    assert list(mixed.captured) == [16]
