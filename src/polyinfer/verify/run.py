"""Greedy runs that keep every sequence's logits: what the checks compare.

`Engine.step` samples and drops the logits; verification needs them per sequence, so `run` drives the
engine's own scheduler and batch building itself (schedule -> forward -> argmax -> update), with the
forward under test passed in explicitly. That lets a check run the candidate and the reference through
the same engine, one after the other.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from polyinfer.engine.candidate import Forward
from polyinfer.engine.engine import Engine
from polyinfer.engine.sequence import SamplingParams, Sequence


@dataclass(frozen=True, slots=True)
class Trace:
    """One sequence's run: the tokens it produced and the logits row each was chosen from."""

    prompt: tuple[int, ...]
    tokens: tuple[int, ...]
    logits: torch.Tensor  # [len(tokens), vocab] float32 on the CPU
    preemptions: int
    cached_tokens: int  # prompt tokens found in the prefix cache at (the last) admission


@dataclass(frozen=True, slots=True)
class Run:
    traces: tuple[Trace, ...]  # in prompt order
    written_slots: torch.Tensor  # every KV slot a batch's slot_mapping assigned, sorted, unique


def run(
    engine: Engine,
    forward: Forward,
    prompts: list[list[int]],
    max_tokens: int,
    *,
    forced: list[tuple[int, ...] | None] | None = None,
    stagger: int = 0,
) -> Run:
    """Run `prompts` to `max_tokens` each through `engine` with `forward`, greedy.

    With `forced`, sequence i is fed the tokens `forced[i]` instead of its own argmax (teacher forcing;
    None leaves it free). Checks force the run under test onto the control run's tokens, so that every
    position of the two runs had the same inputs and can be compared, however early they disagree.
    With `stagger=k`, prompt j joins at step j*k, so prefills and decodes share batches.
    """
    params = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    pending = list(enumerate(prompts))
    seqs: dict[int, Sequence] = {}  # prompt index -> its sequence
    index_of: dict[int, int] = {}  # sequence id -> prompt index
    rows: dict[int, list[torch.Tensor]] = {}
    slots: list[torch.Tensor] = []
    steps = 0
    while pending or engine.has_work():
        while pending and pending[0][0] * stagger <= steps:
            i, prompt = pending.pop(0)
            seqs[i] = engine.add_request(prompt, params)
            index_of[seqs[i].id] = i
            rows[seqs[i].id] = []
        schedule = engine.scheduler.schedule()
        if not schedule.chunks:
            if engine.has_work():  # a check sized its pool too small: a bug of the battery, not the candidate
                raise RuntimeError("the scheduler could not place any work in the battery's KV pool")
            steps += 1
            continue
        batch = engine.batch(schedule)
        slots.append(batch.slot_mapping.cpu())
        logits = forward(batch).float().cpu()
        chosen = []
        sampling = [c.seq for c in schedule.chunks if c.samples]
        for row, seq in enumerate(sampling):
            rows[seq.id].append(logits[row])
            teacher = forced[index_of[seq.id]] if forced else None
            chosen.append(teacher[len(seq.output_ids)] if teacher else int(logits[row].argmax()))
        engine.scheduler.update(schedule, chosen)
        steps += 1
    traces = tuple(
        Trace(
            tuple(s.prompt_ids), tuple(s.output_ids), torch.stack(rows[s.id]), s.num_preemptions, s.num_cached
        )
        for _, s in sorted(seqs.items())
    )
    written = torch.unique(torch.cat(slots)) if slots else torch.empty(0, dtype=torch.int64)
    return Run(traces, written)
