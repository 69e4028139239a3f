"""The fast tier: time a candidate's forward pass at a workload's step shapes on the first k layers, and
predict the full model's figures from them.

Step time is linear in the number of layers: t(n) = fixed + n * per_layer, where `fixed` is what runs
once per step (embedding, final norm, LM head, launch overheads). The candidate is built twice over the
same weights and KV pool, on the first layer and on all k loaded layers, both timed in the same rounds;
the line through the two points, evaluated at the model's full depth, is the prediction.

Discipline: each (shape, layer count) is timed `reps` times after `warmup` untimed calls, in each of
`rounds` rounds that visit every shape and layer count, so slow drift (clocks, temperature, other
processes) spreads over all of them. GPU times come from CUDA events, CPU times from perf_counter.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from polyinfer.bench.score import Prediction, predict
from polyinfer.bench.shapes import Limits, ShapeMix, StepShape
from polyinfer.bench.steps import held_batch
from polyinfer.bench.timer import time_calls
from polyinfer.engine.batch import Batch
from polyinfer.engine.candidate import Candidate, Forward, SwapContext, import_candidate
from polyinfer.engine.engine import Engine
from polyinfer.engine.sampler import argmax
from polyinfer.engine.serving import Serving
from polyinfer.errors import CandidateError, PolyinferError
from polyinfer.traffic.profile import WorkloadProfile

# Per (shape, layer count): seconds of each timed call.
Timings = dict[tuple[StepShape, int], list[float]]


@dataclass(frozen=True, slots=True)
class LayerFit:
    fixed_s: float
    per_layer_s: float

    @classmethod
    def fit(cls, seconds_by_layers: Mapping[int, float]) -> LayerFit:
        """Least-squares line through (layers, seconds), two or more layer counts. Both terms are
        clamped at 0: with close points, noise can tilt the line below zero, which no model has."""
        if len(seconds_by_layers) < 2:
            raise ValueError("a layer fit needs step times at two or more layer counts")
        layers = np.array(list(seconds_by_layers), dtype=float)
        seconds = np.array(list(seconds_by_layers.values()), dtype=float)
        per_layer = max(float(np.polyfit(layers, seconds, 1)[0]), 0.0)
        return cls(max(float(seconds.mean() - per_layer * layers.mean()), 0.0), per_layer)

    def at(self, layers: int) -> float:
        return self.fixed_s + layers * self.per_layer_s


@dataclass(frozen=True, slots=True)
class ShapeResult:
    shape: StepShape
    median_s: dict[int, float]  # by layer count
    cv: float  # of the calls at the most layers, over all rounds
    fit: LayerFit
    predicted_s: float  # at the model's full depth


@dataclass(frozen=True, slots=True)
class FastTierResult:
    candidate: str  # label
    full_layers: int
    shapes: tuple[ShapeResult, ...]
    prediction: Prediction

    @property
    def score(self) -> float:
        return self.prediction.output_tok_s

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def layer_counts(engine: Engine) -> tuple[int, ...]:
    loaded = engine.spec.num_layers
    if loaded < 2:
        raise PolyinferError("the fast tier fits step time against layers; load at least 2 layers")
    return (1, loaded)


def prepare_layers(engine: Engine, candidate: Candidate) -> dict[int, Forward]:
    """`candidate` built over the first n loaded layers, for each of `layer_counts`; the full build is
    probed by `Engine.prepare`, the truncated ones share its weights and KV pool."""
    counts = layer_counts(engine)
    forwards = {counts[-1]: engine.prepare(candidate)[0]}
    module = import_candidate(candidate)
    for n in counts[:-1]:
        weights = dataclasses.replace(engine.model.weights, layers=engine.model.weights.layers[:n])
        ctx = SwapContext(
            engine.spec.with_layers(n),
            weights,
            engine.kv,
            dict(candidate.knobs),
            engine.device,
            engine.config.torch_dtype,
        )
        try:
            with torch.inference_mode():
                forwards[n] = module.build(ctx)
        except Exception as e:
            raise CandidateError(f"candidate {candidate.label} failed in build() on {n} layers: {e}") from e
    return forwards


def time_round(
    engine: Engine,
    forward_sets: Sequence[Mapping[int, Forward]],
    shapes: tuple[StepShape, ...],
    reps: int,
    warmup: int,
    into: Sequence[Timings],
) -> None:
    """One round: every shape, and at each shape every set of forwards (one set per candidate, keyed
    by layer count) back to back on the same batch; set i's calls are appended to `into[i]`."""
    for shape in shapes:
        with held_batch(engine, shape.batch_size, shape.context_len, shape.query_len) as batch, \
                torch.inference_mode():
            for forwards, timings in zip(forward_sets, into, strict=True):
                for n, forward in forwards.items():
                    sampled = functools.partial(_sampled, forward, batch)
                    seconds = time_calls(sampled, engine.device, reps, warmup)
                    timings.setdefault((shape, n), []).extend(seconds)


def warm(engine: Engine, forward_sets: Sequence[Mapping[int, Forward]], shapes: tuple[StepShape, ...]) -> float:
    """Call every forward once at every shape, untimed, and return the seconds it took: where a
    candidate compiles kernels or captures graphs on first use, that cost lands here, not in a round."""
    t0 = time.perf_counter()
    for shape in shapes:
        with held_batch(engine, shape.batch_size, shape.context_len, shape.query_len) as batch, \
                torch.inference_mode():
            for forwards in forward_sets:
                for forward in forwards.values():
                    _sampled(forward, batch)
    if engine.device.type == "cuda":
        torch.cuda.synchronize(engine.device)
    return time.perf_counter() - t0


def _sampled(forward: Forward, batch: Batch) -> torch.Tensor:
    return argmax(forward(batch))  # greedy sampling's cost belongs to the step


def result(candidate: Candidate, mix: ShapeMix, timings: Timings, full_layers: int) -> FastTierResult:
    """Fit and predict from the calls timed so far (the median per shape and layer count)."""
    shapes = []
    for shape in mix.shapes:
        calls = {n: t for (s, n), t in timings.items() if s == shape}
        medians = {n: statistics.median(t) for n, t in sorted(calls.items())}
        top = calls[max(calls)]
        fit = LayerFit.fit(medians)
        shapes.append(
            ShapeResult(
                shape, medians, statistics.pstdev(top) / statistics.mean(top), fit, fit.at(full_layers)
            )
        )
    prediction = predict(mix, {r.shape: r.predicted_s for r in shapes})
    return FastTierResult(candidate.label, full_layers, tuple(shapes), prediction)


def measure(
    engine: Engine,
    candidate: Candidate,
    profile: WorkloadProfile,
    full_layers: int,
    reps: int = 20,
    warmup: int = 3,
    rounds: int = 3,
) -> FastTierResult:
    """The fast tier on one candidate, at the shapes `profile` implies on this engine, predicting a
    `full_layers`-layer model. Module-level so that an EngineProcess can run it."""
    mix = ShapeMix.of(profile, Limits.of(engine, Serving.of(engine.config, candidate.knobs)))
    forwards = prepare_layers(engine, candidate)
    timings: Timings = {}
    for _ in range(rounds):
        time_round(engine, [forwards], mix.shapes, reps, warmup, [timings])
    return result(candidate, mix, timings, full_layers)
