"""Scheduler: continuous batching with chunked prefill, decode-first token budgets and preemption.

Each step spends a token budget: running decodes first (one token each), then prompts already being
prefilled, then new requests, each prefill cut to at most `max_prefill_chunk` tokens. When the KV pool
cannot hold a decode's next token, the most recently admitted sequence is preempted: its blocks are
freed and it goes back to the front of the queue to be recomputed later (recompute preemption).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from polyinfer.engine.block_manager import BlockManager
from polyinfer.engine.sequence import FinishReason, Sequence, SequenceStatus


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_prefill_chunk: int = 512

    def __post_init__(self) -> None:
        if min(self.max_num_seqs, self.max_num_batched_tokens, self.max_prefill_chunk) < 1:
            raise ValueError("scheduler limits must be positive")


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: Sequence
    num_tokens: int
    samples: bool  # the chunk reaches the sequence's end, so its last row's logits are sampled


@dataclass(frozen=True, slots=True)
class Schedule:
    prefills: tuple[Chunk, ...]
    decodes: tuple[Chunk, ...]
    preempted: tuple[Sequence, ...]

    @property
    def chunks(self) -> tuple[Chunk, ...]:
        return self.prefills + self.decodes

    @property
    def num_tokens(self) -> int:
        return sum(c.num_tokens for c in self.chunks)


PLACEHOLDER = 0  # an output token whose value is still on the device (asynchronous steps)


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, blocks: BlockManager, eos_ids: tuple[int, ...], max_model_len: int
    ) -> None:
        self.config = config
        self.blocks = blocks
        self.eos_ids = frozenset(eos_ids)
        self.max_model_len = max_model_len
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule(self) -> Schedule:
        budget = self.config.max_num_batched_tokens
        decodes: list[Chunk] = []
        prefills: list[Chunk] = []
        preempted: list[Sequence] = []
        for seq in [s for s in self.running if not s.in_prefill]:
            if seq.status is not SequenceStatus.RUNNING or budget == 0:
                continue
            while not self.blocks.can_grow(seq, 1):
                victim = next(s for s in reversed(self.running) if all(c.seq is not s for c in decodes))
                self._preempt(victim)
                preempted.append(victim)
                if victim is seq:
                    break
            if seq.status is SequenceStatus.RUNNING:
                self.blocks.grow(seq, 1)
                decodes.append(Chunk(seq, 1, True))
                budget -= 1
        for seq in [s for s in self.running if s.in_prefill]:
            chunk = self._prefill_chunk(seq, budget)
            if chunk:
                prefills.append(chunk)
                budget -= chunk.num_tokens
        # A step that had to preempt admits nobody: the pool is short, and re-admitting the victim at once
        # would only thrash.
        while not preempted and self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            self.blocks.match_prefix(seq)
            chunk = self._prefill_chunk(seq, budget)
            if chunk is None:
                self.blocks.release(seq)
                break
            self.waiting.popleft()
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            prefills.append(chunk)
            budget -= chunk.num_tokens
        if not prefills and not decodes and self.running:
            # Every running sequence is mid-prefill and the pool is full: make room by preempting.
            victim = self.running[-1]
            self._preempt(victim)
            again = self.schedule()
            return Schedule(again.prefills, again.decodes, (*preempted, victim, *again.preempted))
        return Schedule(tuple(prefills), tuple(decodes), tuple(preempted))

    def _prefill_chunk(self, seq: Sequence, budget: int) -> Chunk | None:
        n = min(seq.num_pending, self.config.max_prefill_chunk, budget)
        fits = (len(seq.block_table) + self.blocks.num_free) * self.blocks.block_size - seq.num_computed
        n = min(n, fits)
        if n <= 0:
            return None
        self.blocks.grow(seq, n)
        return Chunk(seq, n, n == seq.num_pending)

    def _preempt(self, seq: Sequence) -> None:
        self.running.remove(seq)
        self.blocks.release(seq)
        seq.status = SequenceStatus.WAITING
        seq.num_preemptions += 1
        self.waiting.appendleft(seq)

    def update(self, schedule: Schedule, sampled: list[int]) -> list[Sequence]:
        """Advance sequences by a finished step; `sampled` holds one token per sampling chunk, in order."""
        return self.settle(self.advance(schedule), sampled)

    def advance(self, schedule: Schedule) -> list[tuple[Sequence, int]]:
        """The part of a step's update that needs no sampled token: count the step's tokens as computed
        and give every sampling sequence a placeholder for its new token. Returns (sequence, row of the
        step's samples) for each, in order. A sequence no longer running (it finished while this step
        was in flight) is skipped: its row is discarded."""
        sampling = []
        row = 0
        for chunk in schedule.chunks:
            seq = chunk.seq
            if seq.status is SequenceStatus.RUNNING:
                seq.num_computed += chunk.num_tokens
                self.blocks.register_full_blocks(seq)
                if chunk.samples:
                    seq.output_ids.append(PLACEHOLDER)
                    sampling.append((seq, row))
            row += chunk.samples
        return sampling

    def settle(self, sampling: list[tuple[Sequence, int]], sampled: list[int]) -> list[Sequence]:
        """Put the sampled tokens in place of the placeholders and finish the sequences that are done."""
        now = time.perf_counter()
        finished = []
        for seq, row in sampling:
            token = sampled[row]
            seq.output_ids[-1] = token
            seq.token_times.append(now)
            reason = self._finish_reason(seq, token)
            if reason is None:
                continue
            if seq.status is SequenceStatus.RUNNING:
                self.running.remove(seq)
                self.blocks.release(seq)
            else:  # preempted by a step scheduled while this one was in flight
                self.waiting.remove(seq)
            seq.status, seq.finish_reason = SequenceStatus.FINISHED, reason
            finished.append(seq)
        return finished

    def _finish_reason(self, seq: Sequence, token: int) -> FinishReason | None:
        p = seq.params
        if token in p.stop_token_ids or (token in self.eos_ids and not p.ignore_eos):
            return FinishReason.STOP
        if len(seq.output_ids) >= p.max_tokens or len(seq) >= self.max_model_len:
            return FinishReason.LENGTH
        return None
