"""`polyinfer review | approve | reject` end to end, and their refusals (one line, exit 2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from polyinfer.cli import main as entry_point
from polyinfer.review import ArtifactState, ArtifactStore, create_artifact


def main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`polyinfer ARGS` through the real entry point, in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["polyinfer", *args])
    with pytest.raises(SystemExit) as exit_:
        entry_point()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, " ".join(out.err.split())


@pytest.fixture
def proposals(tmp_path, tiny, tweaked, report_for, candidate_file):
    """Two proposals under tmp_path: a verified one and one that failed verification."""
    good = create_artifact(
        tweaked,
        report_for(tweaked, tiny),
        tiny,
        root=tmp_path,
        measurements={"speedup": 1.5, "candidate": {"tok_s": 150.0}},
    )
    sloppy = candidate_file("sloppy")
    bad = create_artifact(sloppy, report_for(sloppy, tiny, passed=False), tiny, root=tmp_path)
    return good, bad


def test_review_shows_report_measurements_diff_and_audit(tmp_path, proposals):
    good, _ = proposals
    env = {**os.environ, "COLUMNS": "160"}
    out = subprocess.run(
        [sys.executable, "-m", "polyinfer.cli", "review", good.id[:8], "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Verification of tweaked" in text and "equivalence.logits" in text  # the report
    assert "candidate.tok_s" in text and "150" in text  # the measurements
    assert "+# built for review tests" in text  # the diff
    assert "proposed" in text and f"polyinfer approve {good.id}" in text  # the audit log and what to do


def test_review_lists_artifacts(monkeypatch, capsys, tmp_path, proposals):
    code, out, _ = main(monkeypatch, capsys, "review", "--root", str(tmp_path), "--json")
    assert code == 0
    listed = {a["id"]: a for a in json.loads(out)}
    assert {a.id for a in proposals} == set(listed)
    assert listed[proposals[0].id]["verified"] and not listed[proposals[1].id]["verified"]


def test_approve_and_reject(monkeypatch, capsys, tmp_path, proposals):
    good, bad = proposals
    code, out, err = main(
        monkeypatch, capsys, "approve", good.id, "--by", "alice", "--note", "ok", "--root", str(tmp_path)
    )
    assert code == 0 and f"approved {good.id} by alice" in out, err
    code, out, _ = main(
        monkeypatch, capsys, "reject", bad.id, "--by", "bob", "--note", "sloppy", "--root", str(tmp_path)
    )
    assert code == 0 and f"rejected {bad.id}" in out
    store = ArtifactStore(tmp_path)
    assert [store.get(a.id).state for a in proposals] == [ArtifactState.APPROVED, ArtifactState.REJECTED]
    assert store.audit(good.id)[-1].by == "alice"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["approve", "{bad}", "--by", "alice"], "did not pass verification"),
        (["approve", "{good}", "--by", "alice", "--model", "tiny-qwen2"], "stale: the model changed"),
        (["approve", "a-nothing", "--by", "alice"], "no artifact has that id"),
        (["approve", "{good}", "--by", ""], "who is acting"),
        (["reject", "{good}", "--by", "bob", "--note", ""], "needs a note"),
        (["review", "a-nothing"], "no artifact has that id"),
    ],
)
def test_refusals_are_one_clear_line(monkeypatch, capsys, tmp_path, proposals, args, needle):
    ids = {"good": proposals[0].id, "bad": proposals[1].id}
    code, _, err = main(monkeypatch, capsys, *[a.format(**ids) for a in args], "--root", str(tmp_path))
    assert code == 2 and needle in err and "Traceback" not in err
    assert [ArtifactStore(tmp_path).get(a.id).state for a in proposals] == [ArtifactState.PROPOSED] * 2


def test_reject_without_a_note_is_a_usage_error(monkeypatch, capsys, tmp_path, proposals):
    code, _, err = main(
        monkeypatch, capsys, "reject", proposals[0].id, "--by", "bob", "--root", str(tmp_path)
    )
    assert code == 2 and "--note" in err
