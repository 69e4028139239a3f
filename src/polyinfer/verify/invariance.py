"""Batch invariance (a sequence's output does not depend on what it is batched with, within tolerance)
and determinism (the same inputs twice give bit-identical outputs)."""

from __future__ import annotations

from polyinfer.verify.comparison import compare, forced
from polyinfer.verify.context import Outcome, VerifyContext
from polyinfer.verify.equivalence import pool_tokens
from polyinfer.verify.run import run


def batch(ctx: VerifyContext) -> Outcome:
    """Each prompt alone, then all of them arriving one per step, so prefills share batches with decodes."""
    gen, tokens = ctx.generator(), ctx.config.gen_tokens
    prompts = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    lab = ctx.lab(kv_cache_tokens=pool_tokens(prompts, tokens, ctx.block_size))
    alone = [run(lab.engine, lab.candidate, [p], tokens).traces[0] for p in prompts]
    batched = run(lab.engine, lab.candidate, prompts, tokens, forced=[t.tokens for t in alone], stagger=1)
    c = compare(list(batched.traces), alone)
    return Outcome(c.within(ctx.tol), c.numbers(ctx.tol), c.explain(ctx.tol, "batched differs from alone"))


def determinism(ctx: VerifyContext) -> Outcome:
    gen, tokens = ctx.generator(), ctx.config.gen_tokens
    prompts = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    lab = ctx.lab(kv_cache_tokens=pool_tokens(prompts, tokens, ctx.block_size))
    first = run(lab.engine, lab.candidate, prompts, tokens)
    second = run(lab.engine, lab.candidate, prompts, tokens, forced=forced(first))
    c = compare(second.traces, first.traces)
    numbers = {"bitwise": c.bitwise, "max_rel_err": c.rel_err, "rows": c.rows}
    return Outcome(
        c.bitwise,
        numbers,
        ""
        if c.bitwise
        else f"the same inputs twice gave different outputs (relative logits difference {c.rel_err:.3g})",
    )
