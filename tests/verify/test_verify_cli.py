"""`polyinfer verify` end to end: exit 0 on a pass, 1 on a failure, 2 with one clear line on bad input.

One test runs the real command in a subprocess (which runs the battery in a worker process); the rest
call the same entry point in-process, since each interpreter start costs seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyinfer.cli import main as entry_point

CANDIDATES = Path(__file__).parent / "candidates"
FAST = ("--model", "tiny-llama", "--block-size", "8", "--seed", "3")


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "polyinfer.cli", *args], capture_output=True, text=True, timeout=300, env=env
    )


def test_verify_passes_an_honest_candidate_in_a_worker_and_prints_json():
    out = cli("verify", str(CANDIDATES / "fused.py"), *FAST, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["passed"] and report["candidate_name"] == "fused" and report["seed"] == 3
    assert report["seconds"] > 0 and {c["name"] for c in report["checks"]} >= {
        "integrity.canary",
        "contamination.needle",
    }


def main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """`polyinfer ARGS` through the real entry point, in this process: (exit status, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["polyinfer", *args])
    with pytest.raises(SystemExit) as exit_:
        entry_point()
    out = capsys.readouterr()
    return int(exit_.value.code or 0), out.out, out.err


def test_verify_fails_a_sloppy_candidate_and_says_why(monkeypatch, capsys):
    code, out, _ = main(
        monkeypatch,
        capsys,
        "verify",
        str(CANDIDATES / "sloppy.py"),
        *FAST,
        "--in-process",
        "--only",
        "equivalence.logits",
    )
    assert code == 1
    assert "FAILED" in out and "relative logits error" in out


def test_a_bfloat16_battery_prints_its_calibrated_tolerance(monkeypatch, capsys):
    code, out, _ = main(monkeypatch, capsys, "verify", "reference", *FAST, "--dtype", "bfloat16", "--in-process",
                        "--only", "equivalence.logits")
    assert code == 0
    assert "logits tolerance" in out and "own bfloat16 error against float32" in out


def test_exact_mode_from_the_cli(monkeypatch, capsys):
    code, out, err = main(
        monkeypatch,
        capsys,
        "verify",
        "reference",
        *FAST,
        "--exact",
        "--in-process",
        "--only",
        "equivalence.exact",
        "--json",
    )
    assert code == 0, err
    assert [c["name"] for c in json.loads(out)["checks"]] == ["equivalence.exact", "integrity.hash"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope.py"], "no candidate file"),
        (["no_such_builtin"], "no built-in candidate"),
        (["reference", "--only", "equivalence.nope"], "unknown check"),
        (["reference", "--dtype", "float8"], "unknown dtype"),
        (["reference", "--block-size", "12"], "power of two"),
        (["reference", "--knobs", "[1]"], "JSON object"),
        (["reference", "--model", "no-such-model", "--in-process"], "unknown model"),
    ],
)
def test_bad_input_is_one_clear_line(args, needle, monkeypatch, capsys):
    code, out, err = main(monkeypatch, capsys, "verify", *args)
    assert code == 2, out
    assert needle in " ".join(err.split()) and "Traceback" not in err
