"""What a generator hands the study loop: proposals (a candidate to measure) and notes (posts for the board).

Generators never write to the board themselves (only the study loop does); they return proposals and keep
notes, and the loop records both.
"""

from __future__ import annotations

from dataclasses import dataclass

from polyinfer.engine.candidate import Candidate


@dataclass(frozen=True, slots=True)
class Proposal:
    """A candidate to queue. `post`, when given, is the generator's reasoning, posted with kind 'idea' and
    the candidate's hash as its reference."""

    candidate: Candidate
    generator: str  # the proposing generator's name
    parent_hash: str | None = None  # the candidate this one was derived from
    post: str | None = None


@dataclass(frozen=True, slots=True)
class Note:
    """A post that belongs to no proposal: a failure (bad reply, timeout, rejected code) or a remark."""

    kind: str  # 'failure' or 'note'
    text: str
    refs: tuple[str, ...] = ()  # candidate hashes the note is about
