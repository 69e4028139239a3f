"""The experiment store and the agents' message board (SQLite by default, Postgres by URL)."""

from polyinfer.board.board import Board
from polyinfer.board.records import (
    TIERS,
    Approval,
    ApprovalAction,
    CandidateRecord,
    CandidateState,
    Deployment,
    Measurement,
    Post,
    Study,
    StudyState,
    Verdict,
)
from polyinfer.board.snapshot import BoardSnapshot, CandidateView

__all__ = [
    "TIERS",
    "Approval",
    "ApprovalAction",
    "Board",
    "BoardSnapshot",
    "CandidateRecord",
    "CandidateState",
    "CandidateView",
    "Deployment",
    "Measurement",
    "Post",
    "Study",
    "StudyState",
    "Verdict",
]
