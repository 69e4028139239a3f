"""The gate: only verified, current artifacts are approved; a rejection says why."""

from __future__ import annotations

import pytest

from polyinfer.board import ApprovalAction, Board
from polyinfer.errors import ReviewError
from polyinfer.review import ArtifactState, ArtifactStore, Hardware, approve, create_artifact, reject
from polyinfer.verify import BatteryConfig, verify_candidate

HERE = Hardware.current("cpu")


def test_approve_a_verified_current_artifact(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    artifact = store.create(tweaked, report_for(tweaked, tiny), tiny)
    with Board.open(tmp_path / "board.db") as board:
        approved = approve(
            store, artifact.id, "alice", "ship it", weights_hash=tiny.weights_hash, hardware=HERE, board=board
        )
        assert [a.action for a in board.approvals(artifact.id)] == [ApprovalAction.APPROVE]
    assert approved.state is ArtifactState.APPROVED
    assert store.audit(artifact.id)[-1].note == "ship it"


def test_approval_is_refused_when_verification_failed(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    artifact = store.create(tweaked, report_for(tweaked, tiny, passed=False), tiny)
    with pytest.raises(ReviewError, match=r"did not pass verification \(equivalence.logits\)"):
        approve(store, artifact.id, "alice", weights_hash=tiny.weights_hash, hardware=HERE)
    assert store.get(artifact.id).state is ArtifactState.PROPOSED


def test_approval_of_a_stale_artifact_is_refused(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    artifact = store.create(tweaked, report_for(tweaked, tiny), tiny)
    with pytest.raises(ReviewError, match="stale: the model changed"):
        approve(store, artifact.id, "alice", weights_hash="0" * 64, hardware=HERE)
    gpu = Hardware(kind="cuda", name="NVIDIA H200", count=1)
    with pytest.raises(ReviewError, match=r"stale: the hardware changed \(.* then, NVIDIA H200 now\)"):
        approve(store, artifact.id, "alice", weights_hash=tiny.weights_hash, hardware=gpu)
    assert store.get(artifact.id).state is ArtifactState.PROPOSED


def test_reject_needs_a_note_and_is_final(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    artifact = store.create(tweaked, report_for(tweaked, tiny), tiny)
    with pytest.raises(ReviewError, match="needs a note"):
        reject(store, artifact.id, "bob", "  ")
    assert reject(store, artifact.id, "bob", "regresses TTFT").state is ArtifactState.REJECTED
    with pytest.raises(ReviewError, match="rejected"):
        approve(store, artifact.id, "alice", weights_hash=tiny.weights_hash, hardware=HERE)


def test_from_battery_to_approval(tmp_path, tiny, candidate_file):
    config = BatteryConfig(
        block_size=8, only=("equivalence.logits", "contamination.needle", "integrity.canary")
    )
    good, bad = candidate_file("fused"), candidate_file("sloppy")
    store = ArtifactStore(tmp_path)
    for cand in (good, bad):
        create_artifact(
            cand, verify_candidate(cand, tiny, config, seed=1, claimed_speedup=1.2), tiny, root=tmp_path
        )
    good_id, bad_id = (f"a-{c.hash[:10]}" for c in (good, bad))
    assert (
        approve(store, good_id, "alice", weights_hash=tiny.weights_hash, hardware=HERE).state
        is ArtifactState.APPROVED
    )
    with pytest.raises(ReviewError, match="did not pass verification"):
        approve(store, bad_id, "alice", weights_hash=tiny.weights_hash, hardware=HERE)
