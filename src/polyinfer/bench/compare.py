"""Interleaved A/B: a candidate against the incumbent in the same engine session, on either tier.

Both candidates are prepared side by side (`Engine.prepare`), so no swap separates their timings.
Each round visits them in a seeded random order, on the fast tier shape by shape, on the full tier one
whole replay each. `ab_fast` and `ab_full` are module-level so that an EngineProcess can run them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from polyinfer.bench import fast_tier
from polyinfer.bench.fast_tier import FastTierResult, Timings
from polyinfer.bench.metrics import ServingMetrics
from polyinfer.bench.replay import ReplayOptions, replay
from polyinfer.bench.shapes import Limits, ShapeMix
from polyinfer.bench.stats import Comparison, summarize
from polyinfer.engine.candidate import Candidate, Forward
from polyinfer.engine.engine import Engine
from polyinfer.engine.serving import Serving
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.trace import Trace

M = TypeVar("M", FastTierResult, ServingMetrics)


@dataclass(frozen=True, slots=True)
class ABResult(Generic[M]):
    """The comparison, with each side's measurement (fast tier: pooled over rounds; full tier: the
    round whose replay was the median for that side), and the seconds of untimed warm-up before the
    rounds (where first uses compile kernels and capture graphs)."""

    comparison: Comparison
    incumbent: M
    candidate: M
    warmup_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "comparison": self.comparison.to_json(),
            "incumbent": self.incumbent.to_json(),
            "candidate": self.candidate.to_json(),
            "warmup_s": self.warmup_s,
        }


def ab_fast(
    engine: Engine,
    incumbent: Candidate,
    candidate: Candidate,
    profile: WorkloadProfile,
    full_layers: int,
    rounds: int = 10,
    reps: int = 10,
    warmup: int = 2,
    margin: float = 0.01,
    seed: int = 0,
    stop_below: float | None = None,
    prepared: Sequence[Mapping[int, Forward]] | None = None,
) -> ABResult[FastTierResult]:
    """Per round, the predicted score (output tok/s) of each from that round's calls, and their ratio.

    With `stop_below`, a candidate whose first two rounds both came out below that ratio stops there
    (racing): it cannot be promoted, and more rounds would only sharpen by how much it lost.
    `prepared`: both sides' forwards by layer count (`fast_tier.prepare_layers`), where the caller has
    built them already (a study keeps its incumbent's across experiments)."""
    sides = (incumbent, candidate)
    # Each side's serving knobs (prefix caching, prefill chunk) shape its own workload of steps.
    mixes = [ShapeMix.of(profile, Limits.of(engine, Serving.of(engine.config, c.knobs))) for c in sides]
    shapes = tuple(dict.fromkeys(s for m in mixes for s in m.shapes))
    forwards = list(prepared) if prepared is not None else [fast_tier.prepare_layers(engine, c) for c in sides]
    warmup_s = fast_tier.warm(engine, forwards, shapes)
    pooled: list[Timings] = [{}, {}]
    order = random.Random(seed)
    ratios = []
    for _ in range(rounds):
        visit = order.sample([0, 1], 2)
        timings: list[Timings] = [{}, {}]
        fast_tier.time_round(
            engine, [forwards[i] for i in visit], shapes, reps, warmup, [timings[i] for i in visit]
        )
        scores = [fast_tier.result(c, m, t, full_layers).score for c, m, t in zip(sides, mixes, timings, strict=True)]
        ratios.append(scores[1] / scores[0])
        for total, new in zip(pooled, timings, strict=True):
            for key, seconds in new.items():
                total.setdefault(key, []).extend(seconds)
        if stop_below is not None and len(ratios) >= 2 and max(ratios) < stop_below:
            break
    results = [fast_tier.result(c, m, t, full_layers) for c, m, t in zip(sides, mixes, pooled, strict=True)]
    comparison = summarize(incumbent.label, candidate.label, ratios, margin, seed=seed)
    return ABResult(comparison, results[0], results[1], warmup_s)


def ab_full(
    engine: Engine,
    incumbent: Candidate,
    candidate: Candidate,
    trace: Trace,
    options: ReplayOptions | None = None,
    rounds: int = 3,
    margin: float = 0.01,
    seed: int = 0,
    warmup_rounds: int | None = None,
    prepared: Sequence[Forward] | None = None,
) -> ABResult[ServingMetrics]:
    """Per round, one replay of `trace` under each, and the ratio of their output tok/s.

    `warmup_rounds` replay the trace under each side untimed first (default: one on CUDA, none on a
    CPU): on a GPU, candidates capture CUDA graphs and compile kernels on the first use of each shape,
    a one-time cost that would otherwise land in the first timed round of whichever side has more of
    them. `prepared`: both sides' forwards, where the caller has built them already."""
    sides = (incumbent, candidate)
    forwards = list(prepared) if prepared is not None else [engine.prepare(c)[0] for c in sides]
    order = random.Random(seed)
    if warmup_rounds is None:
        warmup_rounds = 1 if engine.device.type == "cuda" else 0
    t0 = time.perf_counter()
    for _ in range(warmup_rounds):
        for i in (0, 1):
            with _current(engine, sides[i], forwards[i]):
                replay(engine, trace, options)
    warmup_s = time.perf_counter() - t0
    runs: list[list[ServingMetrics]] = [[], []]
    for _ in range(rounds):
        for i in order.sample([0, 1], 2):
            with _current(engine, sides[i], forwards[i]):
                runs[i].append(replay(engine, trace, options))
    ratios = [b.output_tok_s / a.output_tok_s for a, b in zip(*runs, strict=True)]
    comparison = summarize(incumbent.label, candidate.label, ratios, margin, seed=seed)
    median = [sorted(r, key=lambda m: m.output_tok_s)[len(r) // 2] for r in runs]
    return ABResult(comparison, median[0], median[1], warmup_s)


@contextlib.contextmanager
def _current(engine: Engine, candidate: Candidate, forward: Forward) -> Iterator[None]:
    """Run engine steps on a prepared forward, then put the engine's own candidate back."""
    saved = engine.candidate, engine.forward, engine.serving
    engine.candidate, engine.forward = candidate, forward
    Serving.of(engine.config, candidate.knobs).apply(engine)
    try:
        yield
    finally:
        engine.candidate, engine.forward = saved[:2]
        saved[2].apply(engine)


def confirm(measure: Callable[[], ABResult[M]], rechecks: int = 2) -> ABResult[M]:
    """Run `measure`; when it reports a suspicious speedup, run it `rechecks` more times and keep the
    most conservative result (the lowest median ratio), marked with how often it was re-measured and
    carrying the warm-up seconds of every run."""
    first = measure()
    if not first.comparison.needs_remeasure:
        return first
    results = [first]
    results.extend(measure() for _ in range(rechecks))
    kept = min(results, key=lambda r: r.comparison.median)
    return dataclasses.replace(kept, comparison=dataclasses.replace(kept.comparison, remeasured=rechecks),
                               warmup_s=sum(r.warmup_s for r in results))
