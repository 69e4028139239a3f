"""Experiments as the engine worker runs them: build the candidate (timed as the swap), then an
interleaved A/B against the incumbent on one tier. Module-level so that they pickle to the worker."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any

from polyinfer.bench import compare, fast_tier
from polyinfer.bench.replay import ReplayOptions
from polyinfer.engine.candidate import Candidate, Forward
from polyinfer.engine.engine import Engine
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.trace import Trace


@dataclass(frozen=True, slots=True)
class Outcome:
    tier: str
    ab: Any  # compare.ABResult
    swap_s: float  # import + build + probe of the candidate
    warmup_s: float  # untimed first uses before the A/B's rounds (kernel compiles, graph captures)
    measure_s: float  # the interleaved A/B's rounds

    @property
    def ratio(self) -> float:
        return float(self.ab.comparison.median)

    @property
    def faster(self) -> bool:
        return str(self.ab.comparison.verdict) == "faster"


def fast(
    engine: Engine,
    incumbent: Candidate,
    candidate: Candidate,
    profile: WorkloadProfile,
    full_layers: int,
    rounds: int,
    reps: int,
    margin: float,
    seed: int,
    stop_below: float | None = None,
) -> Outcome:
    t0 = time.perf_counter()
    forwards = fast_tier.prepare_layers(engine, candidate)  # fails fast on a broken build: the swap cost
    t1 = time.perf_counter()
    prepared = (_prepared_incumbent(engine, incumbent), forwards)
    ab = compare.confirm(
        lambda: compare.ab_fast(
            engine,
            incumbent,
            candidate,
            profile,
            full_layers,
            rounds=rounds,
            reps=reps,
            margin=margin,
            seed=seed,
            stop_below=stop_below,
            prepared=prepared,
        )
    )
    return Outcome("fast", ab, t1 - t0, ab.warmup_s, time.perf_counter() - t1 - ab.warmup_s)


# Per engine (the worker has one): the incumbent's fast-tier forwards, kept across experiments, since
# every experiment of a study measures against the same incumbent until a winner replaces it.
_INCUMBENTS: weakref.WeakKeyDictionary[Engine, tuple[str, dict[int, Forward]]] = weakref.WeakKeyDictionary()


def _prepared_incumbent(engine: Engine, incumbent: Candidate) -> dict[int, Forward]:
    kept = _INCUMBENTS.get(engine)
    if kept is None or kept[0] != incumbent.hash:
        _INCUMBENTS.pop(engine, None)  # free the old incumbent's buffers before building the new one
        kept = (incumbent.hash, fast_tier.prepare_layers(engine, incumbent))
        _INCUMBENTS[engine] = kept
    return kept[1]


def full(
    engine: Engine,
    incumbent: Candidate,
    candidate: Candidate,
    trace: Trace,
    rounds: int,
    margin: float,
    seed: int,
) -> Outcome:
    t0 = time.perf_counter()
    forward, _ = engine.prepare(candidate)
    t1 = time.perf_counter()
    prepared = (engine.prepare(incumbent)[0], forward)
    ab = compare.confirm(
        lambda: compare.ab_full(engine, incumbent, candidate, trace, ReplayOptions(), rounds=rounds, margin=margin,
                                seed=seed, prepared=prepared)
    )
    return Outcome("full", ab, t1 - t0, ab.warmup_s, time.perf_counter() - t1 - ab.warmup_s)
