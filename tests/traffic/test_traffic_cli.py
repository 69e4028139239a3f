"""`polyinfer traffic` end to end, through the real entry point in a subprocess."""

import json
import subprocess
import sys

import pytest

from polyinfer.traffic.formats import load_trace


def polyinfer(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "polyinfer.cli", "traffic", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def chat(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "chat.jsonl"
    run = polyinfer(
        "synth",
        "--requests",
        300,
        "--arrival",
        "gamma",
        "--cv",
        2,
        "--scale",
        0.1,
        "--max-len",
        256,
        "--turns",
        2,
        "--seed",
        3,
        "-o",
        path,
    )
    assert run.returncode == 0, run.stderr
    return path


def test_synth_writes_a_trace_the_options_describe(chat):
    trace = load_trace(chat)
    assert trace.format == "polyinfer" and trace.name == "chat-seed3" and len(trace) == 300
    assert all(r.input_len + r.output_len <= 256 and r.session for r in trace.requests)


def test_profile_json_and_drift_against_a_saved_profile(chat, tmp_path):
    run = polyinfer("profile", chat, "--json")
    assert run.returncode == 0, run.stderr
    profile = json.loads(run.stdout)
    assert profile["requests"] == 300 and profile["sessions"] > 100 and profile["interarrival_cv"] > 1.3
    (tmp_path / "baseline.json").write_text(run.stdout)
    other = tmp_path / "other.jsonl"
    assert polyinfer("synth", "--requests", 300, "--input-median", 2000, "-o", other).returncode == 0
    drift = polyinfer("drift", tmp_path / "baseline.json", other, "--json")
    assert drift.returncode == 0, drift.stderr
    assert json.loads(drift.stdout)["drifted"] is True
    table = polyinfer("drift", chat, chat)
    assert table.returncode == 0 and "within threshold" in table.stdout


def test_bad_input_is_one_clear_line_and_exit_2(tmp_path):
    bad = tmp_path / "azure.csv"
    bad.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,12,x\n")
    run = polyinfer("profile", bad)
    assert run.returncode == 2
    message = " ".join(run.stderr.split())  # rich wraps long lines
    assert f"{bad}:2: field 'GeneratedTokens' is not a whole number" in message
    assert "Traceback" not in run.stderr
    conflicting = polyinfer("synth", "--requests", 5, "--duration", 5, "-o", tmp_path / "x.jsonl")
    assert conflicting.returncode == 2 and "not both" in conflicting.stderr
