"""`polyinfer bench` end to end, through the real entry point in a subprocess."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from bench.workloads import small_trace
from polyinfer.cli import main
from polyinfer.cli.bench import ReplayBar
from polyinfer.engine.candidate import Candidate
from polyinfer.errors import PolyinferError
from polyinfer.traffic.formats.native import write_trace


def polyinfer(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "polyinfer.cli", "bench", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("bench") / "small.jsonl"
    write_trace(small_trace(5), path)
    return path


def test_full_tier_json(trace_file):
    run = polyinfer(
        "--model", "tiny-llama", "--traffic", trace_file, "--tier", "full", "--json", "--slo", "ttft=10s"
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert (out["tier"], out["requests"]) == ("full", 5)
    m = out["result"]
    assert m["requests"] == 5 and m["output_tokens"] == sum(r.output_len for r in small_trace(5).requests)
    assert m["slo"]["ttft_ms"] == 10_000 and set(m["ttft"]) == {"mean_ms", "p50_ms", "p90_ms", "p99_ms"}


def test_fast_tier_comparison_json_on_a_preset_workload():
    run = polyinfer(
        "--model",
        "tiny-llama",
        "--traffic",
        "chat",
        "--max-requests",
        16,
        "--max-len",
        64,
        "--tier",
        "fast",
        "--candidate",
        "reference",
        "--rounds",
        3,
        "--reps",
        3,
        "--margin",
        0.5,
        "--json",
    )
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)["result"]
    assert result["comparison"]["verdict"] == "same" and len(result["comparison"]["ratios"]) == 3
    assert result["candidate"]["full_layers"] == 3 and result["candidate"]["prediction"]["output_tok_s"] > 0


def test_bad_input_is_one_clear_line():
    run = polyinfer("--model", "tiny-llama", "--traffic", "no-such-trace")
    assert run.returncode == 2
    assert "neither a trace file nor a preset" in run.stderr and "Traceback" not in run.stderr


def in_process(monkeypatch, capsys, *args: object) -> tuple[int, str, str]:
    """The entry point in this process (no interpreter start): exit status, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["polyinfer", "bench", *map(str, args)])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with pytest.raises(SystemExit) as exit:
        main()
    captured = capsys.readouterr()
    return exit.value.code or 0, captured.out, captured.err


def test_table_output(trace_file, monkeypatch, capsys):
    code, out, err = in_process(
        monkeypatch, capsys, "--model", "tiny-llama", "--traffic", trace_file, "--reps", 2, "--rounds", 1
    )
    assert code == 0, err
    assert "predicted at 3 layers" in out and "score" in out


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--tier", "fidelity"), "--candidates"),
        (("--tier", "fidelity", "--candidates", "reference,reference"), "at least 3"),
        (("--candidate", "missing.py"), "no candidate file"),
        (("--candidate", "no_such_builtin"), "no built-in candidate"),
        (("--slo", "ttft=soon"), "cannot read SLO"),
        (("--layers", 1), "--layers must be >= 2"),
        (("--max-len", 1), "max_len must be >= 2"),
        (("--model", "no-such-model"), "unknown model"),
        (("--block-size", 12), "block_size must be a power of two"),
    ],
)
def test_bad_options_exit_2(monkeypatch, capsys, args, needle):
    code, _, err = in_process(monkeypatch, capsys, "--model", "tiny-llama", *args)
    assert code == 2 and needle in err.replace("\n", " ")


def test_candidate_references_carry_knobs():
    c = Candidate.parse("reference:nonce=3:label=x")
    assert c.knobs == {"nonce": 3, "label": "x"} and c.name == "reference"
    with pytest.raises(PolyinferError, match="cannot read knob"):
        Candidate.parse("reference:nonce")


def test_progress_bar_travels_to_the_worker():
    bar = pickle.loads(pickle.dumps(ReplayBar()))
    bar(1, 2)
    bar(2, 2)
    assert bar.bar is not None and bar.bar.finished


def test_profile_tier_breaks_a_decode_step_down(trace_file, monkeypatch, capsys):
    code, out, err = in_process(monkeypatch, capsys, "--model", "tiny-llama", "--traffic", trace_file,
                                "--tier", "profile", "--candidate", "fast:decode_attention=batched", "--json")
    assert code == 0, err
    result = json.loads(out)["result"]
    assert result["candidate"].startswith("fast@") and result["device"] == "cpu"
    times = [op["us_per_step"] for op in result["ops"]]
    assert times and times == sorted(times, reverse=True)
    code, out, err = in_process(monkeypatch, capsys, "--model", "tiny-llama", "--traffic", trace_file,
                                "--tier", "profile")
    assert code == 0, err
    assert "reference@" in out and "us/step" in out and "aten::" in out
