"""Artifacts on disk: what a proposal holds, its lifecycle, the audit log, and the board mirror."""

from __future__ import annotations

import json

import pytest

from polyinfer.board import ApprovalAction, Board
from polyinfer.errors import ReviewError
from polyinfer.review import ArtifactState, ArtifactStore, Provenance, create_artifact
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.traffic.synth import SynthSpec, synthesize
from polyinfer.verify import Report

FILES = {
    "candidate.py",
    "knobs.json",
    "report.md",
    "report.json",
    "measurements.json",
    "diff.patch",
    "provenance.json",
    "artifact.json",
    "state.json",
    "audit.jsonl",
}
MEASURED = {"speedup": 1.5, "baseline": {"tok_s": 100.0}, "candidate": {"tok_s": 150.0}}


def test_a_proposal_holds_everything_a_reviewer_needs(tmp_path, tiny, tweaked, report_for):
    report = report_for(tweaked, tiny)
    artifact = create_artifact(tweaked, report, tiny, measurements=MEASURED, root=tmp_path, by="study-1")
    assert artifact.id == f"a-{tweaked.hash[:10]}" and artifact.state is ArtifactState.PROPOSED
    assert {p.name for p in artifact.path.iterdir()} >= FILES
    assert artifact.read("candidate.py") == tweaked.source
    assert json.loads(artifact.read("knobs.json")) == {"tile": 64}
    assert json.loads(artifact.read("measurements.json")) == MEASURED
    assert Report.from_json(artifact.read("report.json")) == report
    assert "PASSED" in artifact.read("report.md")
    diff = artifact.read("diff.patch")
    assert diff.startswith("--- a/reference.py") and "+# built for review tests" in diff
    provenance = Provenance.model_validate_json(artifact.read("provenance.json"))
    assert provenance.weights_hash == tiny.weights_hash and provenance.model_ref == "tiny-llama"
    assert provenance.hardware.kind == "cpu" and provenance.versions["torch"]
    assert provenance.spec["num_layers"] == tiny.spec.num_layers and provenance.workload is None
    meta = artifact.meta
    assert meta.verified and meta.speedup == 1.5 and meta.candidate_hash == tweaked.hash
    [entry] = ArtifactStore(tmp_path).audit(artifact.id)
    assert (entry.by, entry.from_state, entry.to_state) == ("study-1", None, ArtifactState.PROPOSED)


def test_provenance_records_the_workload_profile(tmp_path, tiny, tweaked, report_for):
    profile = WorkloadProfile.of(synthesize(SynthSpec(requests=20, seed=1)))
    artifact = create_artifact(tweaked, report_for(tweaked, tiny), tiny, profile=profile, root=tmp_path)
    recorded = ArtifactStore(tmp_path).provenance(artifact.id).workload
    assert recorded is not None and WorkloadProfile.model_validate(recorded) == profile


def test_ids_are_unique_and_found_by_prefix(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    first = store.create(tweaked, report_for(tweaked, tiny), tiny)
    second = store.create(tweaked, report_for(tweaked, tiny), tiny)
    assert second.id == first.id + "-2"
    assert [a.id for a in store.artifacts()] == [first.id, second.id]
    assert store.get(second.id).id == second.id
    with pytest.raises(ReviewError, match="several artifacts match"):
        store.get(first.id[:6])
    with pytest.raises(ReviewError, match="no artifact has that id"):
        store.get("a-nothing")
    with pytest.raises(ReviewError, match="not an artifact id"):
        store.get(f"../{tmp_path.name}/{first.id}")
    (tmp_path / "a-unfinished").mkdir()  # a creation cut off before artifact.json: not listed
    assert len(store.artifacts()) == 2


def test_lifecycle_is_enforced_and_every_move_is_audited(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path)
    artifact = store.create(tweaked, report_for(tweaked, tiny), tiny)
    with pytest.raises(ReviewError, match="can move to approved, rejected, not deployed"):
        store.transition(artifact.id, ArtifactState.DEPLOYED, "ops")
    with pytest.raises(ReviewError, match="who is acting"):
        store.transition(artifact.id, ArtifactState.APPROVED, " ")
    for to, by in [
        (ArtifactState.APPROVED, "alice"),
        (ArtifactState.DEPLOYED, "server-1"),
        (ArtifactState.RETIRED, "server-1"),
    ]:
        assert store.transition(artifact.id, to, by, note=f"to {to}").state is to
    assert store.get(artifact.id).state is ArtifactState.RETIRED
    with pytest.raises(ReviewError, match="final"):
        store.transition(artifact.id, ArtifactState.DEPLOYED, "ops")
    log = store.audit(artifact.id)
    assert [(e.from_state, e.to_state, e.by) for e in log[1:]] == [
        (ArtifactState.PROPOSED, ArtifactState.APPROVED, "alice"),
        (ArtifactState.APPROVED, ArtifactState.DEPLOYED, "server-1"),
        (ArtifactState.DEPLOYED, ArtifactState.RETIRED, "server-1"),
    ]
    assert [e.at for e in log] == sorted(e.at for e in log) and log[1].note == "to approved"


def test_moves_are_mirrored_on_a_board(tmp_path, tiny, tweaked, report_for):
    store = ArtifactStore(tmp_path / "artifacts")
    artifact = store.create(tweaked, report_for(tweaked, tiny), tiny)
    with Board.open(tmp_path / "board.db") as board:
        store.transition(artifact.id, ArtifactState.REJECTED, "bob", "too slow", board=board)
        [approval] = board.approvals(artifact.id)
    assert (approval.action, approval.by, approval.note) == (ApprovalAction.REJECT, "bob", "too slow")


def test_an_artifact_needs_the_report_of_its_own_candidate_and_model(tmp_path, tiny, tweaked, report_for):
    from polyinfer.engine.candidate import Candidate
    from polyinfer.models.load import load_model

    with pytest.raises(ReviewError, match="not this candidate"):
        create_artifact(tweaked, report_for(Candidate.reference(), tiny), tiny, root=tmp_path)
    with pytest.raises(ReviewError, match="other weights"):
        create_artifact(tweaked, report_for(tweaked, load_model("tiny-qwen2")), tiny, root=tmp_path)
    with pytest.raises(ReviewError, match="JSON"):
        create_artifact(tweaked, report_for(tweaked, tiny), tiny, measurements={"x": object()}, root=tmp_path)
