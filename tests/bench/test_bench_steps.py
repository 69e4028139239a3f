"""Step-shape helpers: the logits screen that benchmarks run before timing a candidate."""

from __future__ import annotations

from polyinfer.bench.steps import check_logits
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.engine import Engine

# The reference with every logit shifted by one: greedy tokens unchanged, the error plain to see.
SHIFTED = Candidate(
    Candidate.reference().source.replace(
        "def build(ctx: SwapContext) -> ReferenceForward:\n    return ReferenceForward(ctx)",
        "class Shifted(ReferenceForward):\n"
        "    def __call__(self, batch):\n"
        "        return super().__call__(batch) + 1.0\n\n\n"
        "def build(ctx: SwapContext) -> ReferenceForward:\n    return Shifted(ctx)",
    ),
    {},
    "shifted",
)


def test_an_equal_candidate_scores_zero_error_and_full_agreement(engine: Engine) -> None:
    free = engine.blocks.num_free
    check = check_logits(engine, Candidate.builtin("fast", {"fuse_qkv": True}), 3, 20)
    assert check.kind == "decode" and check.batch_size == 3
    assert check.rel_err < 1e-5 and check.argmax_agreement == 1.0
    assert engine.blocks.num_free == free  # the batch's blocks went back to the pool
    prefill = check_logits(engine, Candidate.builtin("fast"), 2, 20, query_len=8)
    assert prefill.kind == "prefill" and prefill.rel_err < 1e-5


def test_a_different_candidate_shows_its_error(engine: Engine) -> None:
    assert "class Shifted" in SHIFTED.source
    check = check_logits(engine, SHIFTED, 2, 16)
    assert check.max_abs_err > 0.99 and check.rel_err > 0.01
    assert check.argmax_agreement == 1.0
