"""ArtifactStore: one directory per proposal under a root, the source of truth for the review gate.

    <root>/<id>/candidate.py        the candidate's source
               knobs.json          its knobs
               report.md, .json    the verification report
               measurements.json   the measurements against the baseline
               diff.patch          unified diff against the reference candidate
               provenance.json     model and weights hash, workload profile, hardware, library versions
               artifact.json       the immutable facts (written last: a directory without it is unfinished)
               state.json          the current state
               audit.jsonl         every state change, append-only

The root is `$POLYINFER_HOME/artifacts` (default `~/.cache/polyinfer/artifacts`) unless given. State
changes take a lock on the artifact, so two reviewers acting at once cannot both move it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from polyinfer.board.board import Board
from polyinfer.engine.candidate import Candidate
from polyinfer.errors import ReviewError
from polyinfer.models.default import polyinfer_home
from polyinfer.models.load import LoadedModel
from polyinfer.review.artifact import (
    BOARD_ACTIONS,
    TRANSITIONS,
    Artifact,
    ArtifactMeta,
    ArtifactState,
    AuditEntry,
)
from polyinfer.review.diff import reference_diff
from polyinfer.review.provenance import Provenance
from polyinfer.traffic.profile import WorkloadProfile
from polyinfer.verify.report import Report


def default_root() -> Path:
    return polyinfer_home() / "artifacts"


class ArtifactStore:
    def __init__(self, root: Path | str | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()

    def create(
        self,
        candidate: Candidate,
        report: Report,
        model: LoadedModel,
        *,
        measurements: Mapping[str, Any] | None = None,
        profile: WorkloadProfile | None = None,
        by: str = "polyinfer",
    ) -> Artifact:
        """Write a proposed artifact for `candidate`, verified by `report` against `model`."""
        if report.candidate_hash != candidate.hash:
            raise ReviewError(
                f"the report verified {report.candidate_hash}, not this candidate ({candidate.hash})"
            )
        if report.weights_hash != model.weights_hash:
            raise ReviewError("the report was made against other weights than the model given")
        try:
            measured = json.dumps(dict(measurements or {}), indent=2, sort_keys=True)
        except (TypeError, ValueError) as e:
            raise ReviewError(f"measurements must be JSON values: {e}") from None
        path = self._reserve(f"a-{candidate.hash[:10]}")
        provenance = Provenance.collect(model, report.dtype, report.device, profile)
        files = {
            "candidate.py": candidate.source,
            "knobs.json": json.dumps(dict(candidate.knobs), indent=2, sort_keys=True),
            "report.md": report.to_markdown(),
            "report.json": report.to_json(),
            "measurements.json": measured,
            "diff.patch": reference_diff(candidate),
            "provenance.json": provenance.model_dump_json(indent=2),
        }
        for name, text in files.items():
            _write(path / name, text)
        now = time.time()
        _append(
            path / "audit.jsonl", AuditEntry(at=now, by=by, from_state=None, to_state=ArtifactState.PROPOSED)
        )
        _write(path / "state.json", json.dumps({"state": ArtifactState.PROPOSED.value, "at": now}))
        meta = ArtifactMeta(
            id=path.name,
            candidate_hash=candidate.hash,
            candidate_name=candidate.name,
            created_at=now,
            verified=report.passed,
            failed_checks=report.failed,
            speedup=report.speedup,
            model=model.source,
            device=report.device,
            dtype=report.dtype,
        )
        _write(path / "artifact.json", meta.model_dump_json(indent=2))
        return Artifact(meta=meta, state=ArtifactState.PROPOSED, path=path)

    def get(self, artifact_id: str) -> Artifact:
        """The artifact with this id (or unique id prefix)."""
        if Path(artifact_id).name != artifact_id:
            raise ReviewError(f"{artifact_id!r} is not an artifact id (ids look like a-0123456789)")
        path = self.root / artifact_id
        if not (path / "artifact.json").is_file():
            matches = [p for p in self._dirs() if p.name.startswith(artifact_id)] if artifact_id else []
            if len(matches) != 1:
                found = "several artifacts match" if matches else "no artifact has that id"
                raise ReviewError(
                    f"{found}: {artifact_id!r} under {self.root}; `polyinfer review` lists them"
                )
            path = matches[0]
        meta = ArtifactMeta.model_validate_json((path / "artifact.json").read_text())
        state = ArtifactState(json.loads((path / "state.json").read_text())["state"])
        return Artifact(meta=meta, state=state, path=path)

    def artifacts(self) -> list[Artifact]:
        """Every finished artifact, oldest first."""
        return sorted((self.get(p.name) for p in self._dirs()), key=lambda a: a.meta.created_at)

    def audit(self, artifact_id: str) -> list[AuditEntry]:
        lines = self.get(artifact_id).read("audit.jsonl").splitlines()
        return [AuditEntry.model_validate_json(line) for line in lines if line.strip()]

    def provenance(self, artifact_id: str) -> Provenance:
        return Provenance.model_validate_json(self.get(artifact_id).read("provenance.json"))

    def transition(
        self, artifact_id: str, to: ArtifactState, by: str, note: str = "", board: Board | None = None
    ) -> Artifact:
        """Move the artifact to `to` if its lifecycle allows, logging who and why; mirrored on `board`."""
        if not by.strip():
            raise ReviewError("say who is acting (--by NAME)")
        path = self.get(artifact_id).path
        with _locked(path):
            artifact = self.get(path.name)
            if to not in TRANSITIONS[artifact.state]:
                allowed = ", ".join(sorted(TRANSITIONS[artifact.state])) or "nothing (final)"
                raise ReviewError(
                    f"artifact {artifact.id} is {artifact.state}; it can move to {allowed}, not {to}"
                )
            now = time.time()
            _append(
                path / "audit.jsonl",
                AuditEntry(at=now, by=by, from_state=artifact.state, to_state=to, note=note),
            )
            _write(path / "state.json", json.dumps({"state": to.value, "at": now}))
        if board is not None:
            board.record_approval(artifact.id, BOARD_ACTIONS[to], by, note)
        return artifact.model_copy(update={"state": to})

    def _reserve(self, base: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        for n in range(1, 1000):
            path = self.root / (base if n == 1 else f"{base}-{n}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
        raise ReviewError(f"too many artifacts for one candidate under {self.root}")

    def _dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if (p / "artifact.json").is_file()]


def create_artifact(
    candidate: Candidate,
    report: Report,
    model: LoadedModel,
    *,
    measurements: Mapping[str, Any] | None = None,
    profile: WorkloadProfile | None = None,
    root: Path | str | None = None,
    by: str = "polyinfer",
) -> Artifact:
    """Leave a proposed artifact for review (what `polyinfer optimize` ends with)."""
    return ArtifactStore(root).create(
        candidate, report, model, measurements=measurements, profile=profile, by=by
    )


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _append(path: Path, entry: AuditEntry) -> None:
    with path.open("a") as f:
        f.write(entry.model_dump_json() + "\n")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with (path / ".lock").open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
