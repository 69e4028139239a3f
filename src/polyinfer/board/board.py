"""Board: the experiment store and the agents' message board, and the only writer of study state.

Every write method is one transaction, committed before it returns; a process killed at any moment
leaves the board exactly as of its last returned write. Facts that must agree are written together:
a measurement and its candidate's move to MEASURED commit as one, so a kill can never leave a
measured candidate that looks unmeasured. On resume, `recover` re-queues the candidates whose
measurement was cut off (their partial measurement was never written), so nothing finished is
measured again and nothing unfinished is lost.

Readers work from `snapshot`, one transaction's consistent view. A Board may be shared between threads.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import DBAPIError

from polyinfer.board import queries, schema
from polyinfer.board.database import open_engine, transaction
from polyinfer.board.records import (
    TRANSITIONS,
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
from polyinfer.board.schema import encode_json
from polyinfer.board.snapshot import BoardSnapshot, build_snapshot
from polyinfer.errors import BoardError

_FINAL_FOR_MEASUREMENT = (CandidateState.FAILED, CandidateState.REJECTED)


class Board:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @classmethod
    def open(cls, target: str | Path) -> Board:
        """Open (creating if missing) the board at a SQLAlchemy URL or a SQLite file path."""
        engine = open_engine(target)
        try:
            with transaction(engine, write=True) as conn:
                schema.ensure_schema(conn)
        except DBAPIError as e:
            engine.dispose()
            raise BoardError(f"cannot open the board at {target}: {e.orig}") from None
        return cls(engine)

    @property
    def url(self) -> str:
        return self._engine.url.render_as_string(hide_password=True)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> Board:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Studies.

    def create_study(self, name: str, config: Mapping[str, Any] | None = None) -> Study:
        config = dict(config or {})
        encode_json(config, "a study's config")
        with self._write() as conn:
            if conn.scalar(select(schema.studies.c.id).where(schema.studies.c.name == name)) is not None:
                raise BoardError(f"a study named {name!r} already exists; resume it or choose another name")
            row = queries.insert_row(
                conn,
                schema.studies,
                name=name,
                created_at=time.time(),
                config=config,
                state=StudyState.RUNNING.value,
            )
            return Study(**row)

    def get_study(self, name: str) -> Study | None:
        with self._read() as conn:
            row = conn.execute(select(schema.studies).where(schema.studies.c.name == name)).mappings().first()
            return None if row is None else Study(**row)

    def studies(self) -> tuple[Study, ...]:
        with self._read() as conn:
            rows = conn.execute(select(schema.studies).order_by(schema.studies.c.id)).mappings()
            return tuple(Study(**r) for r in rows)

    def set_study_state(self, study_id: int, state: StudyState) -> Study:
        with self._write() as conn:
            queries.study(conn, study_id)
            t = schema.studies
            stmt = update(t).where(t.c.id == study_id).values(state=str(state)).returning(*t.c)
            return Study(**conn.execute(stmt).mappings().one())

    # Candidates.

    def add_candidate(
        self,
        study_id: int,
        hash: str,
        *,
        name: str,
        source: str,
        knobs: Mapping[str, Any],
        generator: str,
        parent_hash: str | None = None,
    ) -> bool:
        """Queue a candidate; False (and nothing written) if the study already has this hash."""
        encode_json(knobs, "a candidate's knobs")
        with self._write() as conn:
            queries.study(conn, study_id)
            if queries.find_candidate(conn, study_id, hash) is not None:
                return False
            row = queries.insert_row(
                conn,
                schema.candidates,
                study_id=study_id,
                hash=hash,
                name=name,
                source=source,
                knobs=knobs,
                parent_hash=parent_hash,
                generator=generator,
                state=CandidateState.QUEUED.value,
                created_at=time.time(),
                error=None,
            )
            CandidateRecord(**row)  # validates; a bad record raises and the insert rolls back
            return True

    def set_candidate_state(
        self, study_id: int, hash: str, state: CandidateState, *, error: str | None = None
    ) -> CandidateRecord:
        """Move a candidate along its lifecycle (`records.TRANSITIONS`); `error` says why it failed."""
        state = CandidateState(state)
        with self._write() as conn:
            current = queries.candidate(conn, study_id, hash)
            if state not in TRANSITIONS[current.state]:
                raise BoardError(f"candidate {hash} cannot go from {current.state} to {state}")
            return queries.move(conn, current, state, error)

    def recover(self, study_id: int) -> tuple[CandidateRecord, ...]:
        """Re-queue the candidates left MEASURING by a process that died; returns them."""
        t = schema.candidates
        with self._write() as conn:
            queries.study(conn, study_id)
            stmt = (
                update(t)
                .where(t.c.study_id == study_id, t.c.state == CandidateState.MEASURING.value)
                .values(state=CandidateState.QUEUED.value)
                .returning(*t.c)
            )
            requeued = (CandidateRecord(**r) for r in conn.execute(stmt).mappings())
            return tuple(sorted(requeued, key=lambda c: (c.created_at, c.hash)))

    def candidate(self, study_id: int, hash: str) -> CandidateRecord | None:
        with self._read() as conn:
            return queries.find_candidate(conn, study_id, hash)

    def pending_candidates(self, study_id: int) -> tuple[CandidateRecord, ...]:
        """The queued candidates, oldest first: what a resumed study measures next."""
        t = schema.candidates
        with self._read() as conn:
            rows = conn.execute(
                select(t)
                .where(t.c.study_id == study_id, t.c.state == CandidateState.QUEUED.value)
                .order_by(t.c.created_at, t.c.hash)
            ).mappings()
            return tuple(CandidateRecord(**r) for r in rows)

    def measured_hashes(self, study_id: int, tier: str) -> frozenset[str]:
        t = schema.measurements
        with self._read() as conn:
            rows = conn.execute(select(t.c.candidate_hash).where(t.c.study_id == study_id, t.c.tier == tier))
            return frozenset(rows.scalars())

    # Measurements and verdicts.

    def record_measurement(
        self,
        study_id: int,
        candidate_hash: str,
        *,
        tier: str,
        metrics: Mapping[str, Any],
        repetitions: int,
        ratio_to_incumbent: float | None = None,
        ci_low: float | None = None,
        ci_high: float | None = None,
        timings: Mapping[str, float] | None = None,
    ) -> Measurement:
        """Record a finished measurement; a QUEUED or MEASURING candidate becomes MEASURED with it."""
        timings = dict(timings or {})
        encode_json(metrics, "a measurement's metrics")
        encode_json(timings, "a measurement's timings")
        with self._write() as conn:
            candidate = queries.candidate(conn, study_id, candidate_hash)
            if candidate.state in _FINAL_FOR_MEASUREMENT:
                raise BoardError(f"candidate {candidate_hash} is {candidate.state}; it is not measured again")
            row = queries.insert_row(
                conn,
                schema.measurements,
                study_id=study_id,
                candidate_hash=candidate_hash,
                tier=tier,
                metrics=metrics,
                ratio_to_incumbent=ratio_to_incumbent,
                ci_low=ci_low,
                ci_high=ci_high,
                repetitions=repetitions,
                timings=timings,
                created_at=time.time(),
            )
            measurement = Measurement(**row)
            if candidate.state in (CandidateState.QUEUED, CandidateState.MEASURING):
                queries.move(conn, candidate, CandidateState.MEASURED, None)
            return measurement

    def measurements(self, study_id: int, candidate_hash: str) -> tuple[Measurement, ...]:
        with self._read() as conn:
            return tuple(
                Measurement(**r) for r in queries.facts(conn, schema.measurements, study_id, candidate_hash)
            )

    def record_verdict(
        self,
        study_id: int,
        candidate_hash: str,
        *,
        check: str,
        passed: bool,
        details: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> Verdict:
        details = dict(details or {})
        encode_json(details, "a verdict's details")
        with self._write() as conn:
            queries.candidate(conn, study_id, candidate_hash)
            row = queries.insert_row(
                conn,
                schema.verdicts,
                study_id=study_id,
                candidate_hash=candidate_hash,
                check=check,
                passed=passed,
                details=details,
                seed=seed,
                created_at=time.time(),
            )
            return Verdict(**row)

    def verdicts(self, study_id: int, candidate_hash: str) -> tuple[Verdict, ...]:
        with self._read() as conn:
            return tuple(Verdict(**r) for r in queries.facts(conn, schema.verdicts, study_id, candidate_hash))

    # The message board.

    def post(self, study_id: int, agent: str, kind: str, text: str, refs: Sequence[str] = ()) -> Post:
        with self._write() as conn:
            queries.study(conn, study_id)
            row = queries.insert_row(
                conn,
                schema.posts,
                study_id=study_id,
                agent=agent,
                kind=kind,
                text=text,
                refs=list(refs),
                created_at=time.time(),
            )
            return Post(**row)

    def posts(self, study_id: int, limit: int = 50) -> tuple[Post, ...]:
        """The `limit` most recent posts, oldest first."""
        with self._read() as conn:
            return queries.recent_posts(conn, study_id, limit)

    # Review and serving.

    def record_approval(
        self, artifact_id: str, action: ApprovalAction | str, by: str, note: str = ""
    ) -> Approval:
        """Append to the artifact's audit trail; `action` is checked against `ApprovalAction`."""
        with self._write() as conn:
            row = queries.insert_row(
                conn,
                schema.approvals,
                artifact_id=artifact_id,
                action=str(action),
                by=by,
                note=note,
                created_at=time.time(),
            )
            return Approval(**row)

    def approvals(self, artifact_id: str) -> tuple[Approval, ...]:
        """The artifact's audit trail, oldest first."""
        t = schema.approvals
        with self._read() as conn:
            rows = conn.execute(select(t).where(t.c.artifact_id == artifact_id).order_by(t.c.id)).mappings()
            return tuple(Approval(**r) for r in rows)

    def record_deployment(self, artifact_id: str, server: str) -> Deployment:
        """The server now runs the artifact; whatever it ran before ends in the same transaction."""
        t = schema.deployments
        now = time.time()
        with self._write() as conn:
            conn.execute(update(t).where(t.c.server == server, t.c.ended_at.is_(None)).values(ended_at=now))
            return Deployment(
                **queries.insert_row(conn, t, artifact_id=artifact_id, server=server, started_at=now)
            )

    def end_deployment(self, deployment_id: int) -> Deployment:
        t = schema.deployments
        with self._write() as conn:
            stmt = (
                update(t)
                .where(t.c.id == deployment_id, t.c.ended_at.is_(None))
                .values(ended_at=time.time())
                .returning(*t.c)
            )
            row = conn.execute(stmt).mappings().first()
            if row is None:
                raise BoardError(f"no deployment {deployment_id} is running")
            return Deployment(**row)

    def deployments(self, server: str | None = None) -> tuple[Deployment, ...]:
        """Deployments (of one server, or all), oldest first; the running ones have no `ended_at`."""
        t = schema.deployments
        query = select(t).order_by(t.c.id)
        if server is not None:
            query = query.where(t.c.server == server)
        with self._read() as conn:
            return tuple(Deployment(**r) for r in conn.execute(query).mappings())

    # Snapshots.

    def snapshot(self, study_id: int, posts: int = 50) -> BoardSnapshot:
        """The study as one consistent, immutable view, with its `posts` most recent posts."""
        c, m, v = schema.candidates, schema.measurements, schema.verdicts
        with self._read() as conn:
            study = queries.study(conn, study_id)
            taken_at = time.time()
            candidates = conn.execute(
                select(c).where(c.c.study_id == study_id).order_by(c.c.created_at, c.c.hash)
            ).mappings()
            records = [CandidateRecord(**r) for r in candidates]
            measurements = conn.execute(select(m).where(m.c.study_id == study_id).order_by(m.c.id)).mappings()
            measured = [Measurement(**r) for r in measurements]
            verdicts = conn.execute(select(v).where(v.c.study_id == study_id).order_by(v.c.id)).mappings()
            checked = [Verdict(**r) for r in verdicts]
            recent = queries.recent_posts(conn, study_id, posts)
        return build_snapshot(study, records, measured, checked, recent, taken_at)

    def _write(self) -> AbstractContextManager[Connection]:
        return transaction(self._engine, write=True)

    def _read(self) -> AbstractContextManager[Connection]:
        return transaction(self._engine, write=False)
