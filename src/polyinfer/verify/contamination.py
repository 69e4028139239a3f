"""KV-cache contamination: reads of memory a sequence does not own, and writes outside its blocks.

Before the candidate runs, every free KV block is filled with NaN, so that any read of a block (or of
the unwritten tail of a block) the sequence does not own turns its logits non-finite; a correct kernel
that loads such memory must mask it, values included (0 * NaN is NaN). After the run, every poisoned
slot that no batch's slot_mapping assigned must still be NaN, or the candidate wrote where it had no
business. Each scenario compares the candidate under stress with the candidate (or the reference) in
a plain setting.

Blocks that are free but still hold a prefix-cache hash are left alone: they are valid cached prompt
KV that a later request may revive.
"""

from __future__ import annotations

import random

import torch

from polyinfer.engine.candidate import Forward
from polyinfer.engine.engine import Engine
from polyinfer.verify.comparison import compare, forced
from polyinfer.verify.context import Outcome, VerifyContext
from polyinfer.verify.equivalence import pool_tokens
from polyinfer.verify.run import Run, Trace, run


def poison(engine: Engine) -> list[int]:
    """Fill every free, uncached block with NaN in every layer; returns the blocks poisoned."""
    blocks = [b for b in engine.blocks.free_blocks() if engine.blocks.block_hash[b] is None]
    engine.kv.fill_blocks(blocks, float("nan"))
    return blocks


def stray_writes(engine: Engine, blocks: list[int], result: Run) -> int:
    """Slots of the poisoned `blocks` that no batch assigned but that no longer hold NaN."""
    if not blocks:
        return 0
    kv, bs = engine.kv, engine.kv.block_size
    slots = (torch.tensor(blocks)[:, None] * bs + torch.arange(bs)).flatten()
    slots = slots[~torch.isin(slots, result.written_slots)].to(kv.k.device)
    clean = torch.ones(len(slots), dtype=torch.bool, device=kv.k.device)
    for cache in (kv.k, kv.v):
        flat = cache.reshape(kv.num_layers, -1, cache.shape[-2] * cache.shape[-1])[:, slots]
        clean &= flat.isnan().all(dim=2).all(dim=0)
    return int((~clean).sum())


def _verdict(
    ctx: VerifyContext,
    runs: list[Trace],
    controls: list[Trace],
    stray: int,
    extra: dict[str, object],
    what: str,
) -> Outcome:
    c = compare(runs, controls)
    numbers = {**c.numbers(ctx.tol), "stray_writes": stray, **extra}
    if stray:
        return Outcome(False, numbers, f"{what}: the candidate wrote {stray} KV slots outside its blocks")
    return Outcome(c.within(ctx.tol), numbers, c.explain(ctx.tol, what))


def _poisoned_run(
    engine: Engine,
    forward: Forward,
    prompts: list[list[int]],
    tokens: int,
    teacher: list[tuple[int, ...] | None] | None = None,
) -> tuple[Run, int]:
    blocks = poison(engine)
    result = run(engine, forward, prompts, tokens, forced=teacher)
    return result, stray_writes(engine, blocks, result)


def needle(ctx: VerifyContext) -> Outcome:
    """A needle prompt alone, then at random positions in batches of random prompts: same output."""
    gen, rnd, tokens = ctx.generator(), random.Random(ctx.seed), ctx.config.gen_tokens
    others_per_batch = max(ctx.config.num_prompts - 1, 1)
    needle_prompt = ctx.prompts(gen, ctx.lengths(gen, 1))[0]
    worst = [needle_prompt] + [[0] * ctx.config.max_prompt_len] * others_per_batch
    lab = ctx.lab(kv_cache_tokens=pool_tokens(worst, tokens, ctx.block_size) + ctx.block_size)
    alone, stray = _poisoned_run(lab.engine, lab.candidate, [needle_prompt], tokens)
    found, positions = [], []
    for b in range(ctx.config.needle_batches):
        others = ctx.prompts(gen, ctx.lengths(gen, others_per_batch))
        # The first batch never puts the needle first: row 0 is where a kernel that mixes up rows still works.
        pos = rnd.randint(1, len(others)) if b == 0 else rnd.randint(0, len(others))
        teacher: list[tuple[int, ...] | None] = [None] * (len(others) + 1)
        teacher[pos] = alone.traces[0].tokens
        prompts = [*others[:pos], needle_prompt, *others[pos:]]
        batch, s = _poisoned_run(lab.engine, lab.candidate, prompts, tokens, teacher)
        found.append(batch.traces[pos])
        positions.append(pos)
        stray += s
    return _verdict(
        ctx,
        found,
        [alone.traces[0]] * len(found),
        stray,
        {"positions": str(positions)},
        "the needle in a batch differs from the needle alone",
    )


