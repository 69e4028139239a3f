"""Artifacts (candidate, report, measurements, diff, provenance) and the approve/reject gate."""

from polyinfer.review.artifact import TRANSITIONS, Artifact, ArtifactState, AuditEntry
from polyinfer.review.gate import approve, reject
from polyinfer.review.provenance import Hardware, Provenance
from polyinfer.review.store import ArtifactStore, create_artifact, default_root

__all__ = [
    "TRANSITIONS",
    "Artifact",
    "ArtifactState",
    "ArtifactStore",
    "AuditEntry",
    "Hardware",
    "Provenance",
    "approve",
    "create_artifact",
    "default_root",
    "reject",
]
