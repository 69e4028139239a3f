"""Engine: weights resident, a paged KV pool, a scheduler and the current candidate forward pass.

`step()` is schedule -> run the candidate -> sample -> update. `swap()` replaces the forward pass between
steps without touching weights or KV memory, so sequences in flight continue under the new candidate.

With `async_steps` a step is split in two, so the host's work overlaps the device's: `step()` schedules,
builds and launches step n+1, and only then waits for step n's tokens and settles them. Sequences carry
a placeholder for a token still on the device; step n+1 reads those tokens from step n's device output,
and a sequence that step n finishes has a row in step n+1 whose result is discarded (its blocks are
released after step n+1 was queued, so the device finishes with them before anyone reuses them). The
tokens are the same as in synchronous steps; each is timestamped when its value reaches the host.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass

import torch

from polyinfer.engine.batch import Batch, to_device
from polyinfer.engine.block_manager import BlockManager
from polyinfer.engine.candidate import Candidate, Forward, SwapContext, import_candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.kv_pool import KVPool
from polyinfer.engine.sampler import Sampler
from polyinfer.engine.scheduler import Schedule, Scheduler
from polyinfer.engine.sequence import SamplingParams, Sequence, SequenceStatus
from polyinfer.engine.serving import Serving
from polyinfer.errors import CandidateError, RequestError
from polyinfer.models.load import LoadedModel


@dataclass(frozen=True, slots=True)
class InFlight:
    """A launched asynchronous step whose tokens have not been read yet."""

    sampling: list[tuple[Sequence, int]]  # (sequence, row of `sampled`) for each live sampling chunk
    sampled: torch.Tensor  # int64 [rows] on the device
    host: torch.Tensor  # its copy on the host (pinned on CUDA), complete once `done` is
    done: torch.cuda.Event | None

    def tokens(self) -> list[int]:
        if self.done is not None:
            self.done.synchronize()
        return self.host.tolist()


@dataclass(frozen=True, slots=True)
class SwapReport:
    candidate: str  # hash
    import_s: float
    build_s: float
    probe_s: float

    @property
    def total_s(self) -> float:
        return self.import_s + self.build_s + self.probe_s


class Engine:
    def __init__(self, model: LoadedModel, config: EngineConfig | None = None,
                 candidate: Candidate | None = None) -> None:
        self.model = model
        self.config = config = config or EngineConfig()
        self.spec = model.spec
        self.device = torch.device(config.device)
        self.max_model_len = min(config.max_model_len or self.spec.max_position_embeddings,
                                 self.spec.max_position_embeddings)
        per_block = KVPool.bytes_per_block(self.spec, config.block_size, config.torch_dtype)
        num_blocks = config.pool_blocks(per_block, self.max_model_len)
        self.kv = KVPool(self.spec, num_blocks, config.block_size, config.torch_dtype, self.device)
        self.blocks = BlockManager(num_blocks, config.block_size, config.prefix_caching)
        eos = model.tokenizer.eos_token_ids if model.tokenizer else self.spec.eos_token_ids
        self.scheduler = Scheduler(config.scheduler, self.blocks, tuple(eos), self.max_model_len)
        self.sampler = Sampler(self.device, config.seed)
        self.serving = Serving.of(config, {})
        self.async_steps = config.async_steps
        self.in_flight: InFlight | None = None
        self.candidate: Candidate | None = None
        self.forward: Forward | None = None
        self.swap(candidate or Candidate.reference())

    def prepare(self, candidate: Candidate) -> tuple[Forward, SwapReport]:
        """Import and build `candidate` and probe it on one small prefill, without making it current.

        Several prepared forwards can live side by side (they share weights and the KV pool), which is
        what interleaved A/B timing needs. Raises CandidateError on any failure.
        """
        Serving.of(self.config, candidate.knobs)  # refuse bad serving knobs before any work
        self._collect_dropped()
        t0 = time.perf_counter()
        module = import_candidate(candidate)
        t1 = time.perf_counter()
        ctx = SwapContext(self.spec, self.model.weights, self.kv, dict(candidate.knobs), self.device,
                          self.config.torch_dtype)
        try:
            with torch.inference_mode():
                forward = module.build(ctx)
        except Exception as e:
            raise CandidateError(f"candidate {candidate.label} failed in build(): {type(e).__name__}: {e}") from e
        t2 = time.perf_counter()
        self._probe(candidate, forward)
        t3 = time.perf_counter()
        return forward, SwapReport(candidate.hash, t1 - t0, t2 - t1, t3 - t2)

    def _collect_dropped(self) -> None:
        """Dropped candidates may hold device memory in reference cycles (agent code, fused weights,
        CUDA graph pools) that Python's collector frees only when its object counts say so. When less
        than a quarter of the GPU is free, collect them before building another (a full collection
        costs ~0.1 s, five hot swaps' worth, so it is not done on every swap)."""
        if self.device.type != "cuda":
            return
        free, total = torch.cuda.mem_get_info(self.device)
        if free < total // 4:
            gc.collect()
            torch.cuda.empty_cache()

    def swap(self, candidate: Candidate) -> SwapReport:
        """Make `candidate` the forward pass of every later step; on failure the previous one stays."""
        forward, report = self.prepare(candidate)
        Serving.of(self.config, candidate.knobs).apply(self)
        self.candidate, self.forward = candidate, forward
        return report

    def _probe(self, candidate: Candidate, forward: Forward) -> None:
        if self.blocks.num_free == 0:
            return
        probe = Sequence([self.spec.bos_token_id or 0, 1, 2], SamplingParams())
        self.blocks.grow(probe, len(probe))
        batch = Batch.build([probe.tokens], [0], [probe.block_table], self.kv.block_size, [True], 1, self.device)
        try:
            self._run(candidate, forward, batch)
        finally:
            self.blocks.release(probe)

    def _run(self, candidate: Candidate, forward: Forward, batch: Batch) -> torch.Tensor:
        try:
            with torch.inference_mode():
                logits = forward(batch)
        except Exception as e:
            raise CandidateError(f"candidate {candidate.label} raised {type(e).__name__}: {e}") from e
        expected = (int(batch.logits_indices.shape[0]), self.spec.vocab_size)
        if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != expected:
            got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise CandidateError(f"candidate {candidate.label} returned logits {got}, expected {expected}")
        return logits

    def add_request(self, prompt_ids: list[int], params: SamplingParams | None = None,
                    arrival: float | None = None) -> Sequence:
        params = params or SamplingParams()
        if not prompt_ids:
            raise RequestError("the prompt is empty")
        bad = [t for t in prompt_ids if not 0 <= t < self.spec.vocab_size]
        if bad:
            raise RequestError(f"token ids {bad[:5]} are outside the vocabulary [0, {self.spec.vocab_size})")
        if len(prompt_ids) >= self.max_model_len:
            raise RequestError(
                f"the prompt has {len(prompt_ids)} tokens but the model's context is {self.max_model_len}"
            )
        capacity = self.kv.num_blocks * self.kv.block_size
        if min(len(prompt_ids) + params.max_tokens, self.max_model_len) > capacity:
            raise RequestError(
                f"the request needs up to {len(prompt_ids) + params.max_tokens} tokens of KV cache but the "
                f"pool holds {capacity}; raise kv_cache_tokens or lower max_tokens"
            )
        seq = Sequence(prompt_ids, params, arrival)
        self.scheduler.add(seq)
        return seq

    def step(self) -> list[Sequence]:
        """Run one scheduled batch; returns the sequences that finished in it (with `async_steps`: in the
        step before it, whose tokens this call reads)."""
        if self.async_steps:
            return self._step_async()
        finished = self.drain()  # a step left in flight when asynchronous steps were turned off
        schedule = self.scheduler.schedule()
        if not schedule.chunks:
            return finished
        assert self.candidate is not None and self.forward is not None
        logits = self._run(self.candidate, self.forward, self.batch(schedule))
        sampling = [c.seq for c in schedule.chunks if c.samples]
        tokens = self.sampler.sample(logits.float(), [s.params for s in sampling], [s.id for s in sampling])
        finished += self.scheduler.update(schedule, tokens)
        for seq in finished:
            self.sampler.forget(seq.id)
        return finished

    def _step_async(self) -> list[Sequence]:
        schedule = self.scheduler.schedule()
        launched = self._launch(schedule) if schedule.chunks else None
        finished = self.drain()
        if launched is not None:
            sampled, host, done = launched
            self.in_flight = InFlight(self.scheduler.advance(schedule), sampled, host, done)
        return finished

    def _launch(self, schedule: Schedule) -> tuple[torch.Tensor, torch.Tensor, torch.cuda.Event | None]:
        """Queue the step's forward and sampling on the device; nothing here waits for the device."""
        assert self.candidate is not None and self.forward is not None
        batch = self.batch(schedule)
        prev = self.in_flight
        if prev is not None:  # decode inputs that are the previous step's tokens, still on the device
            row_of = {id(seq): row for seq, row in prev.sampling}
            rows, start = [], 0
            for c in schedule.chunks:
                if c.num_tokens == 1 and id(c.seq) in row_of:
                    rows.append((start, row_of[id(c.seq)]))
                start += c.num_tokens
            if rows:
                index = to_device(torch.tensor(rows, dtype=torch.int64), self.device)
                batch.input_ids[index[:, 0]] = prev.sampled[index[:, 1]]
        logits = self._run(self.candidate, self.forward, batch)
        sampling = [c.seq for c in schedule.chunks if c.samples]
        sampled = self.sampler.sample_on_device(logits.float(), [s.params for s in sampling],
                                                [s.id for s in sampling])
        if self.device.type != "cuda":
            return sampled, sampled, None
        host = torch.empty(sampled.shape, dtype=sampled.dtype, pin_memory=True)
        host.copy_(sampled, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        return sampled, host, done

    def drain(self) -> list[Sequence]:
        """Wait for the step in flight, if any, and settle its tokens; returns the sequences it finished."""
        prev, self.in_flight = self.in_flight, None
        if prev is None:
            return []
        finished = self.scheduler.settle(prev.sampling, prev.tokens())
        for seq in finished:
            self.sampler.forget(seq.id)
        return finished

    def batch(self, schedule: Schedule) -> Batch:
        chunks = schedule.chunks
        return Batch.build(
            [c.seq.token_slice(c.seq.num_computed, c.seq.num_computed + c.num_tokens) for c in chunks],
            [c.seq.num_computed for c in chunks],
            [c.seq.block_table for c in chunks],
            self.kv.block_size,
            [c.samples for c in chunks],
            len(schedule.prefills),
            self.device,
        )

    def has_work(self) -> bool:
        return self.scheduler.has_work or self.in_flight is not None

    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[Sequence]:
        """Run prompts to completion with continuous batching; results in prompt order."""
        per = params if isinstance(params, list) else [params] * len(prompts)
        seqs = [self.add_request(p, sp) for p, sp in zip(prompts, per, strict=True)]
        while any(s.status is not SequenceStatus.FINISHED for s in seqs):
            self.step()
        return seqs