def block_reuse(ctx: VerifyContext) -> Outcome:
    """Sequences that receive blocks freed by finished ones (dirty with their KV) match a fresh engine."""
    gen, tokens, bs = ctx.generator(), ctx.config.gen_tokens, ctx.block_size
    first = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    second = ctx.prompts(gen, ctx.lengths(gen, ctx.config.num_prompts))
    # A pool just big enough for the larger wave, so the second wave can only get recycled blocks.
    pool = max(pool_tokens(first, tokens, bs), pool_tokens(second, tokens, bs))
    fresh_lab = ctx.lab(kv_cache_tokens=pool)
    fresh, stray = _poisoned_run(fresh_lab.engine, fresh_lab.candidate, second, tokens)
    lab = ctx.lab(kv_cache_tokens=pool)
    earlier = run(lab.engine, lab.candidate, first, tokens)
    later = run(lab.engine, lab.candidate, second, tokens, forced=forced(fresh))
    reused = len(set((earlier.written_slots // bs).tolist()) & set((later.written_slots // bs).tolist()))
    if reused == 0:
        return Outcome(False, {"reused_blocks": 0}, "no block was reused, so the check did not run")
    return _verdict(
        ctx,
        list(later.traces),
        list(fresh.traces),
        stray,
        {"reused_blocks": reused},
        "sequences on recycled blocks differ from the same sequences on fresh blocks",
    )


def shared_prefix(ctx: VerifyContext) -> Outcome:
    """With prefix caching, many requests that hit the same cached blocks in one step match each alone."""
    gen, rnd, tokens, bs = ctx.generator(), random.Random(ctx.seed), ctx.config.gen_tokens, ctx.block_size
    prefix = ctx.prompts(gen, [bs * rnd.randint(1, 3) + rnd.randint(1, max(bs - 1, 1))])[0]
    n = ctx.config.shared_prefix_requests
    suffixes = ctx.prompts(gen, ctx.lengths(gen, n + 1, longest=2 * bs))
    prompts = [prefix + s for s in suffixes[1:]]
    pool = pool_tokens([prefix + suffixes[0], *prompts], tokens, bs)
    alone_lab = ctx.lab(kv_cache_tokens=pool)
    alone = [run(alone_lab.engine, alone_lab.candidate, [p], tokens).traces[0] for p in prompts]
    lab = ctx.lab(kv_cache_tokens=pool, prefix_caching=True)
    run(lab.engine, lab.candidate, [prefix + suffixes[0]], tokens)  # publishes the prefix's blocks
    shared, stray = _poisoned_run(lab.engine, lab.candidate, prompts, tokens, [t.tokens for t in alone])
    hits = min(t.cached_tokens for t in shared.traces)
    if hits == 0:
        return Outcome(
            False, {"cached_tokens": 0}, "no request hit the prefix cache, so the check did not run"
        )
    return _verdict(
        ctx,
        list(shared.traces),
        alone,
        stray,
        {"cached_tokens": hits, "requests": n},
        "requests sharing cached prefix blocks differ from the same requests alone",
    )


def remainders(ctx: VerifyContext) -> Outcome:
    """Prompt lengths k*block_size + r for every r in [0, block_size): candidate equals reference."""
    gen, rnd, tokens, bs = ctx.generator(), random.Random(ctx.seed), ctx.config.gen_tokens, ctx.block_size
    k = rnd.randint(1, 2)
    prompts = ctx.prompts(gen, [k * bs + r for r in range(bs)])
    lab = ctx.lab(kv_cache_tokens=pool_tokens(prompts, tokens, bs))
    reference = run(lab.engine, lab.reference, prompts, tokens)
    candidate, stray = _poisoned_run(lab.engine, lab.candidate, prompts, tokens, forced(reference))
    return _verdict(
        ctx,
        list(candidate.traces),
        list(reference.traces),
        stray,
        {"lengths": f"{k}*{bs}+r"},
        "some prompt length modulo the block size gives logits unlike the reference's",
    )


def preemption(ctx: VerifyContext) -> Outcome:
    """A pool too small for the load, so sequences are preempted and recomputed (chunked, misaligned)."""
    gen, bs = ctx.generator(), ctx.block_size
    tokens = max(ctx.config.gen_tokens, bs + 1)  # every sequence grows by a block while it decodes
    lengths = torch.randint(bs, 3 * bs + 1, (2 * ctx.config.num_prompts,), generator=gen).tolist()
    prompts = ctx.prompts(gen, lengths)
    roomy = ctx.lab(kv_cache_tokens=pool_tokens(prompts, tokens, bs))
    control = run(roomy.engine, roomy.candidate, prompts, tokens)
    one = max(pool_tokens([p], tokens, bs) for p in prompts)
    lab = ctx.lab(kv_cache_tokens=one + bs, max_prefill_chunk=bs + 1)
    stressed, stray = _poisoned_run(lab.engine, lab.candidate, prompts, tokens, forced(control))
    preempted = sum(t.preemptions for t in stressed.traces)
    if preempted == 0:
        return Outcome(False, {"preemptions": 0}, "nothing was preempted, so the check did not run")
    return _verdict(
        ctx,
        list(stressed.traces),
        list(control.traces),
        stray,
        {"preemptions": preempted},
        "preempted and recomputed sequences differ from the same sequences unpreempted",
    )
