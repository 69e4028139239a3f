"""Equivalence to the reference forward: logits error, greedy agreement, perplexity, and exact mode.

Each check runs the reference, then the candidate teacher-forced onto the reference's tokens, on the
same fresh random prompts in the same engine configuration, so that batches are composed identically
and differences come from the forward pass alone.
"""

from __future__ import annotations

import math

import torch

from polyinfer.verify.comparison import compare, forced
from polyinfer.verify.context import Outcome, VerifyContext
from polyinfer.verify.run import Run, Trace, run

# Plain English prose, so that perplexity under a real model is meaningful (a few dozen on the full
# SmolLM2); the number itself does not matter, only that candidate and reference agree on it.
PARAGRAPH = (
    "The river runs quietly through the old town, past the market square and under three stone bridges. "
    "In the morning the bakers open their shops, and the smell of fresh bread drifts along the water. "
    "Children walk to school in small groups, talking about the weekend, while their parents hurry to the "
    "station to catch the early train into the city. By noon the square is full of people eating lunch "
    "in the sun, and the church bell rings twelve times."
)


def _pair(ctx: VerifyContext, prompts: list[list[int]], tokens: int) -> tuple[Run, Run]:
    lab = ctx.lab(kv_cache_tokens=pool_tokens(prompts, tokens, ctx.block_size))
    reference = run(lab.engine, lab.reference, prompts, tokens)
    return run(lab.engine, lab.candidate, prompts, tokens, forced=forced(reference)), reference


def pool_tokens(prompts: list[list[int]], tokens: int, block_size: int) -> int:
    """KV pool capacity that holds every prompt's whole run at once, so nothing is preempted."""
    return block_size * sum(-(-(len(p) + tokens) // block_size) for p in prompts)


def logits(ctx: VerifyContext) -> Outcome:
    gen = ctx.generator()
    prompts = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    candidate, reference = _pair(ctx, prompts, ctx.config.gen_tokens)
    c = compare(candidate.traces, reference.traces)
    ok = c.rel_err <= ctx.tol.logits_rel
    why = f"relative logits error {c.rel_err:.3g} against the reference exceeds {ctx.tol.logits_rel:g}"
    return Outcome(ok, c.numbers(ctx.tol), "" if ok else why)


def greedy(ctx: VerifyContext) -> Outcome:
    gen = ctx.generator()
    prompts = ctx.prompts(gen, ctx.lengths(gen, 2))
    candidate, reference = _pair(ctx, prompts, ctx.config.long_tokens)
    c = compare(candidate.traces, reference.traces)
    ok = c.agreement >= ctx.tol.agreement
    why = (
        f"greedy tokens agree with the reference at {c.agreement:.3f} of the positions of a "
        f"{ctx.config.long_tokens}-token generation; at least {ctx.tol.agreement:g} is required"
    )
    return Outcome(ok, c.numbers(ctx.tol), "" if ok else why)


def exact(ctx: VerifyContext) -> Outcome:
    gen = ctx.generator()
    prompts = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    candidate, reference = _pair(ctx, prompts, ctx.config.gen_tokens)
    c = compare(candidate.traces, reference.traces)
    numbers = {
        "bitwise": c.bitwise,
        "max_abs_diff": _max_abs_diff(candidate.traces, reference.traces),
        "rows": c.rows,
    }
    return Outcome(c.bitwise, numbers, "" if c.bitwise else "logits are not bit-identical to the reference")


def perplexity(ctx: VerifyContext) -> Outcome:
    tokenizer = ctx.model.tokenizer
    if tokenizer is None:
        return Outcome(True, {}, "the model has no tokenizer (random-weight preset)", skipped=True)
    ids = tokenizer.encode(PARAGRAPH)
    prompt, text = ids[:1], tuple(ids[1:])
    lab = ctx.lab(kv_cache_tokens=pool_tokens([ids], 0, ctx.block_size))
    ppl_ref = _perplexity(run(lab.engine, lab.reference, [prompt], len(text), forced=[text]).traces[0])
    ppl = _perplexity(run(lab.engine, lab.candidate, [prompt], len(text), forced=[text]).traces[0])
    delta = abs(ppl - ppl_ref) / ppl_ref if math.isfinite(ppl) else math.inf
    numbers = {
        "perplexity": ppl,
        "reference": ppl_ref,
        "rel_delta": delta,
        "tolerance": ctx.tol.perplexity_rel,
        "tokens": len(text),
    }
    ok = delta <= ctx.tol.perplexity_rel
    why = f"perplexity {ppl:.4g} differs from the reference's {ppl_ref:.4g} by {delta:.3g} (relative)"
    return Outcome(ok, numbers, "" if ok else why)


def _perplexity(trace: Trace) -> float:
    targets = torch.tensor(trace.tokens)
    nll = -torch.log_softmax(trace.logits.double(), dim=-1)[torch.arange(len(targets)), targets]
    return float(torch.exp(nll.mean()))


def _max_abs_diff(runs: tuple[Trace, ...], controls: tuple[Trace, ...]) -> float:
    return max(
        (float((a.logits - b.logits).abs().max()) for a, b in zip(runs, controls, strict=True)), default=0.0
    )
