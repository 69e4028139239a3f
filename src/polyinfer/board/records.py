"""The board's records: frozen, self-validating values for everything a study writes.

Records are built by the `Board` from rows and are deeply immutable: dict fields are read-only
mappings and lists are tuples, so a snapshot handed to one agent cannot be changed under another.
Timestamps are Unix seconds (floats), which every database stores exactly the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, TypeVar

from polyinfer.errors import BoardError

TIERS = ("fast", "full")  # the measurement tiers, cheapest first


class StudyState(StrEnum):
    RUNNING = "running"
    FINISHED = "finished"
    INTERRUPTED = "interrupted"


class CandidateState(StrEnum):
    QUEUED = "queued"
    MEASURING = "measuring"  # claimed by a measurement in progress; `Board.recover` re-queues it
    MEASURED = "measured"
    FAILED = "failed"
    VERIFIED = "verified"
    REJECTED = "rejected"


# A candidate is measured once per tier (fast, then full): MEASURED goes back to MEASURING for the next
# tier. FAILED, VERIFIED and REJECTED are final, so a duplicate is never measured again.
TRANSITIONS: Mapping[CandidateState, frozenset[CandidateState]] = MappingProxyType(
    {
        CandidateState.QUEUED: frozenset({CandidateState.MEASURING, CandidateState.FAILED}),
        CandidateState.MEASURING: frozenset(
            {CandidateState.MEASURED, CandidateState.FAILED, CandidateState.QUEUED}
        ),
        CandidateState.MEASURED: frozenset(
            {
                CandidateState.MEASURING,
                CandidateState.VERIFIED,
                CandidateState.REJECTED,
                CandidateState.FAILED,
            }
        ),
        CandidateState.FAILED: frozenset(),
        CandidateState.VERIFIED: frozenset(),
        CandidateState.REJECTED: frozenset(),
    }
)


class ApprovalAction(StrEnum):
    APPROVE = "approve"
    REJECT = "reject"
    DEPLOY = "deploy"
    RETIRE = "retire"


def freeze(value: Any) -> Any:
    """A deeply read-only copy of a JSON value: mappings become mappingproxies, lists become tuples."""
    if isinstance(value, Mapping):
        return MappingProxyType({k: freeze(v) for k, v in value.items()})
    if isinstance(value, list | tuple):
        return tuple(freeze(v) for v in value)
    return value


E = TypeVar("E", bound=StrEnum)


def _enum(kind: type[E], value: Any) -> E:
    try:
        return kind(value)
    except ValueError:
        raise BoardError(f"{value!r} is not a {kind.__name__}; one of: {', '.join(kind)}") from None


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise BoardError(message)


def _set(record: object, name: str, value: Any) -> None:
    object.__setattr__(record, name, value)


@dataclass(frozen=True, slots=True)
class Study:
    id: int
    name: str
    created_at: float
    config: Mapping[str, Any]  # model ref, traffic, budget, agents: whatever the study was started with
    state: StudyState = StudyState.RUNNING

    def __post_init__(self) -> None:
        _require(bool(self.name), "a study needs a name")
        _set(self, "config", freeze(self.config))
        _set(self, "state", _enum(StudyState, self.state))


@dataclass(frozen=True, slots=True)
class CandidateRecord:
    hash: str  # the candidate's content hash, unique within its study
    study_id: int
    name: str
    source: str
    knobs: Mapping[str, Any]
    parent_hash: str | None
    generator: str  # which agent proposed it
    state: CandidateState
    created_at: float
    error: str | None = None  # why it failed or was rejected

    def __post_init__(self) -> None:
        _require(bool(self.hash), "a candidate needs a hash")
        _set(self, "knobs", freeze(self.knobs))
        _set(self, "state", _enum(CandidateState, self.state))


@dataclass(frozen=True, slots=True)
class Measurement:
    id: int
    study_id: int
    candidate_hash: str
    tier: str  # one of TIERS
    metrics: Mapping[str, Any]  # tok_s, step_ms, ttft/tpot percentiles...
    # Throughput over the incumbent's, measured in the same session (>1 is faster); None when there was
    # no incumbent to compare against (the baseline itself), which ranks as 1.0.
    ratio_to_incumbent: float | None
    ci_low: float | None  # confidence interval of the ratio
    ci_high: float | None
    repetitions: int
    timings: Mapping[str, float]  # swap_s, warmup_s, measure_s
    created_at: float

    def __post_init__(self) -> None:
        _require(self.tier in TIERS, f"tier {self.tier!r} is not one of {', '.join(TIERS)}")
        _require(
            self.repetitions >= 1, f"a measurement needs at least one repetition, got {self.repetitions}"
        )
        if self.ci_low is not None and self.ci_high is not None:
            _require(
                self.ci_low <= self.ci_high, f"confidence interval [{self.ci_low}, {self.ci_high}] is empty"
            )
        _set(self, "metrics", freeze(self.metrics))
        _set(self, "timings", freeze(self.timings))

    @property
    def score(self) -> float:
        """The ratio used to rank measurements: the baseline's missing ratio counts as 1.0."""
        return 1.0 if self.ratio_to_incumbent is None else self.ratio_to_incumbent


@dataclass(frozen=True, slots=True)
class Verdict:
    id: int
    study_id: int
    candidate_hash: str
    check: str  # the verification check's name
    passed: bool
    details: Mapping[str, Any]
    seed: int | None
    created_at: float

    def __post_init__(self) -> None:
        _require(bool(self.check), "a verdict needs the name of its check")
        _set(self, "passed", bool(self.passed))
        _set(self, "details", freeze(self.details))


@dataclass(frozen=True, slots=True)
class Post:
    id: int
    study_id: int
    agent: str
    kind: str  # 'idea', 'result', 'failure', 'note'... agents may add their own
    text: str
    refs: tuple[str, ...]  # candidate hashes the post is about
    created_at: float

    def __post_init__(self) -> None:
        _require(bool(self.agent), "a post needs the agent's name")
        _require(bool(self.kind), "a post needs a kind")
        _set(self, "refs", tuple(self.refs))


@dataclass(frozen=True, slots=True)
class Approval:
    id: int
    artifact_id: str
    action: ApprovalAction
    by: str  # the person (or service) that took the action
    note: str
    created_at: float

    def __post_init__(self) -> None:
        _require(bool(self.artifact_id), "an approval needs an artifact id")
        _require(bool(self.by), "an approval needs the name of who gave it")
        _set(self, "action", _enum(ApprovalAction, self.action))


@dataclass(frozen=True, slots=True)
class Deployment:
    id: int
    artifact_id: str
    server: str
    started_at: float
    ended_at: float | None = None  # None while the server still runs the artifact

    def __post_init__(self) -> None:
        _require(bool(self.artifact_id) and bool(self.server), "a deployment needs an artifact and a server")
        if self.ended_at is not None:
            _require(self.ended_at >= self.started_at, "a deployment cannot end before it starts")
