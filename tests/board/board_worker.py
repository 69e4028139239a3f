"""A study-like process for the durability tests: `write` measures candidates the way a study does
(resuming whatever the board holds), `read` takes snapshots and checks each one is consistent.

    python board_worker.py write BOARD [--count N] [--stall-after N]
    python board_worker.py read BOARD --seconds S

The writer prints `measuring HASH` once a candidate is claimed and `measured ID HASH` once its
measurement is committed, flushing each line, so the test knows exactly what was durable when it
killed the process.
"""

from __future__ import annotations

import argparse
import time

from polyinfer.board import Board, CandidateState

STUDY = "durability"


def write(board: Board, count: int | None, stall_after: int | None) -> None:
    study = board.get_study(STUDY) or board.create_study(STUDY, {"model": "preset:tiny"})
    recovered = board.recover(study.id)
    print("recovered", *(c.hash for c in recovered), flush=True)
    proposed = len(board.snapshot(study.id, posts=0).candidates)
    measured = 0
    while count is None or measured < count:
        pending = board.pending_candidates(study.id)
        if pending:
            hash = pending[0].hash
        else:
            hash = f"{proposed:016x}"
            proposed += 1
            board.add_candidate(
                study.id, hash, name="c", source="src", knobs={"i": proposed}, generator="test"
            )
        board.set_candidate_state(study.id, hash, CandidateState.MEASURING)
        print("measuring", hash, flush=True)
        if measured == stall_after:
            time.sleep(600)  # a measurement that never finishes: the test kills us here
        m = board.record_measurement(
            study.id,
            hash,
            tier="fast",
            metrics={"tok_s": 100.0 + measured},
            repetitions=3,
            ratio_to_incumbent=1.0,
        )
        print("measured", m.id, hash, flush=True)
        measured += 1


def read(board: Board, seconds: float) -> None:
    while (study := board.get_study(STUDY)) is None:
        time.sleep(0.01)
    deadline = time.monotonic() + seconds
    snapshots, last = 0, -1
    progress = set()
    while time.monotonic() < deadline:
        snap = board.snapshot(study.id)
        for c in snap.candidates:
            # The writer commits a measurement and the move to MEASURED together; a snapshot read in
            # several transactions could see one without the other.
            assert bool(c.best) == (c.state is CandidateState.MEASURED), (c.hash, c.state, dict(c.best))
        done = sum(1 for c in snap.candidates if c.best)
        assert done >= last, f"measurements went backwards: {last} -> {done}"
        last = done
        progress.add(done)
        snapshots += 1
    print("snapshots", snapshots, "distinct", len(progress), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["write", "read"])
    parser.add_argument("board")
    parser.add_argument("--count", type=int)
    parser.add_argument("--stall-after", type=int)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()
    with Board.open(args.board) as board:
        if args.mode == "write":
            write(board, args.count, args.stall_after)
        else:
            read(board, args.seconds)


if __name__ == "__main__":
    main()
