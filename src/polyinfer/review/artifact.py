"""Artifact: a proposed candidate with everything a reviewer needs, and its lifecycle.

proposed -> approved | rejected; approved -> deployed | retired; deployed -> retired. Rejected and
retired are final. Every move is an `AuditEntry` (who, when, from, to, note) in the artifact's
append-only audit log.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict

from polyinfer.board.records import ApprovalAction


class ArtifactState(StrEnum):
    PROPOSED = "proposed"
    APPROVED = "approved"
    REJECTED = "rejected"
    DEPLOYED = "deployed"
    RETIRED = "retired"


TRANSITIONS = MappingProxyType(
    {
        ArtifactState.PROPOSED: frozenset({ArtifactState.APPROVED, ArtifactState.REJECTED}),
        ArtifactState.APPROVED: frozenset({ArtifactState.DEPLOYED, ArtifactState.RETIRED}),
        ArtifactState.DEPLOYED: frozenset({ArtifactState.RETIRED}),
        ArtifactState.REJECTED: frozenset(),
        ArtifactState.RETIRED: frozenset(),
    }
)

# How a move is mirrored on the board's approvals table.
BOARD_ACTIONS = MappingProxyType(
    {
        ArtifactState.APPROVED: ApprovalAction.APPROVE,
        ArtifactState.REJECTED: ApprovalAction.REJECT,
        ArtifactState.DEPLOYED: ApprovalAction.DEPLOY,
        ArtifactState.RETIRED: ApprovalAction.RETIRE,
    }
)


class AuditEntry(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: float  # Unix seconds
    by: str
    from_state: ArtifactState | None  # None for the creation entry
    to_state: ArtifactState
    note: str = ""


class ArtifactMeta(BaseModel):
    """The immutable facts of an artifact, written once at creation (`artifact.json`)."""

    model_config = ConfigDict(frozen=True)

    id: str
    candidate_hash: str
    candidate_name: str
    created_at: float
    verified: bool  # the verification report passed
    failed_checks: tuple[str, ...]
    speedup: float | None  # the speedup that counts, as the report confirmed it
    model: str  # the model's source
    device: str
    dtype: str


class Artifact(BaseModel):
    model_config = ConfigDict(frozen=True)

    meta: ArtifactMeta
    state: ArtifactState
    path: Path

    @property
    def id(self) -> str:
        return self.meta.id

    def read(self, name: str) -> str:
        return (self.path / name).read_text()

    def summary(self) -> dict[str, Any]:
        return {**self.meta.model_dump(), "state": self.state.value, "path": str(self.path)}
