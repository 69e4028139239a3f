"""benchmarks/layer_chain.py: its chain of library kernels computes what the chain with cuBLAS
projections computes, whichever GEMV tiles the sweep tries."""

from __future__ import annotations

import random

import torch

import benchmark_scripts


def test_the_triton_chain_matches_the_cublas_chain(device, dtype, seed, check):
    lc = benchmark_scripts.load("layer_chain")
    chain = lc.Chain("tiny-llama", 40, dtype, torch.device(device), seed)
    want = chain.step(dict.fromkeys(lc.PROJECTIONS), pdl=False)
    assert want.shape == (1, chain.spec.vocab_size) and torch.isfinite(want).all()
    check(chain.step(lc.default_tiles(chain), pdl=True), want)
    row = {"BLOCK_N": 4, "BLOCK_K": 64, "SPLIT_K": 1, "num_warps": 4, "num_stages": 1}
    check(chain.step(dict.fromkeys(lc.PROJECTIONS, row), pdl=False), want)


def test_the_sweep_offers_only_tiles_that_fit_the_row():
    lc = benchmark_scripts.load("layer_chain")
    points = lc.candidates(2048, 5, random.Random(0))
    assert len(points) == 10
    assert all(p["BLOCK_K"] * p["SPLIT_K"] <= 2048 for p in points)
    assert sum(p["BLOCK_K"] * p["SPLIT_K"] == 2048 for p in points) >= 5  # the whole-row half
