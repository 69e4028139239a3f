"""BenchSession: run the tiers in engine worker processes, so candidate code is isolated and bounded
in time (a hang or crash costs the measurement, not the caller).

The fast tier runs in a worker holding the first `layers` layers, the full tier in one holding the
whole model. A comparison prepares both candidates in one worker and interleaves them there; a
suspicious speedup is measured again before it is reported (`compare.confirm`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from polyinfer.bench import compare, fast_tier
from polyinfer.bench.compare import ABResult
from polyinfer.bench.fast_tier import FastTierResult
from polyinfer.bench.fidelity import FidelityReport, FidelityRow
from polyinfer.bench.metrics import ServingMetrics
from polyinfer.bench.profile import OpProfile, profile_workload
from polyinfer.bench.replay import Progress, ReplayOptions, replay
from polyinfer.engine.candidate import Candidate
from polyinfer.engine.config import EngineConfig
from polyinfer.engine.messages import WorkerSpec
from polyinfer.engine.supervisor import EngineProcess
from polyinfer.errors import PolyinferError
from polyinfer.models.default import DEFAULT_NAME, default_checkpoint
from polyinfer.models.load import load_model
from polyinfer.models.presets import PRESETS, preset_spec
from polyinfer.models.spec import ModelSpec
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.trace import Trace


def model_depth(ref: str | None) -> int:
    """How many layers the model `ref` (as `load_model` takes it) has, read without loading weights
    where the source allows."""
    if ref is None or ref == DEFAULT_NAME:
        return ModelSpec.from_config_file(default_checkpoint() / "config.json").num_layers
    if ref.endswith(".gguf") and Path(ref).is_file():
        from polyinfer.models.gguf_file import GGUFFile  # only GGUF sources need the gguf package

        return int(GGUFFile(Path(ref)).hf_config()["num_hidden_layers"])
    if Path(ref).is_dir():
        return ModelSpec.from_config_file(Path(ref) / "config.json").num_layers
    if ref in PRESETS:
        return preset_spec(ref).num_layers
    return load_model(ref).spec.num_layers  # for an unusable reference, load_model says why


@dataclass(frozen=True, slots=True)
class BenchSession:
    """What to measure on (model, engine settings) and with what discipline."""

    model: str | None
    config: EngineConfig = dataclasses.field(default_factory=EngineConfig)
    layers: int = 4  # fast tier: layers loaded (capped at the model's depth)
    reps: int = 20  # timed calls per shape, layer count and round
    warmup: int = 3
    rounds: int = 5
    margin: float = 0.01
    rechecks: int = 2  # extra measurements of a suspicious speedup
    seed: int = 0
    timeout_s: float = 1800.0  # per worker call

    def __post_init__(self) -> None:
        if self.layers < 2:
            raise PolyinferError(
                f"the fast tier fits step time against layers; --layers must be >= 2, got {self.layers}"
            )
        if min(self.reps, self.rounds) < 1 or self.warmup < 0:
            raise PolyinferError("reps and rounds must be >= 1 and warmup >= 0")
        if not 0 <= self.margin < 1:
            raise PolyinferError(f"margin must be in [0, 1), got {self.margin}")

    def fast(self, profile: WorkloadProfile, candidate: Candidate | None = None) -> FastTierResult:
        depth = model_depth(self.model)
        with self._worker(min(self.layers, depth)) as proc:
            return self._fast(proc, candidate or Candidate.reference(), profile, depth)

    def profile(self, workload: WorkloadProfile, candidate: Candidate | None = None) -> OpProfile:
        """Where `candidate`'s decode step spends its time, per kernel or operator, on the whole model at
        the decode shape that carries most of the workload's tokens."""
        with self._worker(None) as proc:
            return proc.call(profile_workload, candidate or Candidate.reference(), workload,
                             timeout_s=self.timeout_s)

    def fast_ab(
        self, profile: WorkloadProfile, candidate: Candidate, incumbent: Candidate | None = None
    ) -> ABResult[FastTierResult]:
        depth = model_depth(self.model)
        with self._worker(min(self.layers, depth)) as proc:
            return compare.confirm(
                lambda: proc.call(
                    compare.ab_fast,
                    incumbent or Candidate.reference(),
                    candidate,
                    profile,
                    depth,
                    self.rounds,
                    self.reps,
                    self.warmup,
                    self.margin,
                    self.seed,
                    timeout_s=self.timeout_s,
                ),
                self.rechecks,
            )

    def full(
        self,
        trace: Trace,
        options: ReplayOptions,
        candidate: Candidate | None = None,
        progress: Progress | None = None,
    ) -> ServingMetrics:
        with self._worker(None) as proc:
            return self._full(proc, candidate or Candidate.reference(), trace, options, progress)

    def full_ab(
        self, trace: Trace, options: ReplayOptions, candidate: Candidate, incumbent: Candidate | None = None
    ) -> ABResult[ServingMetrics]:
        with self._worker(None) as proc:
            return compare.confirm(
                lambda: proc.call(
                    compare.ab_full,
                    incumbent or Candidate.reference(),
                    candidate,
                    trace,
                    options,
                    self.rounds,
                    self.margin,
                    self.seed,
                    timeout_s=self.timeout_s,
                ),
                self.rechecks,
            )

    def fidelity(
        self, trace: Trace, options: ReplayOptions, candidates: Sequence[Candidate]
    ) -> FidelityReport:
        """Each candidate's fast-tier score against its full-tier output tok/s. The tiers run one after
        the other, so only one worker holds device memory at a time."""
        if len(candidates) < 3:
            raise PolyinferError(f"tier fidelity needs at least 3 candidates to rank, got {len(candidates)}")
        profile = WorkloadProfile.of(trace)
        depth = model_depth(self.model)
        with self._worker(min(self.layers, depth)) as proc:
            predicted = [self._fast(proc, c, profile, depth).score for c in candidates]
        with self._worker(None) as proc:
            measured = [self._full(proc, c, trace, options, None).output_tok_s for c in candidates]
        return FidelityReport.of(
            [FidelityRow(c.label, p, m) for c, p, m in zip(candidates, predicted, measured, strict=True)]
        )

    def _worker(self, num_layers: int | None) -> EngineProcess:
        return EngineProcess(WorkerSpec(self.model, self.config, num_layers))

    def _fast(
        self, proc: EngineProcess, candidate: Candidate, profile: WorkloadProfile, depth: int
    ) -> FastTierResult:
        return proc.call(
            fast_tier.measure,
            candidate,
            profile,
            depth,
            self.reps,
            self.warmup,
            self.rounds,
            timeout_s=self.timeout_s,
        )

    def _full(
        self,
        proc: EngineProcess,
        candidate: Candidate,
        trace: Trace,
        options: ReplayOptions,
        progress: Progress | None,
    ) -> ServingMetrics:
        proc.swap(candidate, timeout_s=self.timeout_s)
        return proc.call(replay, trace, options, progress, timeout_s=self.timeout_s)
