"""A study killed with SIGKILL at any moment resumes with every committed measurement and nothing
measured twice; readers in other processes take consistent snapshots while the writer writes."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

from polyinfer.board import Board, CandidateState

WORKER = Path(__file__).with_name("board_worker.py")


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(WORKER), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _kill_after(proc: subprocess.Popen[str], until: str, times: int) -> list[str]:
    """Read lines until `until` has started `times` lines, SIGKILL the process, return all it printed."""
    assert proc.stdout is not None
    lines: list[str] = []
    seen = 0
    while seen < times:
        line = proc.stdout.readline()
        assert line, f"worker exited early: {proc.communicate()[1]}"
        lines.append(line)
        seen += line.startswith(until)
    os.kill(proc.pid, signal.SIGKILL)
    rest, _ = proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    return lines + rest.splitlines(keepends=True)


def _integrity(path: Path) -> str:
    with sqlite3.connect(path) as db:
        return db.execute("PRAGMA integrity_check").fetchone()[0]


def _printed_measurements(lines: list[str]) -> dict[int, str]:
    return {int(w[1]): w[2] for w in (line.split() for line in lines) if w[0] == "measured"}


def _durable_measurements(board: Board) -> dict[int, str]:
    study = board.get_study("durability")
    assert study is not None
    candidates = board.snapshot(study.id).candidates
    return {m.id: m.candidate_hash for c in candidates for m in board.measurements(study.id, c.hash)}


def test_board_survives_kill_at_any_moment_and_resumes_without_remeasuring(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    rng = random.Random(0)
    printed: dict[int, str] = {}
    for _ in range(4):  # each run resumes what the killed one left
        printed |= _printed_measurements(
            _kill_after(_start("write", str(path)), "measured", rng.randint(2, 12))
        )
        assert _integrity(path) == "ok"
        with Board.open(path) as board:
            assert printed.items() <= _durable_measurements(board).items(), "a committed measurement was lost"
            study = board.get_study("durability")
            assert study is not None
            # At most the one candidate in flight was cut off, and it has no measurement to repeat.
            unfinished = board.snapshot(study.id).in_state(CandidateState.MEASURING, CandidateState.QUEUED)
            assert len(unfinished) <= 1
            assert all(board.measurements(study.id, c.hash) == () for c in unfinished)

    resumed = _start("write", str(path), "--count", "3")
    out, err = resumed.communicate(timeout=30)
    assert resumed.returncode == 0, err
    printed |= _printed_measurements(out.splitlines())
    with Board.open(path) as board:
        durable = _durable_measurements(board)
        study = board.get_study("durability")
        assert study is not None
        snap = board.snapshot(study.id)
    assert printed.items() <= durable.items()
    assert Counter(durable.values()) == Counter({c.hash: 1 for c in snap.candidates}), "measured twice"
    assert all(c.state is CandidateState.MEASURED for c in snap.candidates)


def test_recover_requeues_the_candidate_whose_measurement_was_cut_off(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    lines = _kill_after(_start("write", str(path), "--stall-after", "3"), "measuring", 4)
    stalled = lines[-1].split()[1]
    assert _integrity(path) == "ok"
    with Board.open(path) as board:
        study = board.get_study("durability")
        assert study is not None
        assert board.candidate(study.id, stalled).state is CandidateState.MEASURING  # type: ignore[union-attr]
        assert set(board.measured_hashes(study.id, "fast")) == set(_printed_measurements(lines).values())
        assert [c.hash for c in board.recover(study.id)] == [stalled]
        assert [c.hash for c in board.pending_candidates(study.id)] == [stalled]
        assert board.recover(study.id) == ()


def test_reader_process_takes_consistent_snapshots_while_writer_writes(tmp_path: Path) -> None:
    path = tmp_path / "board.db"
    with Board.open(path) as board:
        board.create_study("durability")
    writer = _start("write", str(path))  # until killed
    reader = _start("read", str(path), "--seconds", "2")
    out, err = reader.communicate(timeout=60)
    writer.kill()
    writer.communicate()
    assert reader.returncode == 0, err
    assert "locked" not in err
    _, snapshots, _, distinct = out.split()
    assert int(snapshots) >= 20
    assert int(distinct) >= 3, "the reader never saw the writer's progress"
