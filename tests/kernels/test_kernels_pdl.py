"""Programmatic dependent launch: off where it cannot run, and on an sm90 GPU a chain of dependent
kernels captured in a CUDA graph gives what the same chain gives without it."""

import os

import pytest
import torch

from polyinfer.kernels import gemv, rms_norm, silu_mul
from polyinfer.kernels.pdl import enabled

SM90 = os.environ["TRITON_INTERPRET"] == "0" and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9


def test_pdl_is_off_for_tensors_that_cannot_use_it():
    assert not enabled(True, torch.zeros(1))
    assert not enabled(False, torch.zeros(1))


def chain(x, res, norm_w, gate_up_w, down_w, pdl):
    """One MLP block at batch 1: each kernel reads what the one before it wrote."""
    normed, summed = rms_norm.rms_norm(x, norm_w, 1e-6, res, pdl=pdl)
    gate_up = gemv.gemv(normed, gate_up_w, SPLIT_K=2, pdl=pdl)
    return gemv.gemv(silu_mul.silu_mul(gate_up, pdl=pdl), down_w, pdl=pdl), summed


@pytest.mark.skipif(not SM90, reason="needs an sm90+ GPU (TRITON_INTERPRET=0)")
def test_a_dependent_chain_in_a_cuda_graph_matches_the_plain_launches(device, dtype, seed, check):
    hidden, inter = 512, 1024
    x, res = (torch.randn(1, hidden, device=device, dtype=dtype) for _ in range(2))
    norm_w = torch.randn(hidden, device=device, dtype=dtype)
    gate_up_w = torch.randn(2 * inter, hidden, device=device, dtype=dtype) / hidden**0.5
    down_w = torch.randn(hidden, inter, device=device, dtype=dtype) / inter**0.5
    want = chain(x, res, norm_w, gate_up_w, down_w, pdl=False)
    chain(x, res, norm_w, gate_up_w, down_w, pdl=True)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = chain(x, res, norm_w, gate_up_w, down_w, pdl=True)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    check(got[0], want[0])
    assert torch.equal(got[1], want[1]), f"seed={seed}"
