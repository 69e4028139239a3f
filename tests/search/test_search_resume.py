"""`polyinfer optimize` killed with SIGKILL mid-study resumes from the board: every finished measurement
is kept and no candidate is measured twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from polyinfer.board import Board


def optimize(tmp_path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "POLYINFER_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "polyinfer.cli", "optimize", "--model", "tiny-llama", "--study", "resume-me",
           "--board", str(tmp_path / "board.db"), "--max-requests", "4", "--max-len", "32", "--json", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def fast_measurements(tmp_path) -> list[tuple[int, str]]:
    with Board.open(tmp_path / "board.db") as board:
        study = board.get_study("resume-me")
        if study is None:
            return []
        return [(m.id, m.candidate_hash) for v in board.snapshot(study.id).candidates
                for m in board.measurements(study.id, v.hash) if m.tier == "fast"]


@pytest.mark.slow
def test_kill_9_then_resume(tmp_path):
    first = optimize(tmp_path, "--budget", "300s")
    deadline = time.monotonic() + 240
    while len(fast_measurements(tmp_path)) < 3 and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.3)
    os.killpg(first.pid, signal.SIGKILL)  # the CLI and its engine workers, mid-study
    first.wait()
    before = fast_measurements(tmp_path)
    assert len(before) >= 3

    second = optimize(tmp_path, "--budget", "20s")
    out, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    after = fast_measurements(tmp_path)
    assert set(before) <= set(after)  # nothing lost
    assert max(Counter(h for _, h in after).values()) == 1  # nothing measured twice
    assert result["study"] == "resume-me" and result["experiments"] >= 1
    if "artifact" in result:  # a winner was verified: the JSON names every check that failed, and why
        assert result["verified"] == (result["verify_failures"] == {})
    with Board.open(tmp_path / "board.db") as board:
        study = board.get_study("resume-me")
        assert study is not None and str(study.state) == "finished"
