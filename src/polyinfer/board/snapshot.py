"""BoardSnapshot: an immutable view of one study, read in one transaction, for agents and reports.

Readers never query the board piecemeal; they take a snapshot, so what they see is one consistent
state (no measurement of a candidate that still looks queued) that cannot change while they reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from polyinfer.board.records import TIERS, CandidateRecord, CandidateState, Measurement, Post, Study, Verdict

_OUT_OF_THE_RUNNING = (CandidateState.FAILED, CandidateState.REJECTED)


@dataclass(frozen=True, slots=True)
class CandidateView:
    """A candidate with its best measurement per tier (highest ratio to the incumbent) and its verdicts."""

    record: CandidateRecord
    best: Mapping[str, Measurement]  # tier -> best measurement; tiers not measured are absent
    verdicts: tuple[Verdict, ...]

    @property
    def hash(self) -> str:
        return self.record.hash

    @property
    def state(self) -> CandidateState:
        return self.record.state


@dataclass(frozen=True, slots=True)
class BoardSnapshot:
    study: Study
    candidates: tuple[CandidateView, ...]  # in the order they were proposed
    posts: tuple[Post, ...]  # the most recent, oldest first
    incumbent: CandidateView | None  # see `choose_incumbent`
    taken_at: float

    def candidate(self, hash: str) -> CandidateView | None:
        return next((c for c in self.candidates if c.hash == hash), None)

    def in_state(self, *states: CandidateState) -> tuple[CandidateView, ...]:
        return tuple(c for c in self.candidates if c.state in states)

    @property
    def failures(self) -> tuple[CandidateRecord, ...]:
        """Failed candidates, with their errors, so agents do not propose the same mistake again."""
        return tuple(c.record for c in self.in_state(CandidateState.FAILED))


def choose_incumbent(candidates: Iterable[CandidateView]) -> CandidateView | None:
    """The best measured candidate still in the running: highest full-tier ratio, or fast-tier when no
    candidate has a full-tier measurement yet. Ties go to the earlier candidate: a challenger must win."""
    contenders = [c for c in candidates if c.state not in _OUT_OF_THE_RUNNING]
    for tier in reversed(TIERS):
        measured = [c for c in contenders if tier in c.best]
        if measured:
            return max(measured, key=lambda c: c.best[tier].score)
    return None


def build_snapshot(
    study: Study,
    candidates: Iterable[CandidateRecord],
    measurements: Iterable[Measurement],
    verdicts: Iterable[Verdict],
    posts: Iterable[Post],
    taken_at: float,
) -> BoardSnapshot:
    best: dict[str, dict[str, Measurement]] = defaultdict(dict)
    for m in measurements:
        held = best[m.candidate_hash].get(m.tier)
        if held is None or m.score > held.score:
            best[m.candidate_hash][m.tier] = m
    checks: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        checks[v.candidate_hash].append(v)
    views = tuple(
        CandidateView(c, MappingProxyType(best.get(c.hash, {})), tuple(checks.get(c.hash, ())))
        for c in candidates
    )
    return BoardSnapshot(study, views, tuple(posts), choose_incumbent(views), taken_at)
