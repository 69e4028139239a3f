"""Sampling: greedy, temperature, top-k and top-p, and seeded reproducibility."""

from __future__ import annotations

import pytest
import torch

from polyinfer.engine.sampler import Sampler, argmax
from polyinfer.engine.sequence import SamplingParams
from polyinfer.errors import RequestError

CPU = torch.device("cpu")


def draw(params: SamplingParams, logits: torch.Tensor, n: int, seq_id: int = 0) -> list[int]:
    sampler = Sampler(CPU)
    return [sampler.sample(logits[None], [params], [seq_id])[0] for _ in range(n)]


def test_greedy_is_argmax():
    logits = torch.randn(5, 50)
    assert Sampler(CPU).sample(logits, [SamplingParams()] * 5, list(range(5))) == logits.argmax(-1).tolist()


@pytest.mark.parametrize("vocab", [128256, 49152, 32000, 50257])
@pytest.mark.parametrize("rows", [1, 7])
def test_two_stage_argmax_matches_argmax_including_ties(vocab, rows):
    gen = torch.Generator().manual_seed(vocab + rows)
    logits = torch.randn(rows, vocab, generator=gen)
    assert torch.equal(argmax(logits), logits.argmax(-1))
    top = logits.max() + 1  # the same maximum in two slices and twice in one: the lowest index wins
    for col in (vocab - 1, vocab // 2 + 1, vocab // 2, 9):
        logits[:, col] = top
    assert torch.equal(argmax(logits), logits.argmax(-1))
    assert argmax(logits).tolist() == [9] * rows


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    logits = torch.randn(200)
    p = SamplingParams(temperature=1.0, seed=5)
    assert draw(p, logits, 30) == draw(p, logits, 30)
    assert draw(p, logits, 30) != draw(SamplingParams(temperature=1.0, seed=6), logits, 30)


def test_top_k_one_and_tiny_top_p_are_greedy():
    logits = torch.randn(100)
    best = int(logits.argmax())
    assert set(draw(SamplingParams(temperature=2.0, top_k=1, seed=0), logits, 20)) == {best}
    assert set(draw(SamplingParams(temperature=2.0, top_p=1e-6, seed=0), logits, 20)) == {best}


def test_top_k_and_top_p_restrict_support():
    logits = torch.tensor([4.0, 3.0, 2.0, 1.0, 0.0, -1.0])
    assert set(draw(SamplingParams(temperature=1.0, top_k=2, seed=1), logits, 200)) == {0, 1}
    probs = torch.softmax(logits, 0)  # 0.64, 0.24, 0.09...: top_p 0.8 keeps the first two
    assert probs[:1].sum() < 0.8 <= probs[:2].sum()
    assert set(draw(SamplingParams(temperature=1.0, top_p=0.8, seed=1), logits, 200)) == {0, 1}


def test_temperature_follows_the_softmax():
    logits = torch.tensor([1.0, 0.0, -1.0])
    counts = torch.bincount(torch.tensor(draw(SamplingParams(temperature=0.5, seed=3), logits, 3000)), minlength=3)
    expected = torch.softmax(logits / 0.5, 0) * 3000
    assert torch.all((counts - expected).abs() < 0.1 * 3000)


@pytest.mark.parametrize("kwargs", [{"temperature": -1}, {"top_p": 0}, {"top_k": -2}, {"max_tokens": 0}])
def test_invalid_params_are_refused(kwargs):
    with pytest.raises(RequestError):
        SamplingParams(**kwargs)


def test_a_mixed_batch_is_sampled_at_once_each_row_under_its_own_params():
    vocab = 64
    logits = torch.randn(5, vocab, generator=torch.Generator().manual_seed(2))
    params = [SamplingParams(), SamplingParams(temperature=1.0, top_k=3, seed=1), SamplingParams(),
              SamplingParams(temperature=0.7, top_p=0.5), SamplingParams(temperature=1.3, seed=9)]
    sampler = Sampler(CPU)
    top3 = set(logits[1].topk(3).indices.tolist())
    probs, order = torch.softmax(logits[3] / 0.7, 0).sort(descending=True)
    nucleus = set(order[probs.cumsum(0) - probs < 0.5].tolist())  # the smallest prefix reaching mass 0.5
    assert 1 <= len(nucleus) < vocab // 2
    for _ in range(50):
        out = sampler.sample(logits, params, list(range(5)))
        assert out[0] == int(logits[0].argmax()) and out[2] == int(logits[2].argmax())  # greedy rows
        assert out[1] in top3 and out[3] in nucleus


def test_a_seeded_request_draws_the_same_tokens_alone_or_in_any_batch():
    vocab = 500
    gen = torch.Generator().manual_seed(4)
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=42)
    alone, batched = Sampler(CPU), Sampler(CPU)
    for _ in range(20):
        logits = torch.randn(3, vocab, generator=gen)
        want = alone.sample(logits[1:2], [seeded], [7])
        got = batched.sample(logits, [SamplingParams(temperature=1.0), seeded, SamplingParams()], [3, 7, 5])
        assert got[1:2] == want
