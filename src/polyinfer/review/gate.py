"""The review gate: who may move an artifact, and when.

Only an artifact whose verification passed can be approved, and only while it is not stale (same
weights, same hardware as recorded). A rejection must say why. Everything else about the lifecycle is
the store's `transition`.
"""

from __future__ import annotations

from polyinfer.board.board import Board
from polyinfer.errors import ReviewError
from polyinfer.review.artifact import Artifact, ArtifactState
from polyinfer.review.provenance import Hardware
from polyinfer.review.store import ArtifactStore


def approve(
    store: ArtifactStore,
    artifact_id: str,
    by: str,
    note: str = "",
    *,
    weights_hash: str,
    hardware: Hardware,
    board: Board | None = None,
) -> Artifact:
    """Approve, given the weights hash of the model and the hardware that the approval is for."""
    artifact = store.get(artifact_id)
    if not artifact.meta.verified:
        failed = ", ".join(artifact.meta.failed_checks) or "no checks ran"
        raise ReviewError(
            f"artifact {artifact.id} did not pass verification ({failed}); it cannot be approved"
        )
    stale = store.provenance(artifact.id).stale_reasons(weights_hash, hardware)
    if stale:
        raise ReviewError(f"artifact {artifact.id} is stale: {'; '.join(stale)}; verify and propose it again")
    return store.transition(artifact.id, ArtifactState.APPROVED, by, note, board)


def reject(
    store: ArtifactStore, artifact_id: str, by: str, note: str, *, board: Board | None = None
) -> Artifact:
    if not note.strip():
        raise ReviewError("a rejection needs a note saying why (--note TEXT)")
    return store.transition(artifact_id, ArtifactState.REJECTED, by, note, board)
